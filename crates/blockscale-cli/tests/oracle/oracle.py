"""An independent checkpoint oracle for tests/oracle.rs: dequantizers for the NVFP4
conventions `blockscale quantize` writes; checkers of the layouts it writes by a rule
of its own (DeepSeek-V3 FP8 blocks, ModelOpt FP8 per tensor, compressed-tensors INT4
groups), which recompute every scale and code
from the original weights by the published recipe; and writers of the third-party
layouts `blockscale dequantize` reads (OpenAI gpt-oss MXFP4, DeepSeek-V3 FP8, ModelOpt
FP8 per tensor, compressed-tensors MXFP4, INT4 and FP8) together with the values a
correct dequantizer must produce.

Written from the formats' published descriptions only, with numpy, ml_dtypes and
safetensors (run with PYTHONPATH pointing at what `cargo xtask setup-python` installs).

usage:
  oracle.py dequantize-modelopt IN OUT
  oracle.py dequantize-compressed IN OUT
  oracle.py write-gptoss OUT EXPECTED --seed S
  oracle.py write-deepseek OUT EXPECTED --seed S
  oracle.py write-modelopt-fp8 OUT EXPECTED --seed S
  oracle.py check-deepseek ORIGINAL QUANTIZED OUT
  oracle.py check-modelopt-fp8 ORIGINAL QUANTIZED [--calibration ACTS]
  oracle.py check-ct-int4 ORIGINAL QUANTIZED --group G
  oracle.py dequantize-ct IN OUT
  oracle.py write-ct-mxfp4 OUT_DIR EXPECTED --seed S
  oracle.py write-ct-int4 OUT_DIR EXPECTED --seed S
  oracle.py write-ct-fp8 OUT_DIR EXPECTED --seed S
  oracle.py selftest

Every file this script writes as a result has the metadata key `dequantized`: a JSON
list of the tensors that came out of (or must come out of) dequantization, all F32.
Every other tensor is a non-quantized one converted exactly to F32.

On safetensors' Python side: `safetensors.numpy.load_file` knows only numpy's own
dtypes (BF16, F8_E4M3, F8_E8M0 fail), and `safe_open(framework="np")` builds arrays
of dtypes numpy alone cannot name. So files are read with `safetensors.deserialize`,
which returns every tensor's dtype string, shape and raw bytes whatever the dtype, and
the bytes are viewed here with numpy/ml_dtypes types. Writing with
`safetensors.numpy.save_file` works for ml_dtypes arrays: it names dtypes by the
numpy dtype name, and bfloat16, float8_e4m3fn and float8_e8m0fnu are names it knows.
"""

import argparse
import json
import os
import sys
import tempfile

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

# The raw bytes are little-endian; viewing them with native dtypes needs a
# little-endian machine (every machine this runs on is one).
assert sys.byteorder == "little"

# safetensors dtype strings -> the numpy type that views their bytes.
DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "U8": np.uint8,
    "I8": np.int8,
    "I32": np.int32,
    "I64": np.int64,
}

# Float dtypes whose every value converts exactly to float32.
EXACT_TO_F32 = {"F32", "F16", "BF16"}

# Float dtypes a compressed-tensors scale may have: every value converts exactly to float32.
SCALE_DTYPES = EXACT_TO_F32

