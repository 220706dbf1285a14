"""Keras ResNet-50 (keras.applications.ResNet50, weights=None) trained on random images,
jit_compile=False. Image size and class count are arguments (the default 64x64 keeps the
simulated GPU's host work short; ResNet-50 needs at least 32x32).

    marmoset run --sim -- .venv-tf/bin/python examples/tf/resnet50.py --steps 5
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse, setup, train  # noqa: E402


def main():
    p = parse(__doc__.splitlines()[0], batch=8)
    p.add_argument("--size", type=int, default=64, help="image height and width (default 64)")
    p.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    a = p.parse_args()
    device = setup(a)
    import keras

    model = keras.applications.ResNet50(
        weights=None, input_shape=(a.size, a.size, 3), classes=a.classes,
        classifier_activation=None,
    )

    def batch(rng):
        x = rng.standard_normal((a.batch, a.size, a.size, 3)).astype("float32")
        y = rng.integers(0, a.classes, size=(a.batch,)).astype("int64")
        return x, y

    train(model, batch, a.steps, device, lr=0.01)


if __name__ == "__main__":
    main()
