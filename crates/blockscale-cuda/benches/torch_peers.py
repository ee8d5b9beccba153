"""PyTorch peers of the GEMV bench (`bench-gemv_cuda`), run beside it on the GPU machine.

`gpu-bundle/run.sh bench` runs it after the Rust benches; by hand:
`python3 torch_peers.py [--shapes 28672x8192,16384x2048,4096x4096] [--ms 1,16]`.

- tinygemm int4 weight-only (`torch._weight_int4pack_mm`, what gpt-fast and torchao
  run) at groups of 32 and 128, bf16 activations;
- `torch._scaled_mm` FP8 E4M3 with per-tensor scales (activations and weights FP8);
- cuBLAS BF16 through `torch.matmul`, as the same process's anchor.

Cold L2 as in the Rust bench: every timed call reads another copy of the weights,
cycling over copies that hold four L2s. CUDA events, median of 7 repetitions of a pass
over the copies (at least 10 calls). Times in microseconds.
"""

import argparse
import statistics

import torch


def l2_bytes():
    props = torch.cuda.get_device_properties(0)
    return getattr(props, "L2_cache_size", 50 << 20)


def copies_for(nbytes):
    return max(1, -(-4 * l2_bytes() // nbytes))


def cold_time(fn, count):
    """Median seconds per call of fn(i), i cycling over `count` copies."""
    calls = max(count, 10)
    for i in range(3):
        fn(i % count)
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(i % count)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def bf16_anchor(m, n, k):
    count = copies_for(n * k * 2)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    return cold_time(lambda i: torch.matmul(x, ws[i].t()), count)


def int4_tinygemm(m, n, k, group):
    # Random 4-bit codes packed two per byte, as _convert_weight_to_int4pack takes them.
    count = copies_for(n * k // 2)
    packed = []
    for _ in range(count):
        codes = torch.randint(0, 16, (n, k), device="cuda", dtype=torch.int32)
        u8 = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
        packed.append(torch._convert_weight_to_int4pack(u8, 8))
    sz = torch.randn(k // group, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    return cold_time(lambda i: torch._weight_int4pack_mm(x, packed[i], group, sz), count)


def fp8_scaled_mm(m, n, k):
    count = copies_for(n * k)
    ws = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn) for _ in range(count)]
    mp = max(16, -(-m // 16) * 16)
    x = torch.randn(mp, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    return cold_time(
        lambda i: torch._scaled_mm(x, ws[i].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), count
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="28672x8192,16384x2048,4096x4096")
    ap.add_argument("--ms", default="1,16")
    args = ap.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, cold L2 over {4 * l2_bytes() >> 20} MiB")
    print("| N x K | M | cuBLAS bf16 us | tinygemm int4 g32 us | g128 us | _scaled_mm fp8 us |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for m in (int(v) for v in args.ms.split(",")):
            row = [f"{n}x{k}", str(m)]
            for f in (
                lambda: bf16_anchor(m, n, k),
                lambda: int4_tinygemm(m, n, k, 32),
                lambda: int4_tinygemm(m, n, k, 128),
                lambda: fp8_scaled_mm(m, n, k),
            ):
                try:
                    row.append(f"{f() * 1e6:.1f}")
                except Exception as e:  # a peer missing in this PyTorch build
                    row.append(f"n/a ({type(e).__name__}: {str(e)[:60]})")
                torch.cuda.empty_cache()
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
