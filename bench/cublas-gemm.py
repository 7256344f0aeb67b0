#!/usr/bin/env python3
"""cuBLAS's fp16 GEMM rate at the 7B and 8B models' GEMM shapes, the ceiling
issue 16 compares llmq's prefill GEMM with (bench-cuda-ops' TFLOP/s column).

For each M (prompt tokens) and each weight shape N x K: out (M x N) =
A (M x K) . W^T, f16 in, f32 accumulation (torch.matmul on CUDA, which calls
cuBLAS), timed with CUDA events over REPS launches after a warm-up; the
median of 5 such runs.  Prints a Markdown table.  Needs python3 with torch
(the GPU machine has it; the build does not).

usage: bench/cublas-gemm.py [M ...]        (default 64 512 2048 8192)
"""
import statistics
import sys

try:
    import torch
except ImportError:
    sys.exit("cublas-gemm.py: needs python3 with torch (the GPU machine has it)")

SHAPES = [  # (name, N, K): the 7B MHA and 8B GQA weight matrices
    ("attn_q / attn_output 4096 x 4096", 4096, 4096),
    ("attn_k / attn_v (GQA) 1024 x 4096", 1024, 4096),
    ("ffn_gate / ffn_up (7B) 11008 x 4096", 11008, 4096),
    ("ffn_down (7B) 4096 x 11008", 4096, 11008),
    ("ffn_gate / ffn_up (8B) 14336 x 4096", 14336, 4096),
    ("ffn_down (8B) 4096 x 14336", 4096, 14336),
    ("output 32000 x 4096", 32000, 4096),
]
REPS = 20


def run_us(a, w):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.matmul(a, w.t())
    start.record()
    for _ in range(REPS):
        torch.matmul(a, w.t())
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000.0 / REPS


def main():
    try:
        ms = [int(x) for x in sys.argv[1:]] or [64, 512, 2048, 8192]
    except ValueError:
        sys.exit(f"cublas-gemm.py: M values are row counts, not {' '.join(sys.argv[1:])}\n{__doc__}")
    if any(m < 1 for m in ms):
        sys.exit("cublas-gemm.py: M values must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("cublas-gemm.py: torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    print(f"cuBLAS fp16 GEMM on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; median of 5 runs of {REPS}\n")
    print("| shape (N x K) | M | us | TFLOP/s |")
    print("| --- | --- | --- | --- |")
    for name, n, k in SHAPES:
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for m in ms:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            us = statistics.median(run_us(a, w) for _ in range(5))
            print(f"| {name} | {m} | {us:.1f} | {2.0 * m * n * k / us / 1e6:.1f} |")


if __name__ == "__main__":
    main()
