"""Shared by the examples: arguments, the training loop on random data, and a per-step line."""
import argparse
import time

import torch


def parse(description, batch):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    p.add_argument("--batch", type=int, default=batch, help=f"batch size (default {batch})")
    p.add_argument("--device", default="cuda", help="device (default cuda)")
    return p.parse_args()


def train(model, make_batch, loss_fn, steps, device, lr=0.01):
    """SGD with momentum on random batches; prints the loss of each step."""
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for step in range(steps):
        t = time.time()
        inputs, target = make_batch()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), target)
        loss.backward()
        opt.step()
        value = loss.item()  # synchronises
        print(f"step {step}: loss {value:.4f} ({time.time() - t:.2f} s host time)", flush=True)
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"peak memory allocated by torch: {peak:.2f} GiB", flush=True)
