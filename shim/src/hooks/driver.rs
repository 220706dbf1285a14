//! CUDA driver hooks: memory, copies, memsets, launches, synchronisation. The bracketed name is
//! the base name `cuGetProcAddress` is asked for.

use super::runtime::{
    alloc, copy, free, managed_alloc, managed_alloc_async, managed_free, managed_info, memset,
    pool_get, pool_set, sync, with_lineage,
};
use super::{Pending, hooks};
use crate::access::launch;
use planner::trace::{Event, Replay};
use std::ffi::{c_char, c_int, c_uint, c_void};

type P = *mut c_void;
type D = u64;

const NOT_INITIALIZED: std::ffi::c_int = 3;

/// CUlaunchConfig.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared: c_uint,
    pub stream: P,
    pub attrs: P,
    pub num_attrs: c_uint,
}

/// A library's own `cuMemCreate` (Marmoset's allocator calls the real one directly): counted
/// against the budget once made (crate::virt::memory::foreign).
fn vmm_create(real: impl FnOnce() -> c_int, h: *mut u64, size: usize) -> c_int {
    let r = real();
    if r == 0 && !h.is_null() {
        // SAFETY: the call succeeded, so it wrote the new handle through `h`.
        let handle = unsafe { *h };
        crate::virt::memory::foreign::created(handle, size as u64);
    }
    r
}

fn vmm_release(real: impl FnOnce() -> c_int, h: u64) -> c_int {
    let r = real();
    if r == 0 {
        crate::virt::memory::foreign::released(h);
    }
    r
}

/// A module loaded: its PTX, where it is PTX, kept for the launches of its kernels
/// (`access::modules`).
fn module_loaded(real: impl FnOnce() -> c_int, m: *mut P, image: *const c_void) -> c_int {
    let r = real();
    if r == 0 && !m.is_null() {
        // SAFETY: the call succeeded, so it wrote the module's handle through `m`; `image` is
        // the image the driver accepted (a binary with its magic number, or NUL-terminated
        // text).
        unsafe { crate::access::modules::loaded(*m as usize, image) };
    }
    r
}

fn function_got(real: impl FnOnce() -> c_int, f: *mut P, m: P, name: *const c_char) -> c_int {
    let r = real();
    if r == 0 && !f.is_null() {
        // SAFETY: the call succeeded, so it wrote the function's handle through `f`; `name`
        // is the NUL-terminated name the driver found.
        unsafe { crate::access::modules::function(*f as usize, m as usize, name) };
    }
    r
}

fn module_unloaded(real: impl FnOnce() -> c_int, m: P) -> c_int {
    let r = real();
    if r == 0 {
        crate::access::modules::unloaded(m as usize);
    }
    r
}

/// A driver launch's record, and its lineage (the parameter buffer, which recomputation
/// launches again) where a listener takes it.
#[allow(clippy::too_many_arguments)]
fn kernel(
    api: &str,
    f: P,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    s: P,
    params: *mut P,
    extra: *mut P,
) -> Option<Pending> {
    let touches = launch::touches(f as usize, false, grid, params, extra);
    let p = Pending::new(Event::Launch {
        api: api.into(),
        func: f as u64,
        grid,
        block,
        stream: Some(s as u64),
        touches,
        result: 0,
    });
    with_lineage(Some(p.timed(s as u64)), || {
        launch::param_buffer(f as usize, false, params, extra).map(|buf| Replay::Kernel {
            params: buf,
            shared: shared as u64,
        })
    })
}

