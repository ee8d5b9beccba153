"""The peer check behind `cargo xtask peers`: the libraries users load checkpoints with
read what `blockscale quantize` writes as blockscale reads it, and ModelOpt's own
NVFP4 quantizer gives the bytes `--recipe modelopt` writes.

Runs with PYTHONPATH at target/peers (PyTorch, compressed-tensors, nvidia-modelopt,
installed by the xtask from PyPI), on the CPU. Not part of CI.

usage:
  peers.py make-checkpoint DIR ACTS         weights and config.json in DIR, activations in ACTS
  peers.py ct-dequantize QDIR OUT [--dtype bf16|f16|f32]
                                            compressed-tensors' CompressedTensorsDequantizer
  peers.py fp8block-dequantize QDIR OUT [--dtype bf16|f16|f32]
                                            compressed-tensors' FP8BlockDequantizer (DeepSeek layout)
  peers.py compare PEER OURS                every weight of PEER, bit for bit in OURS
  peers.py modelopt-nvfp4 ORIG QDIR [--calibration ACTS]
                                            NVFP4QTensor.quantize vs the written bytes
  peers.py modelopt-fp8 ORIG QDIR           ModelOpt's FP8 export (per tensor) vs the written bytes

Every comparison prints one JSON line {"same": bool, "detail": str} and exits 0; the
xtask makes the table. Other failures (a peer that raises) exit nonzero.
"""

import argparse
import glob
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# A transformer-like layer set: shapes that are multiples of every block (16, 32, 128),
# plus the cases the recipes treat specially.
SHAPES = {
    "model.layers.0.self_attn.q_proj.weight": (256, 512),
    "model.layers.0.self_attn.o_proj.weight": (256, 256),
    "model.layers.0.mlp.up_proj.weight": (384, 256),
    "model.layers.0.mlp.down_proj.weight": (256, 384),
    "model.layers.1.mlp.gate_proj.weight": (1024, 2048),
}


def make_checkpoint(out_dir, acts_path):
    """bf16 weights with heavy tails and outlier channels, one all-zero 16x128 region
    (ModelOpt's zero-block rule), one region a million times smaller than the tensor's
    amax (its per-block scale floor), a norm and an embedding (never quantized)."""
    g = torch.Generator().manual_seed(0x5EED)
    tensors = {}
    for name, (n, k) in SHAPES.items():
        w = (torch.rand(n, k, generator=g) - 0.5) + (torch.rand(n, k, generator=g) - 0.5)
        w *= 0.02
        outliers = torch.rand(n, k, generator=g) < 1 / 512
        w[outliers] *= 30
        w[:, 7] *= 8  # an outlier input channel
        if name.endswith("q_proj.weight"):
            w[0:16, 0:128] = 0
            w[16:32, 0:128] *= 1e-6
        tensors[name] = w.to(torch.bfloat16)
    tensors["model.layers.0.input_layernorm.weight"] = torch.ones(256, dtype=torch.bfloat16)
    tensors["model.embed_tokens.weight"] = (torch.randn(64, 256, generator=g) * 0.02).to(torch.bfloat16)
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    # Recorded activations for --calibration, one per layer.
    acts = {name.removesuffix(".weight"): torch.randn(8, k, generator=g).to(torch.bfloat16) * (i + 1) for i, (name, (n, k)) in enumerate(SHAPES.items())}
    save_file(acts, acts_path)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 1,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def load_dir(path):
    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise SystemExit(f"no .safetensors under {path}")
    tensors = {}
    for f in files:
        tensors.update(load_file(f))
    return tensors


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def ct_dequantize(qdir, out, dtype):
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    conv = CompressedTensorsDequantizer(qdir, dtype=DTYPES[dtype])
    save_file({k: v.contiguous() for k, v in conv.validate(load_dir(qdir)).items()}, out)


def fp8block_dequantize(qdir, out, dtype):
    from compressed_tensors.entrypoints.convert.converters.fp8block_dequantizer import FP8BlockDequantizer

    conv = FP8BlockDequantizer.from_pretrained(qdir, dtype=DTYPES[dtype])
    save_file({k: v.contiguous() for k, v in conv.validate(load_dir(qdir)).items()}, out)


def report(same, detail):
    print(json.dumps({"same": bool(same), "detail": detail}))


