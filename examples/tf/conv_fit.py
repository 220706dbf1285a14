"""A small Keras convolutional model (Conv2D + BatchNormalization + ReLU blocks, pooling, Dense)
trained for STEPS steps (default 5) on random 32x32x3 images (jit_compile=False). MODEL=resnet50
trains keras.applications.ResNet50 (weights=None, 64x64 inputs, 10 classes) instead. Prints
`loss <value>` and `iterations <n>`. BN=0 leaves the batch normalisations out."""
import os

import numpy as np
import tensorflow as tf
import keras

steps = int(os.environ.get("STEPS", "5"))
batch = 8
if os.environ.get("TF32") == "0":
    tf.config.experimental.enable_tensor_float_32_execution(False)
tf.random.set_seed(0)
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
if os.environ.get("MODEL") == "resnet50":
    size = 64
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=10)
else:
    size = 32
    bn = os.environ.get("BN", "1") != "0"
    layers = [keras.Input((size, size, 3))]
    for ch in (16, 32):
        layers += [
            keras.layers.Conv2D(ch, 3, padding="same", use_bias=not bn),
            *([keras.layers.BatchNormalization()] if bn else []),
            keras.layers.ReLU(),
            keras.layers.MaxPooling2D(),
        ]
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    model = keras.Sequential(layers)
x = rng.standard_normal((steps * batch, size, size, 3)).astype("float32")
y = rng.integers(0, 10, size=(steps * batch,)).astype("int64")
model.compile(
    optimizer=keras.optimizers.SGD(0.01),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=False,
)
h = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
print(f"loss {h.history['loss'][-1]:.6f}", flush=True)
print("iterations", int(model.optimizer.iterations.numpy()), flush=True)
