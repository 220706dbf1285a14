"""A network's convolution layers (data/conv-layers CSV) in plain PyTorch: for each layer, a
Conv2d forward and backward (input and weight gradients) on random data, warmed up once, then
timed with CUDA events. PyTorch runs its convolutions on its default path (the cuDNN backend
API) unless TORCH_CUDNN_V8_API_DISABLED=1; its per-convolution workspace cap is
CUDNN_CONV_WSCAP_DBG (MiB). Prints "LAYER fwd ms=..", "LAYER bwd ms=.." and "total_ms=..".

    marmoset run --sim=p100 --workspace-limit 64MiB -- .venv/bin/python examples/conv_layers.py data/conv-layers/alexnet.csv
"""
import csv
import sys

import torch


def main():
    path = sys.argv[1]
    torch.backends.cudnn.benchmark = False
    total = 0.0
    with open(path, encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            n, c, k = int(row["N"]), int(row["C_in"]), int(row["C_out"])
            h, w = int(row["H"]), int(row["W"])
            conv = torch.nn.Conv2d(c, k, (int(row["kernel_h"]), int(row["kernel_w"])),
                                   stride=(int(row["stride_h"]), int(row["stride_w"])),
                                   padding=(int(row["pad_h"]), int(row["pad_w"])), bias=False).cuda()
            x = torch.randn(n, c, h, w, device="cuda", requires_grad=True)
            times = []
            for timed in (False, True):
                a, b, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                a.record()
                y = conv(x)
                b.record()
                y.backward(torch.ones_like(y))
                e.record()
                e.synchronize()
                if timed:
                    times = [a.elapsed_time(b), b.elapsed_time(e)]
            total += sum(times)
            print(f"{row['source']} fwd ms={times[0]:.4f}", flush=True)
            print(f"{row['source']} bwd ms={times[1]:.4f}", flush=True)
    print(f"total_ms={total:.4f}", flush=True)


if __name__ == "__main__":
    main()
