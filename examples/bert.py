"""A BERT encoder (Devlin et al., 2019: post-LayerNorm, GELU; base: 12 layers, hidden 768, 12
heads, feed-forward 3072; large: 24, 1024, 16, 4096; tiny, Turc et al., 2019: 2, 128, 2, 512)
trained on random tokens, in plain PyTorch modules: pre-training with the masked-language-model
loss (default, sequence 512), or SQuAD-style fine-tuning (--task squad: a start/end span head, as
NVIDIA's and Lambda's BERT benchmarks run it, at sequence 384).

    marmoset run --sim -- .venv/bin/python examples/bert.py --steps 3
"""
import torch
from torch import nn

from common import parser, train

VOCAB = 30522
SIZES = {"base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096), "tiny": (2, 128, 2, 512)}


class Bert(nn.Module):
    def __init__(self, seq, layers, hidden, heads, ff, outputs):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(
            hidden, heads, ff, dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, outputs)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tok(ids) + self.pos(pos))
        return self.head(self.encoder(x))


def main():
    p = parser(__doc__.splitlines()[0], batch=8)
    p.add_argument("--size", choices=SIZES, default="base", help="model size (default base)")
    p.add_argument("--task", choices=["mlm", "squad"], default="mlm", help="loss (default mlm)")
    p.add_argument("--seq", type=int, help="sequence length (default 512 for mlm, 384 for squad)")
    a = p.parse_args()
    dev = a.device
    seq = a.seq or (512 if a.task == "mlm" else 384)
    outputs = VOCAB if a.task == "mlm" else 2

    def batch():
        ids = torch.randint(0, VOCAB, (a.batch, seq), device=dev)
        if a.task == "mlm":
            return ids, torch.randint(0, VOCAB, (a.batch, seq), device=dev)
        return ids, torch.randint(0, seq, (a.batch, 2), device=dev)

    def loss(logits, target):
        if a.task == "mlm":
            return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
        # Start and end positions: a cross-entropy over the sequence for each.
        start, end = logits.float().unbind(-1)
        ce = nn.functional.cross_entropy
        return (ce(start, target[:, 0]) + ce(end, target[:, 1])) / 2

    model = Bert(seq, *SIZES[a.size], outputs)
    train(model, batch, loss, a.steps, dev, lr=1e-4, amp=a.amp, tf32=a.tf32, memory_fraction=a.memory_fraction)


if __name__ == "__main__":
    main()