# E2M1 (FP4) code -> value: bit 3 is the sign, bits 2..0 index 0, .5, 1, 1.5, 2, 3, 4, 6.
# Code 8 is negative zero.
E2M1 = np.array(
    [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
    dtype=np.float32,
)


def read(path):
    """Every tensor of a safetensors file: {name: (dtype string, numpy array)}."""
    with open(path, "rb") as f:
        raw = f.read()
    tensors = {}
    for name, info in safetensors.deserialize(raw):
        dtype = info["dtype"]
        if dtype not in DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {dtype}, which this oracle does not read")
        array = np.frombuffer(bytes(info["data"]), dtype=DTYPES[dtype]).reshape(info["shape"])
        tensors[name] = (dtype, array)
    return tensors


def write(path, tensors, dequantized=None, metadata=None):
    """Writes {name: array}; `dequantized` lists the tensors to name in the metadata."""
    meta = dict(metadata or {})
    if dequantized is not None:
        meta["dequantized"] = json.dumps(sorted(dequantized))
    # (np.ascontiguousarray would turn a 0-d scalar, ModelOpt's scale shape [], into [1].)
    save_file({k: np.require(v, requirements="C") for k, v in tensors.items()}, path, metadata=meta or None)


def to_f32_exact(name, dtype, array):
    """A non-quantized tensor as float32, refusing any dtype that would not be exact."""
    if dtype not in EXACT_TO_F32:
        raise SystemExit(f"tensor {name}: dtype {dtype} is neither quantized nor an exact float")
    return array.astype(np.float32)


def unpack_fp4(packed):
    """[..., K/2] bytes -> [..., K] E2M1 codes: element 2j is the low nibble of byte j,
    element 2j+1 the high nibble."""
    codes = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    return codes


def pack_fp4(codes):
    """The inverse of unpack_fp4 (codes 0..15, even count on the last axis)."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def nvfp4_products(packed, scale, name):
    """e2m1(q[n, k]) * float(scale[n, k // 16]) as float32 [N, K]. Both factors have at
    most 2 and 4 significant bits, so this float32 product is exact."""
    codes = unpack_fp4(packed)
    n, k = codes.shape
    if k % 16 or scale.shape != (n, k // 16):
        raise SystemExit(f"{name}: codes [{n}, {k}] need a scale of [{n}, {k // 16}], got {list(scale.shape)}")
    block_scale = np.repeat(scale.astype(np.float32), 16, axis=1)
    return E2M1[codes] * block_scale


def scalar_f32(name, dtype, array):
    if dtype != "F32" or array.size != 1 or array.ndim > 1:
        raise SystemExit(f"{name}: expected an F32 scalar of shape [] or [1], got {dtype} {list(array.shape)}")
    return np.float32(array.reshape(-1)[0])


def dequantize_nvfp4(in_path, out_path, codes_suffix, scale2_suffix, extra_suffixes, combine):
    """The two NVFP4 conventions differ only in the tensor names and how the per-tensor
    scale enters; `combine(products, scale2)` applies it."""
    tensors = read(in_path)
    consumed, out, dequantized = set(), {}, []
    for name, (dtype, packed) in tensors.items():
        if not name.endswith(codes_suffix) or dtype != "U8":
            continue
        prefix = name[: -len(codes_suffix)]
        scale_name, scale2_name = prefix + ".weight_scale", prefix + scale2_suffix
        for needed in (scale_name, scale2_name):
            if needed not in tensors:
                raise SystemExit(f"{name} is packed FP4 but {needed} is missing")
        scale_dtype, scale = tensors[scale_name]
        if scale_dtype != "F8_E4M3":
            raise SystemExit(f"{scale_name}: expected F8_E4M3, got {scale_dtype}")
        products = nvfp4_products(packed, scale, name)
        scale2 = scalar_f32(scale2_name, *tensors[scale2_name])
        weight = combine(products, scale2)
        assert weight.dtype == np.float32
        out[prefix + ".weight"] = weight
        dequantized.append(prefix + ".weight")
        consumed.update({name, scale_name, scale2_name}, (prefix + s for s in extra_suffixes))
    for name, (dtype, array) in tensors.items():
        if name not in consumed:
            if name in out:
                raise SystemExit(f"{name} is both a quantized layer's output and a tensor of the input")
            out[name] = to_f32_exact(name, dtype, array)
    write(out_path, out, dequantized)


def dequantize_modelopt(in_path, out_path):
    """NVIDIA ModelOpt NVFP4: P.weight (U8 [N, K/2]), P.weight_scale (F8_E4M3 [N, K/16]),
    P.weight_scale_2 (F32, a decode scale): W = (e2m1 * scale) * scale_2, rounded once
    to float32 (the first product is exact)."""
    dequantize_nvfp4(
        in_path, out_path, ".weight", ".weight_scale_2", [".input_scale"], lambda p, s2: p * s2
    )


def dequantize_compressed(in_path, out_path):
    """compressed-tensors nvfp4-pack-quantized: P.weight_packed (U8 [N, K/2]),
    P.weight_scale (F8_E4M3 [N, K/16]), P.weight_global_scale (F32 [1], an encode
    scale, 448 * 6 / amax): W = (e2m1 * scale) / global_scale, a true float32 division."""
    dequantize_nvfp4(
        in_path,
        out_path,
        ".weight_packed",
        ".weight_global_scale",
        [".input_global_scale"],
        lambda p, gs: p / gs,
    )


def bf16(rng, shape, scale=1.0):
    """Random normal bf16 values (bf16 of a float32 sample)."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(ml_dtypes.bfloat16)


def write_pair(out_path, expected_path, quantized, expected, dequantized, others):
    """Writes a third-party checkpoint and its expected dequantization: `others` (plain
    tensors) go unchanged into both, as float32 in the expected file."""
    for name, array in others.items():
        quantized[name] = array
        expected[name] = array.astype(np.float32)
    write(out_path, quantized, metadata={"format": "pt"})
    write(expected_path, expected, dequantized)


def mxfp4_expected(blocks, scales):
    """gpt-oss MXFP4 -> float32, as transformers' convert_moe_packed_tensors arranges it:
    blocks [E, R, G, 16] (32 FP4 values per block, low nibble = even element) and
    scales [E, R, G] (E8M0 bytes: 2^(s - 127)) give LUT[code] * 2^(s - 127) as
    [E, R, G * 32], returned transposed to [E, G * 32, R]. The power-of-two scaling is
    exact in float32 for the scale bytes used here."""
    e, r, g, _ = blocks.shape
    codes = unpack_fp4(blocks)  # [E, R, G, 32]
    values = np.ldexp(E2M1[codes], scales.astype(np.int32)[..., None] - 127)
    return np.ascontiguousarray(values.reshape(e, r, g * 32).transpose(0, 2, 1))


def write_gptoss(out_path, expected_path, seed):
    """An OpenAI gpt-oss-layout MoE layer (E experts, hidden H, intermediate I)."""
    rng = np.random.default_rng(seed)
    e, h, i = 2, 64, 96
    prefix = "model.layers.0.mlp.experts."
    quantized, expected, dequantized = {}, {}, []
    for proj, rows, k in (("gate_up_proj", 2 * i, h), ("down_proj", h, i)):
        # Every one of the 16 codes, uniformly; scale bytes in a moderate range (no 0xFF NaN).
        codes = rng.integers(0, 16, size=(e, rows, k // 32, 32), dtype=np.uint8)
        scales = rng.integers(110, 141, size=(e, rows, k // 32), dtype=np.uint8)
        bias = bf16(rng, (e, rows), 0.1)
        quantized[prefix + proj + "_blocks"] = pack_fp4(codes)
        quantized[prefix + proj + "_scales"] = scales
        quantized[prefix + proj + "_bias"] = bias
        expected[prefix + proj] = mxfp4_expected(quantized[prefix + proj + "_blocks"], scales)
        expected[prefix + proj + "_bias"] = bias.astype(np.float32)
        dequantized.append(prefix + proj)
    others = {
        "model.layers.0.input_layernorm.weight": bf16(rng, (h,)) + ml_dtypes.bfloat16(1),
        "model.layers.0.self_attn.q_proj.weight": bf16(rng, (64, h), 0.05),
    }
    write_pair(out_path, expected_path, quantized, expected, dequantized, others)


def random_e4m3(rng, shape):
    """Uniformly random finite E4M3 codes: every byte but the NaNs 0x7F and 0xFF."""
    finite = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    return finite[rng.integers(0, finite.size, size=shape)].view(ml_dtypes.float8_e4m3fn)


def write_deepseek(out_path, expected_path, seed):
    """DeepSeek-V3 FP8: W (F8_E4M3 [N, K]) and weight_scale_inv (F32 [ceil(N/128),
    ceil(K/128)]); W[n, k] = float(w[n, k]) * weight_scale_inv[n // 128, k // 128], one
    float32 multiply (the stored value multiplies, despite its name)."""
    rng = np.random.default_rng(seed)
    quantized, expected, dequantized = {}, {}, []
    # The first weight's N and K are not multiples of 128: the last tile row and column
    # are partial.
    shapes = {"model.layers.0.mlp.down_proj.weight": (200, 300), "model.layers.0.self_attn.o_proj.weight": (256, 128)}
    for name, (n, k) in shapes.items():
        w = random_e4m3(rng, (n, k))
        tiles = (-(-n // 128), -(-k // 128))
        # Positive scales of the size amax / 448 takes in real checkpoints, with full
        # float32 mantissas so that the products round.
        scale_inv = rng.uniform(1e-4, 3e-2, size=tiles).astype(np.float32)
        quantized[name] = w
        quantized[name + "_scale_inv"] = scale_inv
        full_scale = np.repeat(np.repeat(scale_inv, 128, axis=0), 128, axis=1)[:n, :k]
        expected[name] = w.astype(np.float32) * full_scale
        dequantized.append(name)
    others = {
        "model.layers.0.post_attention_layernorm.weight": bf16(rng, (300,)) + ml_dtypes.bfloat16(1),
        # A 2-D bf16 weight that is not quantized (the MoE router keeps full precision).
        "model.layers.0.mlp.gate.weight": bf16(rng, (8, 300), 0.02),
    }
    write_pair(out_path, expected_path, quantized, expected, dequantized, others)


def write_modelopt_fp8(out_path, expected_path, seed):
    """NVIDIA ModelOpt FP8 (quant_algo FP8, per-tensor): `weight` F8_E4M3 [N, K],
    `weight_scale` F32 of shape [] (one value: amax / 448 at export) and `input_scale` F32
    [] for the activations; W[n, k] = float(weight[n, k]) * weight_scale, one float32
    multiply. The layer's other tensors stay in bf16."""
    rng = np.random.default_rng(seed)
    quantized, expected, dequantized = {}, {}, []
    for name, (n, k) in (
        ("model.layers.0.self_attn.q_proj.weight", (96, 160)),
        ("model.layers.0.mlp.down_proj.weight", (64, 200)),
    ):
        w = random_e4m3(rng, (n, k))
        scale = np.array(rng.uniform(1e-4, 3e-2), dtype=np.float32)
        quantized[name] = w
        quantized[name[: -len("weight")] + "weight_scale"] = scale
        quantized[name[: -len("weight")] + "input_scale"] = np.array(rng.uniform(1e-3, 1e-1), dtype=np.float32)
        expected[name] = w.astype(np.float32) * scale
        dequantized.append(name)
    others = {
        "model.layers.0.input_layernorm.weight": bf16(rng, (160,)) + ml_dtypes.bfloat16(1),
        "lm_head.weight": bf16(rng, (32, 160), 0.02),
    }
    # ModelOpt's own input scales are not weights: a dequantized checkpoint drops them.
    write_pair(out_path, expected_path, quantized, expected, dequantized, others)


def e4m3_of_quotient(x, scale, via=None):
    """E4M3 codes (ml_dtypes: round to nearest even) of the float32 quotient x / scale,
    elementwise (scale broadcasts), first rounded to the dtype `via` when given. Where
    the scale is 0 (an all-zero block or tensor) the codes are 0: the published recipes
    would divide 0 by 0 there (NaN); blockscale documents zero codes with a zero scale
    instead, and that is what is checked."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = x / scale
        if via is not None:
            q = q.astype(via)
        q = q.astype(ml_dtypes.float8_e4m3fn)
    return np.where(np.broadcast_to(scale, x.shape) == 0, np.zeros_like(q), q)


def same_bytes(what, got, want):
    """Fails naming the first differing element unless `got` and `want` are the same bytes."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise SystemExit(f"{what}: {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}")
    got_bytes, want_bytes = got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)
    differ = np.flatnonzero(got_bytes != want_bytes)
    if differ.size:
        i = int(differ[0])
        raise SystemExit(
            f"{what}: {differ.size} of {got_bytes.size} bytes differ; first at flat byte {i}: "
            f"{got_bytes[i]:#04x}, expected {want_bytes[i]:#04x}"
        )


def quantized_tensor(q, name, dtype, shape):
    if name not in q:
        raise SystemExit(f"{name} is missing from the quantized checkpoint")
    got_dtype, array = q[name]
    if got_dtype != dtype or array.shape != tuple(shape):
        raise SystemExit(f"{name}: {got_dtype} {list(array.shape)}, expected {dtype} {list(shape)}")
    return array


def check_copies(orig, q, consumed):
    """Every tensor of `q` is accounted for: a quantized layer's (`consumed`) or an
    original tensor copied with its dtype and bytes unchanged."""
    for name in q:
        if name in consumed:
            continue
        if name not in orig:
            raise SystemExit(f"{name}: in the quantized checkpoint but neither original nor a quantized layer's")
        if q[name][0] != orig[name][0] or q[name][1].tobytes() != orig[name][1].tobytes():
            raise SystemExit(f"{name}: a copied tensor changed")


def check_deepseek(original, quantized, out_path):
    """DeepSeek-V3 FP8 as written from `original`: per 128x128 tile (the last row and
    column of tiles may be partial) weight_scale_inv = amax(|w|) / 448 in float32, and
    weight = e4m3(w / scale) with the tile's scale, both compared byte for byte. Writes
    the dequantization by DeepSeek's formula W = float(weight) * weight_scale_inv to
    `out_path` (others exact in float32)."""
    orig, q = read(original), read(quantized)
    out, dequantized, consumed = {}, [], set()
    for name, (dtype, w) in orig.items():
        scale_name = name + "_scale_inv"
        if not name.endswith(".weight") or scale_name not in q:
            out[name] = to_f32_exact(name, dtype, w)
            continue
        x = to_f32_exact(name, dtype, w)
        n, k = x.shape
        tr, tc = -(-n // 128), -(-k // 128)
        scale = np.empty((tr, tc), dtype=np.float32)
        for i in range(tr):
            for j in range(tc):
                amax = np.abs(x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]).max()
                scale[i, j] = np.float32(amax) / np.float32(448)
        got_scale = quantized_tensor(q, scale_name, "F32", (tr, tc))
        same_bytes(scale_name, got_scale, scale)
        full_scale = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:n, :k]
        codes = quantized_tensor(q, name, "F8_E4M3", (n, k))
        same_bytes(name, codes, e4m3_of_quotient(x, full_scale))
        full_inv = np.repeat(np.repeat(got_scale, 128, axis=0), 128, axis=1)[:n, :k]
        out[name] = codes.astype(np.float32) * full_inv
        dequantized.append(name)
        consumed.update({name, scale_name})
    check_copies(orig, q, consumed)
    if not dequantized:
        raise SystemExit(f"{quantized}: no DeepSeek FP8 weight found")
    write(out_path, out, dequantized)
    print(f"deepseek: {len(dequantized)} weights match the recipe byte for byte")


def check_modelopt_fp8(original, quantized, calibration):
    """ModelOpt FP8 per tensor as written from `original`: weight_scale (F32 of shape
    []) = amax(|w|) / 448 over the whole tensor in float32, weight = e4m3(w / scale) with
    a true float32 division (ModelOpt divides by its scale) whose quotient is first
    rounded to the weight's own dtype (ModelOpt's export divides the bf16 weight tensor by
    a 0-dim float32 tensor in PyTorch, which gives a bf16 tensor), compared byte for byte; with
    `calibration`, input_scale = amax(|activations|) / 448 for the layers it has
    (its tensor named as the layer, or as the weight) and no input_scale elsewhere."""
    orig, q = read(original), read(quantized)
    acts = read(calibration) if calibration else {}
    checked, consumed = [], set()
    for name, (dtype, w) in orig.items():
        prefix = name[: -len(".weight")] if name.endswith(".weight") else None
        if prefix is None or prefix + ".weight_scale" not in q:
            continue
        x = to_f32_exact(name, dtype, w)
        scale = np.float32(np.abs(x).max()) / np.float32(448)
        got_scale = quantized_tensor(q, prefix + ".weight_scale", "F32", ())
        same_bytes(prefix + ".weight_scale", got_scale, np.array(scale, dtype=np.float32))
        codes = quantized_tensor(q, name, "F8_E4M3", x.shape)
        same_bytes(name, codes, e4m3_of_quotient(x, scale, via=DTYPES[dtype]))
        consumed.update({name, prefix + ".weight_scale"})
        act = acts.get(prefix) or acts.get(name)
        if act is None:
            if prefix + ".input_scale" in q:
                raise SystemExit(f"{prefix}.input_scale: written without a calibration entry")
        else:
            a = np.abs(to_f32_exact(prefix, *act)).max()
            want = np.array(np.float32(a) / np.float32(448), dtype=np.float32)
            same_bytes(prefix + ".input_scale", quantized_tensor(q, prefix + ".input_scale", "F32", ()), want)
            consumed.add(prefix + ".input_scale")
        checked.append(name)
    check_copies(orig, q, consumed)
    if not checked:
        raise SystemExit(f"{quantized}: no ModelOpt FP8 weight found")
    print(f"modelopt fp8: {len(checked)} weights match the recipe byte for byte")
def check_ct_int4(original, quantized, group):
    """compressed-tensors pack-quantized INT4 as written from `original` with groups of
    `group` along K, by blockscale's documented rule: per group, weight_scale (F16) =
    float16(float32(amax(|w|)) / 7), saturated to the largest float16 where that
    overflows; q = round-half-even(float32(w) / float32(scale)) clamped to -8..7, q = 0
    where the scale is 0; weight_packed = q + 8 packed into int32 words (the layout
    below); weight_shape (I64) = [N, K]. Everything compared byte for byte."""
    orig, q = read(original), read(quantized)
    checked, consumed = [], set()
    for name, (dtype, w) in orig.items():
        prefix = name[: -len(".weight")] if name.endswith(".weight") else None
        if prefix is None or prefix + ".weight_packed" not in q:
            continue
        x = to_f32_exact(name, dtype, w)
        n, k = x.shape
        if k % group:
            raise SystemExit(f"{name}: K = {k} is not a multiple of {group}")
        groups = x.reshape(n, k // group, group)
        amax = np.abs(groups).max(axis=2).astype(np.float32)
        with np.errstate(over="ignore"):
            scale = (amax / np.float32(7)).astype(np.float16)
        scale = np.where(np.isinf(scale), np.float16(np.finfo(np.float16).max), scale)
        got_scale = quantized_tensor(q, prefix + ".weight_scale", "F16", (n, k // group))
        same_bytes(prefix + ".weight_scale", got_scale, scale)
        divisor = scale.astype(np.float32)[:, :, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            quotient = groups / divisor
        values = np.where(divisor == 0, np.float32(0), np.clip(np.rint(quotient), -8, 7)).reshape(n, k)
        packed = quantized_tensor(q, prefix + ".weight_packed", "I32", (n, k // 8))
        same_bytes(prefix + ".weight_packed", packed, pack_int32_nibbles(values.astype(np.int64), axis=1))
        shape = quantized_tensor(q, prefix + ".weight_shape", "I64", (2,))
        same_bytes(prefix + ".weight_shape", shape, np.array([n, k], dtype=np.int64))
        consumed.update({prefix + s for s in (".weight_packed", ".weight_scale", ".weight_shape")})
        checked.append(name)
    check_copies(orig, q, consumed)
    if not checked:
        raise SystemExit(f"{quantized}: no pack-quantized weight found")
    print(f"compressed-tensors int4 (groups of {group}): {len(checked)} weights match the rule byte for byte")


# ---- compressed-tensors (vLLM / llm-compressor), from the package's published layout:
#
# - pack-quantized (integer weights, here num_bits 4): the values q in -8..7 are stored as
#   q + 8 and packed densely into int32 words along the last axis, element i of a word in
#   bits 4i..4i+3 (so eight per word, a row padded with zero bits to whole words);
#   `weight_shape` (int64 [2]) holds [N, K]; `weight_scale` [N, K / group] (the weight's
#   float dtype; [N, 1] per channel); an asymmetric weight adds `weight_zero_point`,
#   values in -8..7 packed the same way but along the first axis ([ceil(N / 8), G]).
#   W = (q - zero_point) * scale.
# - mxfp4-pack-quantized: `weight_packed` U8 [N, K/2] (E2M1 pairs, even element in the
#   low nibble), `weight_scale` U8 [N, K/32] holding biased exponents: W = e2m1 * 2^(s - 127).
# - float-quantized: `weight` F8_E4M3 [N, K] and `weight_scale` [1] (strategy tensor),
#   [N, 1] (channel) or [ceil(N/bh), ceil(K/bw)] (block, block_structure [bh, bw]):
#   W = float(w) * scale of the element's tile.


def pack_int32_nibbles(q, axis):
    """q (ints in -8..7, 2-D) -> int32 words: q + 8 packed eight to a word along `axis`."""
    u = (np.asarray(q, dtype=np.int64) + 8).astype(np.uint32)
    if axis == 0:
        u = u.T
    rows, cols = u.shape
    words = -(-cols // 8)
    padded = np.zeros((rows, words * 8), dtype=np.uint32)
    padded[:, :cols] = u
    parts = padded.reshape(rows, words, 8)
    packed = np.zeros((rows, words), dtype=np.uint32)
    for i in range(8):
        packed |= parts[:, :, i] << np.uint32(4 * i)
    packed = packed.view(np.int32)
    return np.ascontiguousarray(packed.T if axis == 0 else packed)


def unpack_int32_nibbles(words, count, axis):
    """The inverse of pack_int32_nibbles: `count` values along `axis`, in -8..7."""
    w = np.asarray(words).view(np.uint32)
    if axis == 0:
        w = w.T
    values = np.stack([(w >> np.uint32(4 * i)) & np.uint32(0xF) for i in range(8)], axis=-1)
    values = values.reshape(w.shape[0], -1)[:, :count].astype(np.int64) - 8
    return values.T if axis == 0 else values


def exact_f32(values64, name):
    """float64 values that must be float32 values (products of few significant bits)."""
    values = values64.astype(np.float32)
    if not np.array_equal(values.astype(np.float64), values64):
        raise SystemExit(f"{name}: a product is not exact in float32")
    return values


def ct_config(groups, format_name):
    return {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": format_name,
            "quantization_status": "compressed",
            "config_groups": groups,
            "ignore": ["lm_head"],
            "kv_cache_scheme": None,
        }
    }


def write_ct(out_dir, expected_path, quantized, expected, dequantized, others, config):
    """A compressed-tensors checkpoint folder (model.safetensors + config.json) and its
    expected dequantization."""
    os.makedirs(out_dir, exist_ok=True)
    write_pair(os.path.join(out_dir, "model.safetensors"), expected_path, quantized, expected, dequantized, others)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "torch_dtype": "bfloat16", **config}, f, indent=2)


def ct_others(rng, k):
    return {
        "model.layers.0.input_layernorm.weight": bf16(rng, (k,)) + ml_dtypes.bfloat16(1),
        "lm_head.weight": bf16(rng, (32, k), 0.02),
    }


def write_ct_mxfp4(out_dir, expected_path, seed):
    """compressed-tensors mxfp4-pack-quantized (MXFP4A16 preset)."""
    rng = np.random.default_rng(seed)
    quantized, expected, dequantized = {}, {}, []
    for name, (n, k) in (("model.layers.0.self_attn.q_proj", (96, 128)), ("model.layers.0.mlp.down_proj", (64, 192))):
        codes = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
        scales = rng.integers(100, 150, size=(n, k // 32), dtype=np.uint8)
        quantized[name + ".weight_packed"] = pack_fp4(codes)
        quantized[name + ".weight_scale"] = scales
        values = E2M1[codes].astype(np.float64) * np.exp2(np.repeat(scales.astype(np.float64) - 127, 32, axis=1))
        expected[name + ".weight"] = exact_f32(values, name)
        dequantized.append(name + ".weight")
    weights = {
        "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
        "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8",
    }
    config = ct_config({"group_0": {"targets": ["Linear"], "weights": weights}}, "mxfp4-pack-quantized")
    write_ct(out_dir, expected_path, quantized, expected, dequantized, ct_others(rng, 128), config)


def random_scales(rng, shape, dtype):
    """Positive scales of the size amax / 7 takes, in the scale dtype (full mantissas)."""
    return rng.uniform(1e-3, 3e-2, size=shape).astype(np.float32).astype(dtype)


def write_ct_int4(out_dir, expected_path, seed):
    """compressed-tensors pack-quantized W4A16: symmetric groups of 32 (F16 scales) and of
    128, per channel (K not a multiple of 8: a part-filled last word), and asymmetric
    groups of 128 with N not a multiple of 8 (zero points in a part-filled last word
    row), each a config group of its own."""
    rng = np.random.default_rng(seed)
    quantized, expected, dequantized, groups = {}, {}, [], {}
    layers = (
        ("model.layers.0.self_attn.q_proj", (64, 256), 32, True, np.float16),
        ("model.layers.0.self_attn.k_proj", (48, 256), 128, True, ml_dtypes.bfloat16),
        ("model.layers.0.self_attn.v_proj", (40, 196), None, True, ml_dtypes.bfloat16),
        ("model.layers.0.mlp.down_proj", (100, 384), 128, False, ml_dtypes.bfloat16),
    )
    for i, (name, (n, k), group, symmetric, scale_dtype) in enumerate(layers):
        g = k if group is None else group
        q = rng.integers(-8, 8, size=(n, k))
        scale = random_scales(rng, (n, k // g), scale_dtype)
        zp = np.zeros((n, k // g), dtype=np.int64) if symmetric else rng.integers(-8, 8, size=(n, k // g))
        quantized[name + ".weight_packed"] = pack_int32_nibbles(q, axis=1)
        quantized[name + ".weight_scale"] = scale
        quantized[name + ".weight_shape"] = np.array([n, k], dtype=np.int64)
        if not symmetric:
            quantized[name + ".weight_zero_point"] = pack_int32_nibbles(zp, axis=0)
        full_scale = np.repeat(scale.astype(np.float64), g, axis=1)
        expected[name + ".weight"] = exact_f32((q - np.repeat(zp, g, axis=1)) * full_scale, name)
        dequantized.append(name + ".weight")
        weights = {
            "num_bits": 4, "type": "int", "symmetric": symmetric, "dynamic": False,
            "strategy": "channel" if group is None else "group", "group_size": group,
            "actorder": "weight" if i == 1 else None, "observer": "minmax",
        }
        groups[f"group_{i}"] = {"targets": [f"re:.*{name.rsplit('.', 1)[1]}$"], "weights": weights}
    write_ct(out_dir, expected_path, quantized, expected, dequantized, ct_others(rng, 256), ct_config(groups, "pack-quantized"))


def write_ct_fp8(out_dir, expected_path, seed):
    """compressed-tensors float-quantized FP8: per tensor (F32 [1]), per channel (BF16
    [N, 1]) and 128 x 128 blocks (F32, N and K not multiples of 128), each a config
    group of its own with dynamic activations."""
    rng = np.random.default_rng(seed)
    quantized, expected, dequantized, groups = {}, {}, [], {}
    layers = (
        ("model.layers.0.self_attn.q_proj", (96, 160), "tensor"),
        ("model.layers.0.self_attn.o_proj", (80, 160), "channel"),
        ("model.layers.0.mlp.down_proj", (200, 300), "block"),
    )
    for i, (name, (n, k), strategy) in enumerate(layers):
        w = random_e4m3(rng, (n, k))
        if strategy == "tensor":
            scale = rng.uniform(1e-4, 3e-2, size=(1,)).astype(np.float32)
            full_scale = np.full((n, k), scale[0])
        elif strategy == "channel":
            scale = random_scales(rng, (n, 1), ml_dtypes.bfloat16)
            full_scale = np.repeat(scale.astype(np.float32), k, axis=1)
        else:
            scale = rng.uniform(1e-4, 3e-2, size=(-(-n // 128), -(-k // 128))).astype(np.float32)
            full_scale = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:n, :k]
        quantized[name + ".weight"] = w
        quantized[name + ".weight_scale"] = scale
        # One float32 multiply of two float32 values (the BF16 scale converts exactly).
        expected[name + ".weight"] = w.astype(np.float32) * full_scale.astype(np.float32)
        dequantized.append(name + ".weight")
        weights = {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": False}
        if strategy == "block":
            weights["block_structure"] = [128, 128]
        activations = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True}
        groups[f"group_{i}"] = {
            "targets": [f"re:.*{name.rsplit('.', 1)[1]}$"],
            "weights": weights,
            "input_activations": activations,
        }
    write_ct(out_dir, expected_path, quantized, expected, dequantized, ct_others(rng, 160), ct_config(groups, "float-quantized"))


def dequantize_ct(in_path, out_path):
    """Dequantizes a compressed-tensors file whose metadata carries its
    `quantization_config` (what `blockscale quantize --convention compressed-tensors`
    writes for one file) by the formulas above; every config group must use one format."""
    tensors = read(in_path)
    qc = json.loads(safetensors.safe_open(in_path, "np").metadata()["quantization_config"])
    if qc["quant_method"] != "compressed-tensors":
        raise SystemExit(f"{in_path}: not a compressed-tensors config")
    fmt = qc["format"]
    (group,) = qc["config_groups"].values()
    args = group["weights"]
    consumed, out, dequantized = set(), {}, []
    for name, (dtype, array) in tensors.items():
        if name.endswith(".weight_packed") and fmt == "pack-quantized":
            prefix = name[: -len(".weight_packed")]
            assert dtype == "I32" and args["num_bits"] == 4 and args["type"] == "int", (name, dtype, args)
            shape_dtype, shape = tensors[prefix + ".weight_shape"]
            assert shape_dtype == "I64", shape_dtype
            n, k = (int(x) for x in shape)
            scale_dtype, scale = tensors[prefix + ".weight_scale"]
            assert scale_dtype in SCALE_DTYPES, scale_dtype
            g = k if args["strategy"] == "channel" else args["group_size"]
            assert scale.shape == (n, k // g), (scale.shape, n, k, g)
            q = unpack_int32_nibbles(array, k, axis=1)
            zp = np.zeros((n, k // g), dtype=np.int64)
            if not args["symmetric"]:
                zp = unpack_int32_nibbles(tensors[prefix + ".weight_zero_point"][1], n, axis=0)
                consumed.add(prefix + ".weight_zero_point")
            values = (q - np.repeat(zp, g, axis=1)) * np.repeat(scale.astype(np.float64), g, axis=1)
            out[prefix + ".weight"] = exact_f32(values, name)
            consumed.update({name, prefix + ".weight_scale", prefix + ".weight_shape"})
        elif name.endswith(".weight_packed") and fmt == "mxfp4-pack-quantized":
            prefix = name[: -len(".weight_packed")]
            assert dtype == "U8" and args["group_size"] == 32, (name, dtype, args)
            scale_dtype, scale = tensors[prefix + ".weight_scale"]
            assert scale_dtype == "U8", scale_dtype
            codes = unpack_fp4(array)
            exponents = np.repeat(scale.astype(np.float64) - 127, 32, axis=1)
            out[prefix + ".weight"] = exact_f32(E2M1[codes].astype(np.float64) * np.exp2(exponents), name)
            consumed.update({name, prefix + ".weight_scale"})
        elif name.endswith(".weight") and dtype == "F8_E4M3" and fmt == "float-quantized":
            prefix = name[: -len(".weight")]
            assert args["num_bits"] == 8 and args["type"] == "float", args
            scale_dtype, scale = tensors[prefix + ".weight_scale"]
            assert scale_dtype in SCALE_DTYPES, scale_dtype
            n, k = array.shape
            if args["strategy"] == "block":
                bh, bw = args["block_structure"]
                assert scale.shape == (-(-n // bh), -(-k // bw)), scale.shape
                full = np.repeat(np.repeat(scale.astype(np.float32), bh, axis=0), bw, axis=1)[:n, :k]
            elif args["strategy"] == "channel":
                full = np.repeat(scale.astype(np.float32).reshape(n, 1), k, axis=1)
            else:
                full = np.full((n, k), scale.astype(np.float32).reshape(-1)[0])
            out[name] = array.astype(np.float32) * full
            consumed.update({name, prefix + ".weight_scale"})
        else:
            continue
        dequantized.append(name if name.endswith(".weight") else name[: -len("_packed")])
    for name, (dtype, array) in tensors.items():
        if name not in consumed:
            out[name] = to_f32_exact(name, dtype, array)
    write(out_path, out, dequantized)


def selftest():
    """Checks the pieces above against ml_dtypes and element-by-element Python loops."""
    # The code tables against ml_dtypes' own decoders.
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(E2M1.view(np.uint32), codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32).view(np.uint32))
    e8m0 = np.arange(0, 255, dtype=np.uint8)
    assert np.array_equal(
        np.ldexp(np.float32(1), e8m0.astype(np.int32) - 127), e8m0.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    )
    # Nibble order: byte 0x21 holds element 0 = 1 and element 1 = 2.
    assert unpack_fp4(np.array([0x21], dtype=np.uint8)).tolist() == [1, 2]
    assert np.array_equal(unpack_fp4(pack_fp4(np.arange(16, dtype=np.uint8))), np.arange(16))

    # E4M3 of a quotient: 1.0625 and 1.1875 are midpoints that tie to the even code
    # (1.0 = 0x38, 1.25 = 0x3a), 448 is the largest code 0x7e, 2^-9 the smallest
    # subnormal 0x01, -0 keeps its sign; a zero scale gives zero codes.
    got = e4m3_of_quotient(np.array([2.125, 2.375, 896, 2.0**-8, -0.0], dtype=np.float32), np.float32(2))
    assert got.view(np.uint8).tolist() == [0x38, 0x3A, 0x7E, 0x01, 0x80]
    zero = e4m3_of_quotient(np.zeros((2, 2), dtype=np.float32), np.array([[0], [1]], dtype=np.float32))
    assert zero.view(np.uint8).tolist() == [[0, 0], [0, 0]]

    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:

        def path(name):
            return os.path.join(tmp, name)

        # Both NVFP4 conventions on a hand-built layer, against a per-element loop.
        n, k = 3, 32
        codes = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
        scale = rng.integers(1, 0x7F, size=(n, k // 16), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
        s2 = np.float32(0.0123)
        norm = bf16(rng, (5,))
        layer = {"l.weight_scale": scale, "norm.weight": norm}
        write(path("mo"), {**layer, "l.weight": pack_fp4(codes), "l.weight_scale_2": np.array([s2])})
        write(
            path("ct"),
            {
                **layer,
                "l.weight_packed": pack_fp4(codes),
                "l.weight_global_scale": np.array([s2]),
                "l.input_global_scale": np.array([s2]),
            },
        )
        dequantize_modelopt(path("mo"), path("mo.out"))
        dequantize_compressed(path("ct"), path("ct.out"))
        mo, ct = read(path("mo.out")), read(path("ct.out"))
        assert sorted(mo) == sorted(ct) == ["l.weight", "norm.weight"]
        assert np.array_equal(mo["norm.weight"][1], norm.astype(np.float32))
        for r in range(n):
            for c in range(k):
                product = np.float32(float(E2M1[codes[r, c]]) * float(scale[r, c // 16]))
                assert mo["l.weight"][1][r, c].tobytes() == np.float32(product * s2).tobytes()
                assert ct["l.weight"][1][r, c].tobytes() == np.float32(product / s2).tobytes()

        # gpt-oss: re-read the written file and decode sampled elements one by one.
        write_gptoss(path("g"), path("g.exp"), seed=1)
        g, gx = read(path("g")), read(path("g.exp"))
        p = "model.layers.0.mlp.experts."
        assert g[p + "gate_up_proj_blocks"][1].shape == (2, 192, 2, 16)
        assert g[p + "down_proj_blocks"][1].shape == (2, 64, 3, 16)
        assert g[p + "down_proj_scales"][0] == "U8" and g[p + "down_proj_bias"][0] == "BF16"
        assert gx[p + "gate_up_proj"][1].shape == (2, 64, 192) and gx[p + "down_proj"][1].shape == (2, 96, 64)
        assert not any(name.endswith(("_blocks", "_scales")) for name in gx)
        assert all(dtype == "F32" for dtype, _ in gx.values())
        for proj in ("gate_up_proj", "down_proj"):
            blocks, scales, want = g[p + proj + "_blocks"][1], g[p + proj + "_scales"][1], gx[p + proj][1]
            for _ in range(500):
                ex, row, col = (int(rng.integers(0, d)) for d in (blocks.shape[0], blocks.shape[1], want.shape[1]))
                byte = int(blocks[ex, row, col // 32, (col % 32) // 2])
                code = byte >> 4 if col % 2 else byte & 0xF
                value = float(E2M1[code]) * 2.0 ** (int(scales[ex, row, col // 32]) - 127)
                assert want[ex, col, row].tobytes() == np.float32(value).tobytes()

        # DeepSeek: the same, with the one float32 multiply.
        write_deepseek(path("d"), path("d.exp"), seed=1)
        d, dx = read(path("d")), read(path("d.exp"))
        name = "model.layers.0.mlp.down_proj.weight"
        assert d[name][0] == "F8_E4M3" and d[name][1].shape == (200, 300)
        assert d[name + "_scale_inv"][0] == "F32" and d[name + "_scale_inv"][1].shape == (2, 3)
        assert not np.isnan(d[name][1].astype(np.float32)).any()
        assert sorted(dx) == sorted(n for n in d if not n.endswith("_scale_inv"))
        w, s, want = d[name][1], d[name + "_scale_inv"][1], dx[name][1]
        for _ in range(2000):
            r, c = int(rng.integers(0, 200)), int(rng.integers(0, 300))
            assert want[r, c].tobytes() == (np.float32(float(w[r, c])) * s[r // 128, c // 128]).tobytes()
        assert json.loads(safetensors.safe_open(path("d.exp"), "np").metadata()["dequantized"]) == sorted(
            ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.o_proj.weight"]
        )

        # ModelOpt FP8: one scale per tensor, one float32 multiply.
        write_modelopt_fp8(path("m"), path("m.exp"), seed=1)
        m, mx = read(path("m")), read(path("m.exp"))
        name = "model.layers.0.mlp.down_proj.weight"
        assert m[name][0] == "F8_E4M3" and m[name][1].shape == (64, 200)
        scale = m["model.layers.0.mlp.down_proj.weight_scale"]
        assert scale[0] == "F32" and scale[1].shape == ()
        w, want = m[name][1], mx[name][1]
        for _ in range(2000):
            r, c = int(rng.integers(0, 64)), int(rng.integers(0, 200))
            assert want[r, c].tobytes() == (np.float32(float(w[r, c])) * scale[1]).tobytes()
        assert sorted(mx) == sorted(n for n in m if not n.endswith(("_scale",)))
        # compressed-tensors INT4 packing against bit-by-bit loops: element i of word j of a
        # row is bits 4i..4i+3 of the word, stored + 8; zero points run down the columns.
        q = rng.integers(-8, 8, size=(11, 21))
        words = pack_int32_nibbles(q, axis=1)
        assert words.shape == (11, 3) and words.dtype == np.int32
        for r in range(11):
            for c in range(21):
                assert (int(words[r, c // 8]) >> (4 * (c % 8))) & 0xF == q[r, c] + 8
        assert np.array_equal(unpack_int32_nibbles(words, 21, axis=1), q)
        zwords = pack_int32_nibbles(q, axis=0)
        assert zwords.shape == (2, 21)
        for r in range(11):
            for c in range(21):
                assert (int(zwords[r // 8, c]) >> (4 * (r % 8))) & 0xF == q[r, c] + 8
        assert np.array_equal(unpack_int32_nibbles(zwords, 11, axis=0), q)
        # A word holding 0..7 (stored 8..15) reads 0xFEDCBA98 as unsigned.
        assert pack_int32_nibbles(np.arange(8).reshape(1, 8), axis=1).view(np.uint32)[0, 0] == 0xFEDCBA98

        # The compressed-tensors writers, element by element from the written tensors.
        write_ct_int4(path("ci"), path("ci.exp"), seed=1)
        ci, cix = read(path("ci/model.safetensors")), read(path("ci.exp"))
        p = "model.layers.0.mlp.down_proj"
        assert ci[p + ".weight_packed"][1].shape == (100, 48) and ci[p + ".weight_zero_point"][1].shape == (13, 3)
        assert ci[p + ".weight_shape"][0] == "I64" and ci[p + ".weight_shape"][1].tolist() == [100, 384]
        assert ci["model.layers.0.self_attn.v_proj.weight_packed"][1].shape == (40, 25)
        words, zwords, scale = (ci[p + s][1] for s in (".weight_packed", ".weight_zero_point", ".weight_scale"))
        for _ in range(2000):
            r, c = int(rng.integers(0, 100)), int(rng.integers(0, 384))
            qv = ((int(words[r, c // 8]) >> (4 * (c % 8))) & 0xF) - 8
            zv = ((int(zwords[r // 8, c // 128]) >> (4 * (r % 8))) & 0xF) - 8
            assert cix[p + ".weight"][1][r, c] == (qv - zv) * float(scale[r, c // 128])
        write_ct_mxfp4(path("cm"), path("cm.exp"), seed=1)
        cm, cmx = read(path("cm/model.safetensors")), read(path("cm.exp"))
        p = "model.layers.0.mlp.down_proj"
        blocks, scales = cm[p + ".weight_packed"][1], cm[p + ".weight_scale"][1]
        assert cm[p + ".weight_scale"][0] == "U8" and scales.shape == (64, 6)
        for _ in range(2000):
            r, c = int(rng.integers(0, 64)), int(rng.integers(0, 192))
            byte = int(blocks[r, c // 2])
            code = byte >> 4 if c % 2 else byte & 0xF
            assert cmx[p + ".weight"][1][r, c] == float(E2M1[code]) * 2.0 ** (int(scales[r, c // 32]) - 127)
        write_ct_fp8(path("cf"), path("cf.exp"), seed=1)
        cf, cfx = read(path("cf/model.safetensors")), read(path("cf.exp"))
        for p, pick in (
            ("model.layers.0.self_attn.q_proj", lambda s, r, c: s[0]),
            ("model.layers.0.self_attn.o_proj", lambda s, r, c: s[r, 0]),
            ("model.layers.0.mlp.down_proj", lambda s, r, c: s[r // 128, c // 128]),
        ):
            w, s = cf[p + ".weight"][1], cf[p + ".weight_scale"][1]
            for _ in range(1000):
                r, c = int(rng.integers(0, w.shape[0])), int(rng.integers(0, w.shape[1]))
                want = np.float32(float(w[r, c])) * np.float32(pick(s, r, c))
                assert cfx[p + ".weight"][1][r, c].tobytes() == want.tobytes()
        with open(path("cf/config.json")) as f:
            groups = json.load(f)["quantization_config"]["config_groups"]
        assert [g["weights"]["strategy"] for g in groups.values()] == ["tensor", "channel", "block"]

        # dequantize-ct reads back what the writers' formulas give, on a one-group file.
        layer = {k: v for k, v in ci.items() if k.startswith("model.layers.0.mlp.down_proj")}
        (group,) = [g for g in json.load(open(path("ci/config.json")))["quantization_config"]["config_groups"].values()
                    if g["targets"] == ["re:.*down_proj$"]]
        qc = ct_config({"group_0": group}, "pack-quantized")["quantization_config"]
        write(path("one"), {k: v for k, (_, v) in layer.items()}, metadata={"quantization_config": json.dumps(qc)})
        dequantize_ct(path("one"), path("one.out"))
        one = read(path("one.out"))
        assert sorted(one) == ["model.layers.0.mlp.down_proj.weight"]
        assert np.array_equal(one["model.layers.0.mlp.down_proj.weight"][1], cix["model.layers.0.mlp.down_proj.weight"][1])
    print("oracle selftest: ok")


# The subcommands by the arguments they take: each row names the commands, their
# positional arguments and their options, and the function each calls with them in order.
DEQUANTIZERS = {"dequantize-modelopt": dequantize_modelopt, "dequantize-compressed": dequantize_compressed,
                "dequantize-ct": dequantize_ct}
CHECKERS = {"check-deepseek": (check_deepseek, ["output"]),
            "check-modelopt-fp8": (check_modelopt_fp8, ["--calibration"]),
            "check-ct-int4": (check_ct_int4, ["--group"])}
WRITERS = {"write-gptoss": write_gptoss, "write-deepseek": write_deepseek, "write-modelopt-fp8": write_modelopt_fp8,
           "write-ct-mxfp4": write_ct_mxfp4, "write-ct-int4": write_ct_int4, "write-ct-fp8": write_ct_fp8}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    calls = {"selftest": (selftest, [])}
    sub.add_parser("selftest")
    for command, f in DEQUANTIZERS.items():
        calls[command] = (f, add_args(sub.add_parser(command), ["input", "output"]))
    for command, (f, extra) in CHECKERS.items():
        calls[command] = (f, add_args(sub.add_parser(command), ["original", "quantized"] + extra))
    for command, f in WRITERS.items():
        calls[command] = (f, add_args(sub.add_parser(command), ["output", "expected", "--seed"]))
    args = parser.parse_args()
    f, names = calls[args.command]
    f(*(getattr(args, n.lstrip("-")) for n in names))


def add_args(p, names):
    """Adds the arguments `names` to parser `p` (--seed and --group: required integers;
    --calibration: an optional path) and returns the names."""
    for n in names:
        if n in ("--seed", "--group"):
            p.add_argument(n, type=int, required=True)
        else:
            p.add_argument(n)
    return names


if __name__ == "__main__":
    main()
