"""Shared by the TensorFlow examples: arguments, the training loop on random batches
(`train_on_batch`, one step a call, jit_compile=False) and a line per step."""
import argparse
import ctypes
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


class DeviceMeter:
    """A step's device time and memory, from the CUDA runtime TensorFlow has loaded.

    Time: CUDA events recorded after the device is idle (`cudaDeviceSynchronize`, then an event
    on the default stream), since TensorFlow's own streams have no events a program can reach; on
    the simulated GPU this is its virtual clock. Memory: the high-water mark of the device's
    default memory pool, which TensorFlow's `cuda_malloc_async` allocator allocates from, reset
    at each step's start (`cudaMemPoolAttrUsedMemHigh`); None under another allocator."""

    USED_MEM_HIGH = 8

    def __init__(self):
        self.rt = ctypes.CDLL("libcudart.so.12")
        self.pool = ctypes.c_void_p()
        if self.rt.cudaDeviceGetDefaultMemPool(ctypes.byref(self.pool), 0) != 0:
            self.pool = None
        self.last = self._mark()

    def _call(self, name, *args):
        err = getattr(self.rt, name)(*args)
        if err != 0:
            raise SystemExit(f"{name} failed with CUDA error {err}")

    def _mark(self):
        e = ctypes.c_void_p()
        self._call("cudaEventCreate", ctypes.byref(e))
        self._call("cudaDeviceSynchronize")
        self._call("cudaEventRecord", e, None)
        self._call("cudaEventSynchronize", e)
        return e

    def start(self):
        """Marks a step's start: the clock's lap begins, the pool's high-water mark is reset."""
        self.lap_ms()
        if self.pool:
            zero = ctypes.c_uint64(0)
            self._call("cudaMemPoolSetAttribute", self.pool, self.USED_MEM_HIGH, ctypes.byref(zero))

    def lap_ms(self):
        """Milliseconds of device time since the previous lap (or since the meter was made)."""
        now = self._mark()
        ms = ctypes.c_float()
        self._call("cudaEventElapsedTime", ctypes.byref(ms), self.last, now)
        self.rt.cudaEventDestroy(self.last)
        self.last = now
        return ms.value

    def pool_high_mib(self):
        """The pool's high-water mark since the step's start, in MiB (None: no pool)."""
        if not self.pool:
            return None
        v = ctypes.c_uint64()
        self._call("cudaMemPoolGetAttribute", self.pool, self.USED_MEM_HIGH, ctypes.byref(v))
        return v.value / (1 << 20)


def train(model, make_batch, steps, device, lr=0.01):
    """SGD with momentum, sparse cross-entropy on logits; prints each step's loss, host time and,
    on a GPU, device time and the memory pool's peak."""
    import tensorflow as tf
    import keras

    with tf.device(device):
        model.compile(
            optimizer=keras.optimizers.SGD(lr, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
        rng = np.random.default_rng(0)
        meter = None if device.startswith("/CPU") else DeviceMeter()
        for step in range(steps):
            x, y = make_batch(rng)
            t = time.time()
            if meter:
                meter.start()
            loss = model.train_on_batch(x, y)
            loss = float(np.asarray(loss).reshape(-1)[0])
            dev = ""
            if meter:
                dev = f", {meter.lap_ms():.3f} ms device time"
                high = meter.pool_high_mib()
                if high is not None:
                    dev += f", {high:.1f} MiB pool peak"
            print(f"step {step}: loss {loss:.4f} ({time.time() - t:.2f} s host time{dev})", flush=True)
        print("iterations", int(model.optimizer.iterations.numpy()), flush=True)
