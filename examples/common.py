"""Shared by the examples: arguments, the training loop on random data, and a per-step line."""
import argparse
import contextlib
import os
import time

import torch


def parser(description, batch):
    """The examples' common arguments; a script may add its own before parsing."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    p.add_argument("--batch", type=int, default=batch, help=f"batch size (default {batch})")
    p.add_argument("--device", default="cuda", help="device (default cuda)")
    p.add_argument(
        "--amp",
        choices=["fp16", "bf16"],
        help="mixed precision: torch.autocast to this type (fp16 with a gradient scaler)",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="let matmuls use TF32 (torch.backends.cuda.matmul.allow_tf32; cuDNN allows it by default)",
    )
    p.add_argument(
        "--memory-fraction",
        type=float,
        help="PyTorch alone within a budget: torch.cuda.set_per_process_memory_fraction(F) of the "
        "device's memory (its allocator then refuses more, and cuDNN falls back to engines "
        "with less workspace)",
    )
    p.add_argument("--seed", type=int, help="seed torch's generators (weights and batches) with this")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="torch.use_deterministic_algorithms (warning where an operator has no deterministic "
        "version) and cuBLAS's fixed workspace, so that two runs give the same losses",
    )
    return p


def settle(a):
    """Applies --seed and --deterministic: call before the model is built and before CUDA starts."""
    if a.deterministic:
        # cuBLAS is deterministic on a stream only with a fixed workspace configuration.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    if a.seed is not None:
        torch.manual_seed(a.seed)


def parse(description, batch):
    return parser(description, batch).parse_args()


def train(model, make_batch, loss_fn, steps, device, lr=0.01, amp=None, tf32=False, memory_fraction=None):
    """SGD with momentum on random batches; prints the loss of each step. `amp` ("fp16" or
    "bf16") runs forward and loss under torch.autocast, as NVIDIA's AMP recipes do;
    `memory_fraction` caps PyTorch's caching allocator at that fraction of the device."""
    if tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    if memory_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(memory_fraction)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(amp)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == "fp16")
    cuda = device.startswith("cuda")
    for step in range(steps):
        t = time.time()
        if cuda:
            # The step's time on the device's clock (simulated on the simulated GPU).
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        inputs, target = make_batch()
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()
        with ctx:
            loss = loss_fn(model(inputs), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if cuda:
            end.record()
        value = loss.item()  # synchronises
        dev = f", {begin.elapsed_time(end):.3f} ms device time" if cuda else ""
        print(f"step {step}: loss {value:.4f} ({time.time() - t:.2f} s host time{dev})", flush=True)
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"peak memory allocated by torch: {peak:.2f} GiB", flush=True)
        reserved = torch.cuda.max_memory_reserved()
        print(f"peak memory reserved by torch: {reserved} bytes", flush=True)
