"""Data-parallel training of a zoo model under torchrun: DDP (every rank holds the model and
all-reduces gradient buckets) or FSDP (fully_shard: parameters sharded per layer, all-gathered
for each layer's forward and backward, gradients reduce-scattered), on random data, one process
per GPU. Each rank prints each step's device time; a step is as slow as its slowest rank.

    marmoset run --sim=h100x2 -- .venv/bin/torchrun --nproc-per-node 2 examples/distributed.py --model resnet50
    marmoset run --sim=h100x2 -- .venv/bin/torchrun --nproc-per-node 2 examples/distributed.py --model llama --parallel fsdp

Needs scripts/setup-zoo.sh (torchvision, transformers). The models and their default sizes are
zoo.py's (--list names them); the batch is per rank.
"""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import zoo
from common import parser


def say(line):
    """One line in one write: the ranks share the terminal (or pipe), and a line written in
    pieces could be cut by another rank's."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def shard(model):
    """FSDP2: each transformer block or residual stage its own unit, then the whole model."""
    from torch.distributed.fsdp import fully_shard

    blocks = [
        m
        for m in model.modules()
        if type(m).__name__.endswith(("DecoderLayer", "Block", "Bottleneck", "EncoderLayer", "LlamaDecoderLayer"))
    ]
    for b in blocks:
        fully_shard(b)
    fully_shard(model)
    return model


def main():
    p = parser(__doc__.splitlines()[0], batch=None)
    p.add_argument("--model", choices=zoo.MODELS, default="resnet50", help="the zoo model (default resnet50)")
    p.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp", help="DDP (default) or FSDP (fully_shard)")
    p.add_argument("--backend", default="nccl", help="torch.distributed backend (default nccl)")
    p.add_argument("--image", type=int, help="image side, for image models")
    p.add_argument("--seq", type=int, help="sequence length, for language models")
    p.add_argument("--layers", type=int, help="transformer layers (default the model's)")
    a = p.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group(a.backend, device_id=torch.device("cuda", local))
    torch.manual_seed(rank)

    build, batch, image, seq, _ = zoo.MODELS[a.model]
    a.batch = a.batch or batch
    a.image = a.image or image
    a.seq = a.seq or seq
    model, (kind, classes), loss_fn = build(a)
    dev, b = torch.device("cuda", local), a.batch
    model = model.to(dev)
    if a.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    else:
        model = shard(model)

    def make_batch():
        if kind == "image":
            return torch.randn(b, 3, a.image, a.image, device=dev), torch.randint(0, classes, (b,), device=dev)
        if kind == "mask":
            x = torch.randn(b, 3, a.image, a.image, device=dev)
            return x, torch.randint(0, classes, (b, a.image, a.image), device=dev)
        if kind == "tokens":
            ids = torch.randint(0, classes, (b, a.seq), device=dev)
            return ids, (ids if loss_fn is zoo.next_token else torch.randint(0, classes, (b, a.seq), device=dev))
        src = torch.randint(0, classes, (b, a.seq), device=dev)
        tgt = torch.randint(0, classes, (b, max(1, a.seq // 4)), device=dev)
        return (src, tgt), tgt

    params = sum(q.numel() for q in model.parameters())
    if rank == 0:
        say(f"{a.model} ({a.parallel}, {world} ranks): {params / 1e6:.1f} M parameters on rank 0, batch {b} per rank")
    lr = 0.1 if kind in ("image", "mask") else 1e-4
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    for step in range(a.steps):
        t = time.time()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        inputs, target = make_batch()
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()
        with ctx:
            loss = loss_fn(model(inputs), target)
        loss.backward()
        opt.step()
        end.record()
        value = loss.item()  # synchronises
        say(
            f"rank {rank} step {step}: loss {value:.4f} ({time.time() - t:.2f} s host time, "
            f"{begin.elapsed_time(end):.3f} ms device time)"
        )
    peak = torch.cuda.max_memory_allocated() / 2**30
    say(f"rank {rank} peak memory allocated by torch: {peak:.2f} GiB")
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
