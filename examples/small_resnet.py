"""A small ResNet on random 16x16 images: a stem (conv, batch norm, in-place ReLU) and residual
blocks as torchvision's (conv, batch norm, in-place ReLU, conv, batch norm, `out += identity`,
in-place ReLU; 1x1 convolutions, 64 channels), average pool, linear, cross-entropy, SGD with
momentum. Each activation is 1 MiB at batch 16. Runs in seconds on the simulated GPU, in data
mode too; with --exact the losses are printed exactly as well (float.hex), to compare runs bit
for bit.

    marmoset run --sim -- .venv/bin/python examples/small_resnet.py --steps 8 --exact
"""
import torch
from torch import nn

from common import parser, train


class Block(nn.Module):
    """torchvision's residual block, as ResNet-50's bottleneck ends: the second batch norm's
    output gets the identity added in place, then an in-place ReLU."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


def main():
    p = parser(__doc__.splitlines()[0], batch=16)
    p.add_argument("--blocks", type=int, default=2, help="residual blocks (default 2)")
    p.add_argument("--exact", action="store_true", help="print each loss as float.hex too")
    a = p.parse_args()
    torch.manual_seed(0)
    c = 64
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1, bias=False),
        nn.BatchNorm2d(c),
        nn.ReLU(inplace=True),
        *[Block(c) for _ in range(a.blocks)],
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c, 10),
    )
    dev = a.device
    losses = []

    def batch():
        x = torch.randn(a.batch, 3, 16, 16, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        return x, y

    def loss_fn(out, target):
        loss = nn.functional.cross_entropy(out, target)
        losses.append(loss.detach())
        return loss

    train(model, batch, loss_fn, a.steps, dev)
    if a.exact:
        print("exact losses:", " ".join(float(v.item()).hex() for v in losses), flush=True)
        print("checksum:", float(sum(p.double().sum() for p in model.parameters())).hex())


if __name__ == "__main__":
    main()
