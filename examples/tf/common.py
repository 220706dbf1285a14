"""Shared by the TensorFlow examples: arguments, the training loop on random batches
(`train_on_batch`, one step a call, jit_compile=False) and a line per step."""
import argparse
import time

import numpy as np


def parse(description, batch, steps=5):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps, help=f"training steps (default {steps})")
    p.add_argument("--batch", type=int, default=batch, help=f"batch size (default {batch})")
    p.add_argument("--tf32", choices=["on", "off"], default="on",
                   help="TensorFloat-32 in matmuls and convolutions (default on, TF's own)")
    p.add_argument("--cpu", action="store_true",
                   help="train on the CPU (else the script stops when TensorFlow sees no GPU)")
    return p


def setup(a):
    """Seeds, TF32, and the device: the GPU unless --cpu (an error when TensorFlow has none)."""
    import tensorflow as tf
    import keras

    tf.random.set_seed(0)
    keras.utils.set_random_seed(0)
    if a.tf32 == "off":
        tf.config.experimental.enable_tensor_float_32_execution(False)
    gpus = tf.config.list_physical_devices("GPU")
    if a.cpu:
        tf.config.set_visible_devices([], "GPU")
        return "/CPU:0"
    if not gpus:
        raise SystemExit("no GPU visible to TensorFlow (pass --cpu to train on the CPU)")
    print(f"device: {gpus[0].name}", flush=True)
    return "/GPU:0"


def train(model, make_batch, steps, device, lr=0.01):
    """SGD with momentum, sparse cross-entropy on logits; prints each step's loss and host time."""
    import tensorflow as tf
    import keras

    with tf.device(device):
        model.compile(
            optimizer=keras.optimizers.SGD(lr, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
        rng = np.random.default_rng(0)
        for step in range(steps):
            x, y = make_batch(rng)
            t = time.time()
            loss = model.train_on_batch(x, y)
            loss = float(np.asarray(loss).reshape(-1)[0])
            print(f"step {step}: loss {loss:.4f} ({time.time() - t:.2f} s host time)", flush=True)
        print("iterations", int(model.optimizer.iterations.numpy()), flush=True)