// SAFETY (every `unsafe { real(..) }` in this table): `real` is the real function of the
// entry's own name and signature (see `hooks!`), called with the caller's arguments unchanged.
hooks! {
    libs = crate::ffi::real::CUDA, unavailable = NOT_INITIALIZED, names = (entry, real);
    ["cuMemAlloc"] fn cuMemAlloc_v2(p: *mut D, size: usize) => alloc("cuMemAlloc_v2", p, size, None),
        call = managed_alloc(entry, p, size).unwrap_or_else(|| unsafe { real(p, size) });
    ["cuMemFree"] fn cuMemFree_v2(p: D) => free("cuMemFree_v2", p, None),
        call = managed_free(entry, p, None).unwrap_or_else(|| unsafe { real(p) });
    ["cuMemAllocAsync"] fn cuMemAllocAsync(p: *mut D, size: usize, s: P) => alloc("cuMemAllocAsync", p, size, Some(s as u64)),
        call = managed_alloc_async(entry, p, size, None).unwrap_or_else(|| unsafe { real(p, size, s) });
    ["cuMemAllocFromPoolAsync"] fn cuMemAllocFromPoolAsync(p: *mut D, size: usize, pool: P, s: P) =>
        alloc("cuMemAllocFromPoolAsync", p, size, Some(s as u64)),
        call = managed_alloc_async(entry, p, size, Some(pool as u64)).unwrap_or_else(|| unsafe { real(p, size, pool, s) });
    ["cuMemFreeAsync"] fn cuMemFreeAsync(p: D, s: P) => free("cuMemFreeAsync", p, Some(s as u64)),
        call = managed_free(entry, p, Some(s as u64)).unwrap_or_else(|| unsafe { real(p, s) });
    ["cuMemPoolGetAttribute"] fn cuMemPoolGetAttribute(pool: P, attr: c_int, v: P) => None,
        call = pool_get(entry, pool as u64, attr, v).unwrap_or_else(|| unsafe { real(pool, attr, v) });
    ["cuMemPoolSetAttribute"] fn cuMemPoolSetAttribute(pool: P, attr: c_int, v: P) => None,
        call = pool_set(entry, pool as u64, attr, v).unwrap_or_else(|| unsafe { real(pool, attr, v) });
    ["cuMemCreate"] fn cuMemCreate(h: *mut u64, size: usize, prop: *const c_void, flags: u64) => None,
        call = vmm_create(|| unsafe { real(h, size, prop, flags) }, h, size);
    ["cuMemRelease"] fn cuMemRelease(h: u64) => None,
        call = vmm_release(|| unsafe { real(h) }, h);
    ["cuMemGetInfo"] fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => None,
        call = managed_info(entry, free, total).unwrap_or_else(|| unsafe { real(free, total) });
    ["cuMemcpy"] fn cuMemcpy(dst: D, src: D, n: usize) => copy("cuMemcpy", dst, src, n, None, None);
    ["cuMemcpyAsync"] fn cuMemcpyAsync(dst: D, src: D, n: usize, s: P) => copy("cuMemcpyAsync", dst, src, n, None, Some(s as u64));
    ["cuMemcpyHtoD"] fn cuMemcpyHtoD_v2(dst: D, src: *const c_void, n: usize) => copy("cuMemcpyHtoD_v2", dst, src as u64, n, Some(1), None);
    ["cuMemcpyDtoH"] fn cuMemcpyDtoH_v2(dst: P, src: D, n: usize) => copy("cuMemcpyDtoH_v2", dst as u64, src, n, Some(2), None);
    ["cuMemcpyDtoD"] fn cuMemcpyDtoD_v2(dst: D, src: D, n: usize) => copy("cuMemcpyDtoD_v2", dst, src, n, Some(3), None);
    ["cuMemcpyHtoDAsync"] fn cuMemcpyHtoDAsync_v2(dst: D, src: *const c_void, n: usize, s: P) =>
        copy("cuMemcpyHtoDAsync_v2", dst, src as u64, n, Some(1), Some(s as u64));
    ["cuMemcpyDtoHAsync"] fn cuMemcpyDtoHAsync_v2(dst: P, src: D, n: usize, s: P) =>
        copy("cuMemcpyDtoHAsync_v2", dst as u64, src, n, Some(2), Some(s as u64));
    ["cuMemcpyDtoDAsync"] fn cuMemcpyDtoDAsync_v2(dst: D, src: D, n: usize, s: P) =>
        copy("cuMemcpyDtoDAsync_v2", dst, src, n, Some(3), Some(s as u64));
    ["cuMemsetD8"] fn cuMemsetD8_v2(p: D, v: u8, n: usize) => memset("cuMemsetD8_v2", p, n as u64, None, v as u32, 1);
    ["cuMemsetD32"] fn cuMemsetD32_v2(p: D, v: u32, n: usize) => memset("cuMemsetD32_v2", p, 4 * n as u64, None, v, 4);
    ["cuMemsetD8Async"] fn cuMemsetD8Async(p: D, v: u8, n: usize, s: P) => memset("cuMemsetD8Async", p, n as u64, Some(s as u64), v as u32, 1);
    ["cuMemsetD32Async"] fn cuMemsetD32Async(p: D, v: u32, n: usize, s: P) =>
        memset("cuMemsetD32Async", p, 4 * n as u64, Some(s as u64), v, 4);
    ["cuLaunchKernel"] fn cuLaunchKernel(f: P, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, s: P, params: *mut P, extra: *mut P) =>
        kernel("cuLaunchKernel", f, [gx, gy, gz], [bx, by, bz], shared, s, params, extra);
    ["cuLaunchKernelEx"] fn cuLaunchKernelEx(cfg: *const LaunchConfig, f: P, params: *mut P, extra: *mut P) => {
        // SAFETY: cfg is null or a valid CUlaunchConfig (API contract); read before forwarding.
        unsafe { cfg.as_ref() }.and_then(|c| kernel("cuLaunchKernelEx", f, c.grid, c.block, c.shared, c.stream, params, extra))
    };
    ["cuModuleLoadData"] fn cuModuleLoadData(m: *mut P, image: *const c_void) => None,
        call = module_loaded(|| unsafe { real(m, image) }, m, image);
    ["cuModuleLoadDataEx"] fn cuModuleLoadDataEx(m: *mut P, image: *const c_void, n: c_uint, opts: *mut c_int, vals: *mut P) => None,
        call = module_loaded(|| unsafe { real(m, image, n, opts, vals) }, m, image);
    ["cuModuleGetFunction"] fn cuModuleGetFunction(f: *mut P, m: P, name: *const c_char) => None,
        call = function_got(|| unsafe { real(f, m, name) }, f, m, name);
    ["cuModuleUnload"] fn cuModuleUnload(m: P) => None,
        call = module_unloaded(|| unsafe { real(m) }, m);
    ["cuStreamSynchronize"] fn cuStreamSynchronize(s: P) => sync("cuStreamSynchronize", Some(s as u64));
    ["cuCtxSynchronize"] fn cuCtxSynchronize() => sync("cuCtxSynchronize", None);
    ["cuEventSynchronize"] fn cuEventSynchronize(e: P) => sync("cuEventSynchronize", None);
    ["cuStreamWaitEvent"] fn cuStreamWaitEvent(s: P, e: P, flags: c_uint) => sync("cuStreamWaitEvent", Some(s as u64));
}
