"""Training loops that change from step to step (docs/loops.md), on random data in plain PyTorch,
for a GPT-style decoder or a CNN (ResNet-50 of examples/resnet50.py):

  fixed       every step alike (the reference)
  varlen      decoder: each batch's sequence length drawn from 256, 512, 768, 1024 (seeded)
  multiscale  cnn: each batch's image size drawn from 160, 192, 224 (seeded)
  epoch       every --every-th step is an epoch's last, smaller batch (3/8 of --batch)
  eval        after every --every-th step an evaluation pass (model.eval(), torch.no_grad())
  accum       gradient accumulation: --accum forward/backward steps, then one optimizer step
  checkpoint  each step's loss logged by .item(); after every --every-th step torch.save of the
              model's and the optimizer's state to a BytesIO (every weight copied to the host)
  unfreeze    the backbone (all but the output layer) frozen until step --unfreeze-at

A step is one forward/backward pass, with what the loop adds after it (the evaluation pass, the
optimizer step, the checkpoint). Each step's device time is measured by CUDA events around it
and printed with the total (simulated on the simulated GPU); losses print 0 in shape mode.

    marmoset run --sim -- .venv/bin/python examples/loops.py --loop varlen --model decoder --steps 30
"""
import argparse
import io
import random
import time

import torch
from torch import nn

from resnet50 import resnet50

LOOPS = ["fixed", "varlen", "multiscale", "epoch", "eval", "accum", "checkpoint", "unfreeze"]
SEQS = [256, 512, 768, 1024]
IMAGES = [160, 192, 224]
# Decoder sizes: layers, hidden, heads, feed-forward, vocabulary.
SIZES = {"gpt2": (12, 768, 12, 3072, 50257), "small": (6, 512, 8, 2048, 32000)}


class Decoder(nn.Module):
    """A GPT-style decoder: token and learned position embeddings, pre-LayerNorm blocks of causal
    self-attention and a GELU feed-forward layer, a final LayerNorm and the output layer."""

    def __init__(self, layers, hidden, heads, ff, vocab, context):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(context, hidden)
        block = nn.TransformerEncoderLayer(
            hidden, heads, ff, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        seq = ids.shape[1]
        pos = torch.arange(seq, device=ids.device)
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=ids.device)
        x = self.blocks(self.tok(ids) + self.pos(pos), mask=mask, is_causal=True)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", choices=LOOPS, default="fixed", help="the loop (default fixed)")
    p.add_argument("--model", choices=["decoder", "cnn"], default="cnn", help="default cnn")
    p.add_argument("--steps", type=int, default=30, help="steps (default 30)")
    p.add_argument("--batch", type=int, help="batch size (default: decoder 8, cnn 32)")
    p.add_argument("--size", choices=SIZES, default="small", help="decoder size (default small)")
    p.add_argument("--seq", type=int, default=1024, help="decoder: fixed sequence length (default 1024)")
    p.add_argument("--image", type=int, default=224, help="cnn: fixed image size (default 224)")
    p.add_argument("--every", type=int, default=5, help="epoch, eval, checkpoint: every N steps (default 5)")
    p.add_argument("--accum", type=int, default=4, help="accum: steps per optimizer step (default 4)")
    p.add_argument("--unfreeze-at", type=int, default=10, help="unfreeze: the first step trained whole (default 10)")
    p.add_argument("--seed", type=int, default=0, help="the draws of varlen and multiscale (default 0)")
    p.add_argument("--device", default="cuda", help="device (default cuda)")
    a = p.parse_args()
    if a.loop == "varlen" and a.model != "decoder" or a.loop == "multiscale" and a.model != "cnn":
        p.error(f"--loop {a.loop} is for the {'decoder' if a.loop == 'varlen' else 'cnn'}")
    if min(a.steps, a.every, a.accum) < 1:
        p.error("--steps, --every and --accum are at least 1")
    dev = a.device
    batch = a.batch or (8 if a.model == "decoder" else 32)
    draw = random.Random(a.seed)
    torch.manual_seed(a.seed)

    if a.model == "decoder":
        layers, hidden, heads, ff, vocab = SIZES[a.size]
        model = Decoder(layers, hidden, heads, ff, vocab, max(SEQS + [a.seq]))
        head = model.head

        def make_batch(n, length):
            ids = torch.randint(0, vocab, (n, length), device=dev)
            return ids, torch.randint(0, vocab, (n, length), device=dev)

        def loss_fn(out, target):
            return nn.functional.cross_entropy(out.reshape(-1, vocab), target.reshape(-1))

        fixed_size = a.seq
    else:
        model = resnet50()
        head = model[-1]

        def make_batch(n, size):
            x = torch.randn(n, 3, size, size, device=dev)
            return x, torch.randint(0, 1000, (n,), device=dev)

        loss_fn = nn.functional.cross_entropy
        fixed_size = a.image

    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    backbone = [q for q in model.parameters() if all(q is not h for h in head.parameters())]
    if a.loop == "unfreeze":
        for q in backbone:
            q.requires_grad_(False)

    cuda = dev.startswith("cuda")
    times = []
    for step in range(a.steps):
        t = time.time()
        # The step's size and batch.
        n, size, note = batch, fixed_size, ""
        if a.loop == "varlen":
            size = draw.choice(SEQS)
            note = f" seq {size}"
        elif a.loop == "multiscale":
            size = draw.choice(IMAGES)
            note = f" image {size}"
        elif a.loop == "epoch" and step % a.every == a.every - 1:
            n = max(1, batch * 3 // 8)
            note = f" last batch of the epoch ({n})"
        if a.loop == "unfreeze" and step == a.unfreeze_at:
            for q in backbone:
                q.requires_grad_(True)
            note = " backbone unfrozen"
        if cuda:
            # The step's time on the device's clock (simulated on the simulated GPU).
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        inputs, target = make_batch(n, size)
        accum = a.accum if a.loop == "accum" else 1
        loss = loss_fn(model(inputs), target)
        (loss / accum).backward()
        if step % accum == accum - 1 or step == a.steps - 1:
            opt.step()
            opt.zero_grad(set_to_none=True)
            if accum > 1:
                note += " optimizer step"
        if a.loop == "eval" and step % a.every == a.every - 1:
            model.eval()
            with torch.no_grad():
                x, y = make_batch(n, size)
                loss_fn(model(x), y)
            model.train()
            note += " + evaluation pass"
        if a.loop == "checkpoint":
            note += f" loss {loss.item():.4f}"  # logged each step: a copy to the host, a sync
            if step % a.every == a.every - 1:
                buf = io.BytesIO()
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
                note += f" + checkpoint ({buf.tell() / 2**20:.0f} MiB)"
        if cuda:
            end.record()
            end.synchronize()
            ms = begin.elapsed_time(end)
            times.append(ms)
            dev_time = f", {ms:.3f} ms device time"
        else:
            dev_time = ""
        print(f"step {step}:{note} ({time.time() - t:.2f} s host time{dev_time})", flush=True)
    if cuda:
        print(f"total device time: {sum(times):.3f} ms over {len(times)} steps", flush=True)
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"peak memory allocated by torch: {peak:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
