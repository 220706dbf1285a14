"""Unmodified PyTorch's default cuDNN path (the v8 backend API through cuDNN's frontend: no
TORCH_CUDNN_V8_API_DISABLED) on the simulated GPU in SIMGPU_MODE=data, against torch's own CPU
results. Inputs reach the device by copies and results come back by copies (both real in data
mode); cuDNN computes for real. Torch's own CUDA kernels compute nothing on the simulator, so the
script calls the cuDNN operators directly and adds no bias.

Prints key=value: conv_fwd_err, conv_bwd_data_err, conv_bwd_filter_err, bn_fwd_err,
bn_running_mean_err, bn_running_var_err, bn_dx_err, bn_dweight_err, bn_dbias_err, cudnn_version.
"""
import os

import torch

assert "TORCH_CUDNN_V8_API_DISABLED" not in os.environ
torch.manual_seed(0)


def err(gpu, cpu):
    return (gpu.cpu() - cpu).abs().max().item()


x = torch.randn(4, 3, 12, 11)
w = torch.randn(6, 3, 3, 3)
gy = torch.randn(4, 6, 12, 11)
xd, wd, gyd = x.cuda(), w.cuda(), gy.cuda()
print(f"cudnn_version={torch.backends.cudnn.version()}")
args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
print(f"conv_fwd_err={err(torch.nn.functional.conv2d(xd, wd, padding=1), torch.nn.functional.conv2d(x, w, padding=1))}")
gx, gw, _ = torch.ops.aten.convolution_backward(gyd, xd, wd, None, *args)
rx, rw, _ = torch.ops.aten.convolution_backward(gy, x, w, None, *args)
print(f"conv_bwd_data_err={err(gx, rx)}")
print(f"conv_bwd_filter_err={err(gw, rw)}")

g, b = torch.randn(3), torch.randn(3)
rm, rv = torch.zeros(3), torch.ones(3)
rmd, rvd = rm.cuda(), rv.cuda()
y, save_mean, save_invstd, reserve = torch.ops.aten.cudnn_batch_norm(
    xd, g.cuda(), b.cuda(), rmd, rvd, True, 0.1, 1e-5
)
print(f"bn_fwd_err={err(y, torch.nn.functional.batch_norm(x, rm, rv, g, b, True, 0.1, 1e-5))}")
print(f"bn_running_mean_err={err(rmd, rm)}")
print(f"bn_running_var_err={err(rvd, rv)}")
gyn = torch.randn(4, 3, 12, 11)
dx, dg, db = torch.ops.aten.cudnn_batch_norm_backward(
    xd, gyn.cuda(), g.cuda(), rmd, rvd, save_mean, save_invstd, 1e-5, reserve
)
xr, gr, br = x.clone().requires_grad_(), g.clone().requires_grad_(), b.clone().requires_grad_()
torch.nn.functional.batch_norm(xr, None, None, gr, br, True, 0.1, 1e-5).backward(gyn)
print(f"bn_dx_err={err(dx, xr.grad)}")
print(f"bn_dweight_err={err(dg, gr.grad)}")
print(f"bn_dbias_err={err(db, br.grad)}")
