"""A small Keras transformer encoder classifier (token and position embeddings, LAYERS blocks of
multi-head self-attention and a feed-forward layer, each with a residual and LayerNormalization,
mean pooling, Dense) trained on random tokens, jit_compile=False.

    marmoset run --sim -- .venv-tf/bin/python examples/tf/transformer.py --steps 5
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse, setup, train  # noqa: E402


def main():
    p = parse(__doc__.splitlines()[0], batch=16)
    p.add_argument("--seq", type=int, default=64, help="sequence length (default 64)")
    p.add_argument("--vocab", type=int, default=1000, help="vocabulary size (default 1000)")
    p.add_argument("--dim", type=int, default=128, help="model width (default 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="encoder blocks (default 2)")
    p.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    a = p.parse_args()
    device = setup(a)
    import keras
    from keras import layers, ops

    class Embed(layers.Layer):
        def __init__(self):
            super().__init__()
            self.tok = layers.Embedding(a.vocab, a.dim)
            self.pos = layers.Embedding(a.seq, a.dim)

        def call(self, x):
            return self.tok(x) + self.pos(ops.arange(a.seq))

    tokens = keras.Input((a.seq,), dtype="int32")
    h = Embed()(tokens)
    for _ in range(a.layers):
        att = layers.MultiHeadAttention(a.heads, a.dim // a.heads)(h, h)
        h = layers.LayerNormalization()(h + att)
        ff = layers.Dense(a.dim)(layers.Dense(4 * a.dim, activation="gelu")(h))
        h = layers.LayerNormalization()(h + ff)
    out = layers.Dense(a.classes)(layers.GlobalAveragePooling1D()(h))
    model = keras.Model(tokens, out)

    def batch(rng):
        x = rng.integers(0, a.vocab, size=(a.batch, a.seq)).astype("int32")
        y = rng.integers(0, a.classes, size=(a.batch,)).astype("int64")
        return x, y

    train(model, batch, a.steps, device, lr=0.01)


if __name__ == "__main__":
    main()
