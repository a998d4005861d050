"""Sustained SM clock and power of the wgmma attention kernel against cuDNN SDPA at two sequence lengths.

Each kernel runs in a loop for 2.5 s while `nvidia-smi` samples the SM clock and the board power every 100 ms
(medians after the first quarter, the ramp); the time per call is from CUDA events over the loop. A
maintainer's tool for telling a power-capped clock from cycles spent (docs/design.md, section 11b):

    python3 scripts/attention_clocks.py      # on a GPU machine with PyTorch, cuDNN and nvidia-smi
"""

import statistics
import subprocess
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from asynccopy import sdpa

SECONDS = 2.5
BATCH, HEADS, HEAD_DIM = 4, 16, 128


def sustained(fn, seconds: float = SECONDS) -> tuple[float, float, float]:
    """(ms a call, median SM clock in MHz, median board power in W) over ``seconds`` of back-to-back calls."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, calls = time.time(), 0
    start.record()
    while time.time() - t0 < seconds:
        fn()
        calls += 1
        if calls % 8 == 0:  # keep the queue short, so that the loop's length is the GPU's
            torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    lines = [line.split(",") for line in smi.communicate()[0].strip().splitlines() if line.strip()]
    lines = lines[len(lines) // 4:]  # after the ramp
    clock = statistics.median(float(x[0]) for x in lines)
    power = statistics.median(float(x[1]) for x in lines)
    return start.elapsed_time(end) / calls, clock, power


def main() -> None:
    for seq in (2048, 8192, 2048):  # 2048 twice: the first and the last pass bracket the run's drift
        q, k, v = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * BATCH * HEADS * seq * seq * HEAD_DIM

        def ours(q=q, k=k, v=v):
            sdpa.attention(q, k, v, kernel="wgmma")

        def cudnn(q=q, k=k, v=v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(q, k, v)

        for name, fn in (("wgmma", ours), ("cudnn", cudnn)):
            fn()
            torch.cuda.synchronize()
            ms, clock, power = sustained(fn)
            print(f"S={seq} {name:6s} {ms * 1e3:8.1f} us a call {flops / ms / 1e9:6.0f} TFLOP/s  "
                  f"SM clock {clock:5.0f} MHz  power {power:4.0f} W", flush=True)


if __name__ == "__main__":
    main()
