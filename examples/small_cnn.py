"""A small CNN on random 32x32 images: conv, ReLU, max-pool, conv, ReLU, average pool, linear,
cross-entropy, SGD with momentum. Runs in seconds on the simulated GPU.

    marmoset run --sim -- .venv/bin/python examples/small_cnn.py --steps 3
"""
import torch
from torch import nn

from common import parse, train


def main():
    a = parse(__doc__.splitlines()[0], batch=32)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    dev = a.device

    def batch():
        x = torch.randn(a.batch, 3, 32, 32, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        return x, y

    train(model, batch, nn.functional.cross_entropy, a.steps, dev, memory_fraction=a.memory_fraction)


if __name__ == "__main__":
    main()
