#!/usr/bin/env python3
"""A Python program that uses the GPU through the CUDA runtime's C ABI (ctypes, no framework):
allocates device memory, copies a buffer there and back, and checks it. It runs on any CUDA
installation and on Marmoset's simulated GPU:

    marmoset run --sim --trace run.jsonl -- python examples/cuda_ctypes.py
    marmoset inspect run.jsonl
"""
import ctypes
import sys

H2D, D2H = 1, 2


def load_runtime():
    for soname in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(soname)
        except OSError:
            continue
    sys.exit("no CUDA runtime found (libcudart.so.13 or .12): run under `marmoset run --sim` or install CUDA")


def check(rt, code, what):
    if code != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what} failed: {code} ({rt.cudaGetErrorString(code).decode()})")


def main():
    rt = load_runtime()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(rt, rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")
    print(f"device memory: {free.value} B free of {total.value} B")
    n = 8 << 20  # 8 MiB per buffer
    host = (ctypes.c_ubyte * n)(*[(i * 7) & 0xFF for i in range(256)] * (n // 256))
    back = (ctypes.c_ubyte * n)()
    bufs = []
    for _ in range(4):
        p = ctypes.c_void_p()
        check(rt, rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMalloc")
        bufs.append(p)
    for p in bufs:
        check(rt, rt.cudaMemcpy(p, host, ctypes.c_size_t(n), H2D), "cudaMemcpy to the device")
    check(rt, rt.cudaMemcpy(back, bufs[-1], ctypes.c_size_t(n), D2H), "cudaMemcpy to the host")
    for p in bufs:
        check(rt, rt.cudaFree(p), "cudaFree")
    same = bytes(back) == bytes(host)
    print(f"4 buffers of {n} B: round trip {'ok' if same else 'DIFFERS'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
