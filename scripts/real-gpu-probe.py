"""Step by step through a first PyTorch program on a GPU (then, under the probes' budget, a
convolution's tensors evicted and used again, 512 MiB of tensors read back whole, and a tensor made
on a fresh thread), printing after each step the CUDA
runtime's pending last error (cudaPeekAtLastError), so that a failure names the first call that
left one. For scripts/real-gpu-probe.sh."""
import ctypes
import os
import sys
import threading

import torch

rt = None


def pending():
    global rt
    if rt is None:
        for so in ("libcudart.so.13", "libcudart.so.12"):
            try:
                rt = ctypes.CDLL(so, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
                break
            except OSError:
                continue
    return rt.cudaPeekAtLastError() if rt else "no libcudart"


def step(name, f):
    try:
        r = f()
        torch.cuda.synchronize()
        print(f"ok {name} {'' if r is None else r} (pending last error {pending()})", flush=True)
    except Exception as e:
        print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0]} (pending {pending()})", flush=True)
        sys.exit(1)


d = "cuda"
step("init", lambda: torch.cuda.init())
step("empty", lambda: tuple(torch.empty(1024, device=d).shape))
step("h2d", lambda: tuple(torch.ones(1024).to(d).shape))
step("fill+sum", lambda: torch.ones(1024, device=d).sum().item())
step("matmul", lambda: (torch.ones(64, 64, device=d) @ torch.ones(64, 64, device=d)).sum().item())
x = torch.ones(2, 3, 16, 16, device=d, requires_grad=True)
w = torch.ones(4, 3, 3, 3, device=d, requires_grad=True)
step("conv", lambda: torch.nn.functional.conv2d(x, w).sum().item())
step("backward", lambda: torch.nn.functional.conv2d(x, w).relu().sum().backward())
# Under a budget below 512 MiB: eight 64 MiB tensors, each filled with its index, then each read
# back whole. Eviction and restore must keep every byte (on a real GPU; the simulated GPU computes
# none of torch's kernels).
# A convolution's input and output (64 MiB each), made before the budget fills: evicted by the
# fill, then the same convolution again must bring its input back (cuDNN's backend API: the
# variant pack's pointers are what Marmoset must know).
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
conv = {}


def conv_before():
    conv["x"] = torch.randn(16, 16, 256, 256, device=d)
    conv["w"] = torch.randn(16, 16, 3, 3, device=d)
    conv["y"] = torch.nn.functional.conv2d(conv["x"], conv["w"], padding=1)


step("conv 64 MiB", conv_before)
ts = []
step("fill 8 x 64 MiB", lambda: ts.extend(torch.full((16 * 2**20,), float(i), device=d) for i in range(8)))


def every_byte_back():
    if "simulated" in torch.cuda.get_device_name():
        return "not checked: the simulated GPU computes none of torch's kernels"
    kept = [bool((t == i).all()) for i, t in enumerate(ts)]
    if not all(kept):
        raise RuntimeError(f"contents lost: {kept}")
    return "8 of 8 intact"


step("read back", every_byte_back)


def conv_after_eviction():
    again = torch.nn.functional.conv2d(conv["x"], conv["w"], padding=1)
    if "simulated" in torch.cuda.get_device_name():
        return "not checked: the simulated GPU computes none of torch's kernels"
    if not torch.allclose(again, conv["y"], rtol=1e-4, atol=1e-4):
        raise RuntimeError(f"differs: max {float((again - conv['y']).abs().max())}")
    return "the same output from the input brought back"


step("conv after eviction", conv_after_eviction)


def on_a_fresh_thread():
    """A 64 MiB tensor made on a new thread, whose first CUDA call is the allocation: with the
    budget full it must evict first, on a thread that may have no context current yet."""
    out = {}

    def work():
        try:
            t = torch.full((16 * 2**20,), 9.0, device=d)
            torch.cuda.synchronize()
            out["value"] = t[-1].item()
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"

    th = threading.Thread(target=work)
    th.start()
    th.join()
    if "error" in out:
        raise RuntimeError(out["error"])
    return "made on a fresh thread"


step("fresh thread", on_a_fresh_thread)
step("read back again", every_byte_back)
print("all steps ran", flush=True)
