"""ResNet-50 (He et al., 2016: bottleneck blocks [3, 4, 6, 3], BatchNorm, 1000 classes) on random
224x224 images, in plain PyTorch (no torchvision). The default batch of 128 peaks above 8 GiB in
float32.

    marmoset run --sim -- .venv/bin/python examples/resnet50.py --steps 3
"""
import torch
from torch import nn

from common import parse, train


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inp, width, stride):
        super().__init__()
        out = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inp, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.down = None
        if stride != 1 or inp != out:
            self.down = nn.Sequential(
                nn.Conv2d(inp, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return self.relu(self.body(x) + skip)


def resnet50(classes=1000):
    layers = [
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    inp = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            layers.append(Bottleneck(inp, width, stride if i == 0 else 1))
            inp = width * Bottleneck.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inp, classes)]
    return nn.Sequential(*layers)


def main():
    a = parse(__doc__.splitlines()[0], batch=128)
    dev = a.device

    def batch():
        x = torch.randn(a.batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (a.batch,), device=dev)
        return x, y

    train(
        resnet50(),
        batch,
        nn.functional.cross_entropy,
        a.steps,
        dev,
        lr=0.1,
        amp=a.amp,
        tf32=a.tf32,
        memory_fraction=a.memory_fraction,
    )


if __name__ == "__main__":
    main()