def bits(t):
    """The raw bits of a tensor as integers of its width (NaNs compare by pattern)."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(view)


def compare(peer_path, ours_path):
    peer, ours = load_dir(peer_path), load_dir(ours_path)
    weights = [n for n in peer if n.endswith(".weight") and n in SHAPES]
    if not weights:
        return report(False, "the peer produced none of the quantized weights")
    diffs = []
    total = 0
    for name in sorted(weights):
        if name not in ours:
            diffs.append(f"{name}: missing from blockscale's output")
            continue
        p, o = peer[name], ours[name]
        if p.dtype != o.dtype or p.shape != o.shape:
            diffs.append(f"{name}: peer {p.dtype} {list(p.shape)}, blockscale {o.dtype} {list(o.shape)}")
            continue
        total += p.numel()
        neq = bits(p) != bits(o)
        if neq.any():
            d = (p.double() - o.double()).abs()
            diffs.append(f"{name}: {int(neq.sum())} of {p.numel()} differ (max |diff| {float(d.max()):.3g})")
    if diffs:
        return report(False, "; ".join(diffs))
    report(True, f"{len(weights)} weights, {total} values bit for bit")


def modelopt_tensors(qdir):
    t = load_dir(qdir)
    return t, [n for n in SHAPES if n in t]


def modelopt_weights(orig_path, qdir):
    """The original tensors, blockscale's ModelOpt tensors, and (name, layer prefix) of
    each quantized weight."""
    ours, names = modelopt_tensors(qdir)
    return load_dir(orig_path), ours, [(n, n.removesuffix(".weight")) for n in names]


def modelopt_nvfp4(orig_path, qdir, acts_path):
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    orig, ours, weights = modelopt_weights(orig_path, qdir)
    if not weights:
        return report(False, "no quantized weight in blockscale's output")
    acts = load_file(acts_path) if acts_path else {}
    diffs = []
    for name, p in weights:
        q, scale, scale2 = NVFP4QTensor.quantize(orig[name], 16)
        checks = [
            ("weight", q._quantized_data.to(torch.uint8), ours[f"{p}.weight"]),
            ("weight_scale", scale.view(torch.uint8), ours[f"{p}.weight_scale"].view(torch.uint8)),
            ("weight_scale_2", scale2.float().reshape(()), ours[f"{p}.weight_scale_2"].float().reshape(())),
        ]
        if p in acts:
            # ModelOpt's activation scale: amax / (maxbound * 448), maxbound 6 for NVFP4
            # (NVFP4QTensor.get_activation_scaling_factor).
            want_input = (acts[p].abs().amax().float() / (6.0 * 448.0)).reshape(())
            checks.append(("input_scale", want_input, ours[f"{p}.input_scale"].float().reshape(())))
        for part, want, got in checks:
            if want.shape != got.shape:
                diffs.append(f"{p}.{part}: ModelOpt {list(want.shape)}, blockscale {list(got.shape)}")
            elif (bits(want) != bits(got)).any():
                n = int((bits(want) != bits(got)).sum())
                diffs.append(f"{p}.{part}: {n} of {want.numel()} bytes/values differ")
    if diffs:
        return report(False, "; ".join(diffs))
    extra = ", input_scale" if acts else ""
    report(True, f"{len(weights)} weights: packed E2M1, E4M3 block scales, weight_scale_2{extra} identical")


def modelopt_fp8(orig_path, qdir):
    """ModelOpt's FP8 export: the weight quantizer's max calibration gives amax, the
    scale is `amax.float() / maxbound` (get_scaling_factor; maxbound 448 for E4M3), and
    `to_quantized_weight` writes the codes. FP8QTensor.quantize is not the export path:
    it computes the scale in the weight's dtype."""
    from modelopt.torch.export.model_config import QUANTIZATION_FP8
    from modelopt.torch.export.quant_utils import to_quantized_weight
    from modelopt.torch.quantization.utils import reduce_amax

    orig, ours, weights = modelopt_weights(orig_path, qdir)
    if not weights:
        return report(False, "no quantized weight in blockscale's output")
    diffs = []
    for name, p in weights:
        scale = reduce_amax(orig[name]).float() / 448.0
        want_w = to_quantized_weight(orig[name], scale, QUANTIZATION_FP8).view(torch.uint8)
        got_w = ours[f"{p}.weight"].view(torch.uint8)
        want_s = scale.float().reshape(())
        got_s = ours[f"{p}.weight_scale"].float().reshape(())
        if (bits(want_s) != bits(got_s)).any():
            diffs.append(f"{p}.weight_scale: ModelOpt {float(want_s)!r}, blockscale {float(got_s)!r}")
        if want_w.shape != got_w.shape:
            diffs.append(f"{p}.weight: ModelOpt {list(want_w.shape)}, blockscale {list(got_w.shape)}")
        elif (want_w != got_w).any():
            diffs.append(f"{p}.weight: {int((want_w != got_w).sum())} of {want_w.numel()} bytes differ")
    if diffs:
        return report(False, "; ".join(diffs))
    report(True, f"{len(weights)} weights: E4M3 bytes and weight_scale identical")


# The subcommands: the function each calls and its arguments, in order ("--dtype": the
# output dtype; "--calibration": the activations quantize was calibrated with).
COMMANDS = {
    "make-checkpoint": (make_checkpoint, ["dir", "acts"]),
    "ct-dequantize": (ct_dequantize, ["qdir", "out", "--dtype"]),
    "fp8block-dequantize": (fp8block_dequantize, ["qdir", "out", "--dtype"]),
    "compare": (compare, ["peer", "ours"]),
    "modelopt-nvfp4": (modelopt_nvfp4, ["orig", "qdir", "--calibration"]),
    # --calibration is accepted as for modelopt-nvfp4; the FP8 check does not use it.
    "modelopt-fp8": (lambda orig, qdir, _calibration: modelopt_fp8(orig, qdir), ["orig", "qdir", "--calibration"]),
}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for command, (_, names) in COMMANDS.items():
        p = sub.add_parser(command)
        for n in names:
            if n == "--dtype":
                p.add_argument(n, choices=sorted(DTYPES), default="bf16")
            elif n == "--calibration":
                p.add_argument(n, help="the activations quantize was calibrated with")
            else:
                p.add_argument(n)
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    f, names = COMMANDS[a.cmd]
    f(*(getattr(a, n.lstrip("-")) for n in names))


if __name__ == "__main__":
    sys.exit(main())
