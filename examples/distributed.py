"""Data-parallel training under torchrun: DDP (every rank holds the model and all-reduces
gradient buckets) or FSDP (fully_shard: parameters sharded per block, all-gathered for each
block's forward and backward, gradients reduce-scattered), on random data, one process per GPU.
Each rank prints each step's device time; a step is as slow as its slowest rank.

    marmoset run --sim=h100x2 -- .venv/bin/torchrun --standalone --nproc-per-node 2 examples/distributed.py
    marmoset run --sim=h100x2 -- .venv/bin/torchrun --standalone --nproc-per-node 2 examples/distributed.py --model gpt --parallel fsdp

Models: `resnet50` (examples/resnet50.py's, ImageNet-sized images) and `gpt` (a GPT-style
decoder: causal self-attention blocks, learned positions, a tied-free head) need torch alone;
every model of zoo.py (torchvision, transformers: scripts/setup-zoo.sh) works too, at zoo.py's
default sizes. The batch is per rank.
"""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from common import parser
from resnet50 import resnet50

VOCAB = 32000


class Gpt(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks of causal
    self-attention and a GELU MLP, a final norm and a head over the vocabulary."""

    def __init__(self, layers, hidden=768, heads=12, seq=1024):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, ids):
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        for b in self.blocks:
            x = b(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def next_token(logits, ids):
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def image_loss(logits, target):
    return nn.functional.cross_entropy(logits, target)


# name: (build(args), batch, image side, sequence length)
LOCAL = {
    "resnet50": (lambda a: (resnet50(), ("image", 1000), image_loss), 32, 224, None),
    "gpt": (lambda a: (Gpt(a.layers or 12), ("tokens", VOCAB), next_token), 8, None, 512),
}


def model_entry(name):
    """A local model, or zoo.py's (imported only then: it needs torchvision and transformers)."""
    if name in LOCAL:
        return LOCAL[name], next_token
    import zoo

    build, batch, image, seq, _ = zoo.MODELS[name]
    return (build, batch, image, seq), zoo.next_token


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
        if type(m).__name__.endswith(("DecoderLayer", "Block", "Bottleneck", "EncoderLayer"))
    ]
    for b in blocks:
        fully_shard(b)
    fully_shard(model)
    return model


def main():
    p = parser(__doc__.splitlines()[0], batch=None)
    p.add_argument("--model", default="resnet50", help="resnet50 (the default), gpt, or a model of zoo.py")
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

    (build, batch, image, seq), causal = model_entry(a.model)
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
            return ids, (ids if loss_fn is causal else torch.randint(0, classes, (b, a.seq), device=dev))
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
