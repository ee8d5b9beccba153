"""Reads the golden files with PyTorch alone (the loader of docs/GOLDEN.md) and checks
every quantize case's dequantized values from its codes and scales with torch's own FP8
and E8M0 dtypes (FP4/FP6/INT4 through their value tables): an independent reader of the
format. Run where PyTorch >= 2.7 is installed:

    python3 tests/torch/check_golden.py [tests/golden]
"""
import glob, json, os, struct, sys

import torch


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta, data = header.pop("__metadata__"), raw[8 + n:]
    bytes_of = lambda name: torch.frombuffer(bytearray(data[slice(*header[name]["data_offsets"])]), dtype=torch.uint8)
    return meta, header, bytes_of


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def minifloat(code, ebits, mbits, bias):
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    return (m / (1 << mbits)) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def table(kind):
    if kind == "F4":
        return torch.tensor([(-1 if c & 8 else 1) * E2M1[c & 7] for c in range(16)], dtype=torch.float64)
    if kind == "F6_E2M3":
        return torch.tensor([(-1 if c & 32 else 1) * minifloat(c & 31, 2, 3, 1) for c in range(64)], dtype=torch.float64)
    if kind == "F6_E3M2":
        return torch.tensor([(-1 if c & 32 else 1) * minifloat(c & 31, 3, 2, 3) for c in range(64)], dtype=torch.float64)
    raise ValueError(kind)


def unpack(kind, raw, rows, k):
    if kind in ("F8_E4M3", "F8_E5M2"):
        dt = torch.float8_e4m3fn if kind == "F8_E4M3" else torch.float8_e5m2
        return raw.view(dt).to(torch.float64).reshape(rows, k)
    if kind in ("F4", "U8"):
        lo, hi = (raw & 15).long(), (raw >> 4).long()
        codes = torch.stack([lo, hi], dim=1).reshape(rows, k)
        return codes.double() - 8 if kind == "U8" else table("F4")[codes]
    b = raw.long().reshape(-1, 3)
    word = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
    codes = torch.stack([(word >> (6 * i)) & 63 for i in range(4)], dim=1).reshape(rows, k)
    return table(kind)[codes]


def scales_of(kind, raw):
    if kind == "F8_E4M3":
        return raw.view(torch.float8_e4m3fn).to(torch.float64)
    if kind == "F8_E8M0":
        return raw.view(torch.float8_e8m0fnu).to(torch.float64)
    if kind == "F32":
        return raw.view(torch.float32).to(torch.float64)
    return raw.view(torch.float16).to(torch.float64)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "golden")
    checked = failed = 0
    for path in sorted(glob.glob(os.path.join(folder, "q-*.safetensors"))):
        meta, header, t = load(path)
        rows, k, scheme = int(meta["q.rows"]), int(meta["q.k"]), meta["q.scheme"]
        values = unpack(header["q.codes"]["dtype"], t("q.codes"), rows, k)
        s = scales_of(header["q.scales"]["dtype"], t("q.scales")).reshape(header["q.scales"]["shape"])
        block = 16 if scheme == "nvfp4" else 128 if scheme.startswith("fp8") or scheme == "int4-g128" else 32
        brows = 128 if scheme == "fp8-block-128x128" else 1
        s = s.repeat_interleave(brows, dim=0)[:rows].repeat_interleave(block, dim=1)
        # (value * scale) in f32, then the NVFP4 decode factor, as docs/GOLDEN.md says.
        got = (values.float() * s.float())
        if "q.global_encode" in meta:
            enc = struct.unpack("<f", int(meta["q.global_encode"], 16).to_bytes(4, "little"))[0]
            dec = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(enc, dtype=torch.float32)
            got = got * dec
        want = t("dequant").view(torch.float32).reshape(rows, k)
        same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
        checked += 1
        if not bool(same.all()):
            failed += 1
            i = int((~same).flatten().nonzero()[0])
            print(f"FAIL {os.path.basename(path)} [{i // k}, {i % k}]: torch {got.flatten()[i].item()!r}, golden {want.flatten()[i].item()!r}")
    print(f"{checked} quantize cases read with PyTorch {torch.__version__}: {checked - failed} match, {failed} differ")
    sys.exit(1 if failed or not checked else 0)


if __name__ == "__main__":
    main()
