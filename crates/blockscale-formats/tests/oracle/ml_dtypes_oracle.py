"""The ml_dtypes oracle: decodes every code and encodes every f16 and bf16 value with
ml_dtypes' own casts, for tests/ml_dtypes_oracle.rs. Run by the test with PYTHONPATH
pointing at the packages `cargo xtask setup-python` installs.

usage: python3 ml_dtypes_oracle.py OUT

OUT gets, for each format in FORMATS order:
  codes * 4 bytes   the decoded value of every code as little-endian f32
  65536 bytes       the code of every f16 bit pattern (converted exactly to f32 first)
  65536 bytes       the code of every bf16 bit pattern
"""

import sys

import ml_dtypes
import numpy as np

FORMATS = [
    ("float4_e2m1fn", 16),
    ("float6_e2m3fn", 64),
    ("float6_e3m2fn", 64),
    ("float8_e4m3fn", 256),
    ("float8_e5m2", 256),
    ("float8_e8m0fnu", 256),
]


def main(out_path):
    f16_values = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    bf16_values = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    chunks = []
    with np.errstate(all="ignore"):
        for name, codes in FORMATS:
            dtype = getattr(ml_dtypes, name)
            decoded = np.arange(codes, dtype=np.uint8).view(dtype).astype(np.float32)
            chunks.append(decoded.astype("<f4").tobytes())
            chunks.append(f16_values.astype(dtype).view(np.uint8).tobytes())
            chunks.append(bf16_values.astype(dtype).view(np.uint8).tobytes())
    with open(out_path, "wb") as f:
        f.write(b"".join(chunks))


if __name__ == "__main__":
    main(sys.argv[1])
