#!/usr/bin/env python3
"""A small PyTorch training loop on synthetic images, for trying Marmoset on a real GPU:

    marmoset run --policy lru --memory-limit 0.5 --trace run.jsonl -- python examples/train.py
    marmoset report run.jsonl -o report.html

Nothing in it knows about Marmoset: that is the point.
"""
import argparse

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=128)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers, c = [], 3
    for width in (64, 128, 256, 256):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
        c = width
    model = nn.Sequential(*layers, nn.Flatten(), nn.LazyLinear(10)).to(dev)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    model(x)  # sizes the lazy layer
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}, peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
