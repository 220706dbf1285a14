"""A small Keras Dense model (32 -> 64 ReLU -> 10) trained on random data (jit_compile=False).

EPOCHS epochs (default 1) of STEPS steps (default 4) of 32 samples; TF32=0 turns TensorFlow's
TF32 GEMMs off. Prints `loss <value>` per epoch and `iterations <n>`, the optimizer's step
counter. Seeded, so that the same run on TensorFlow's CPU (`CUDA_VISIBLE_DEVICES=`) gives the
losses to compare with.
"""
import os

import numpy as np
import tensorflow as tf
import keras

steps = int(os.environ.get("STEPS", "4"))
batch = 32
if os.environ.get("TF32") == "0":
    tf.config.experimental.enable_tensor_float_32_execution(False)
tf.random.set_seed(0)
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((steps * batch, 32)).astype("float32")
y = rng.integers(0, 10, size=(steps * batch,)).astype("int64")

model = keras.Sequential(
    [
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer=keras.optimizers.SGD(0.1),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=False,
)
print("devices", [d.name for d in tf.config.list_logical_devices()], flush=True)
h = model.fit(x, y, batch_size=batch, epochs=int(os.environ.get("EPOCHS", "1")), shuffle=False, verbose=0)
for v in h.history["loss"]:
    print(f"loss {v:.6f}", flush=True)
print("iterations", int(model.optimizer.iterations.numpy()), flush=True)
