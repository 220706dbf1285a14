"""A BERT-base-like encoder (Devlin et al., 2019: 12 layers, hidden 768, 12 heads, feed-forward
3072, GELU, post-LayerNorm) pre-trained with masked-language-model loss on random tokens at
sequence length 512, in plain PyTorch modules.

    marmoset run --sim -- .venv/bin/python examples/bert.py --steps 3
"""
import torch
from torch import nn

from common import parse, train

VOCAB = 30522
SEQ = 512


class Bert(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, ff=3072):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, hidden)
        self.pos = nn.Embedding(SEQ, hidden)
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(
            hidden, heads, ff, dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tok(ids) + self.pos(pos))
        return self.head(self.encoder(x))


def main():
    a = parse(__doc__.splitlines()[0], batch=8)
    dev = a.device

    def batch():
        ids = torch.randint(0, VOCAB, (a.batch, SEQ), device=dev)
        return ids, torch.randint(0, VOCAB, (a.batch, SEQ), device=dev)

    def mlm_loss(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    train(Bert(), batch, mlm_loss, a.steps, dev, lr=1e-4)


if __name__ == "__main__":
    main()
