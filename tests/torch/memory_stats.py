"""torch's memory statistics through a small training run (an MLP): what torch.cuda says the program has
allocated (memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved) at fixed
points, and what reset_peak_memory_stats does. Prints `key=value` pairs, in bytes.

    marmoset run --sim [--memory-limit L] -- .venv/bin/python tests/torch/memory_stats.py

Under backend:cudaMallocAsync these figures are the device's default memory pool's attributes.
The points, in order:
  start       before anything is on the device (0)
  mid         after forward and loss of the last step, before backward (activations held)
  step_peak   max_memory_allocated after the last step
  after_del   after `del` of batch, output and loss and a synchronize (the model, its
              gradients, the optimizer's momentum and torch's own buffers remain)
  reset_*     right after reset_peak_memory_stats: the peaks equal the current figures
  burst_*     after a 32 MiB tensor made and deleted since the reset: the peak is after_del
              plus the tensor, the current figure after_del again
"""
import argparse

import torch
from torch import nn


def stats(tag):
    torch.cuda.synchronize()
    print(
        f"{tag}_allocated={torch.cuda.memory_allocated()} "
        f"{tag}_max_allocated={torch.cuda.max_memory_allocated()} "
        f"{tag}_reserved={torch.cuda.memory_reserved()} "
        f"{tag}_max_reserved={torch.cuda.max_memory_reserved()}",
        flush=True,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    a = p.parse_args()
    dev = "cuda"
    backend = torch.cuda.memory.get_allocator_backend()
    print(f"backend={backend}", flush=True)
    stats("start")
    # Linear layers only: what they allocate does not depend on the memory free (cuDNN's
    # convolutions size their workspace by trial allocations, so a budget would change the
    # program), and no single operation needs more than a fraction of the peak.
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(a.width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(a.steps):
        x = torch.randn(a.batch, a.width, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        if step == a.steps - 1:
            stats("mid")
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
    stats("step")
    del x, y, out, loss
    stats("after_del")
    # What torch's tensors hold on their own account, counted the way its native allocator
    # rounds (512 B): parameters, gradients, momentum.
    held = sum(
        (t.numel() * t.element_size() + 511) // 512 * 512
        for prm in model.parameters()
        for t in [prm, prm.grad, opt.state[prm]["momentum_buffer"]]
    )
    print(f"tensors_held={held}", flush=True)
    torch.cuda.reset_peak_memory_stats()
    stats("reset")
    burst = torch.empty(32 << 20, dtype=torch.uint8, device=dev)
    burst.fill_(1)
    del burst
    stats("burst")
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"peak memory allocated by torch: {peak:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
