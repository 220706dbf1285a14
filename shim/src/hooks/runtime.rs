//! CUDA runtime hooks: memory, copies, memsets, launches, synchronisation.

use super::{Pending, hooks, range};
use crate::access::launch;
use crate::core::registry;
use planner::trace::{Access, CopyDir, Event, Replay};
use std::ffi::{c_int, c_uint, c_void};

type P = *mut c_void;

/// dim3, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// cudaLaunchConfig_t.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared: usize,
    pub stream: P,
    pub attrs: P,
    pub num_attrs: c_uint,
}

const ERROR_INITIALIZATION: c_int = 3;

pub fn alloc(api: &str, out: *mut u64, size: usize, stream: Option<u64>) -> Option<Pending> {
    let mut p = Pending::new(Event::Alloc {
        api: api.into(),
        alloc: 0,
        ptr: 0,
        size: size as u64,
        stream,
        result: 0,
    });
    p.alloc_out = Some((out, size as u64));
    Some(p)
}

pub fn free(api: &str, ptr: u64, stream: Option<u64>) -> Option<Pending> {
    // Before the registry forgets the allocation: what is rebuilt from it needs it.
    crate::virt::memory::before_free(ptr, stream);
    let (known, seq) = registry::unregister_alloc(ptr);
    let mut p = Pending::new(Event::Free {
        api: api.into(),
        ptr,
        alloc: known.map(|k| k.0),
        size: known.map(|k| k.1),
        stream,
        result: 0,
        pooled: known.is_some_and(|k| crate::virt::memory::pools(k.1)),
    });
    p.seq = Some(seq);
    Some(p)
}

/// cudaMemcpyKind, or None for cudaMemcpyDefault (inferred from the pointers).
pub fn copy(
    api: &str,
    dst: u64,
    src: u64,
    size: usize,
    kind: Option<c_int>,
    stream: Option<u64>,
) -> Option<Pending> {
    let dev = |p: u64| registry::points_into(p).is_some();
    let dir = match kind {
        Some(0) => CopyDir::H2h,
        Some(1) => CopyDir::H2d,
        Some(2) => CopyDir::D2h,
        Some(3) => CopyDir::D2d,
        _ => match (dev(src), dev(dst)) {
            (false, true) => CopyDir::H2d,
            (true, false) => CopyDir::D2h,
            (true, true) => CopyDir::D2d,
            (false, false) => CopyDir::H2h,
        },
    };
    let n = size as u64;
    let mut touches = Vec::new();
    if matches!(dir, CopyDir::D2h | CopyDir::D2d) {
        touches.extend(range(src, n, Access::R));
    }
    if matches!(dir, CopyDir::H2d | CopyDir::D2d) {
        touches.extend(range(dst, n, Access::W));
    }
    let p = Pending::new(Event::Copy {
        api: api.into(),
        dst,
        src,
        size: n,
        dir,
        stream,
        touches,
        result: 0,
    });
    Some(p.timed(stream.unwrap_or(0)))
}

/// Lineage: when tracing (or when the tracker follows the calls for a planner policy: its
/// recomputations replay calls from it), writes what replaying the call needs (a `lineage`
/// record) before the call is forwarded; it describes the next call record of the same thread.
pub fn with_lineage(
    p: Option<Pending>,
    replay: impl FnOnce() -> Option<Replay>,
) -> Option<Pending> {
    if p.is_some()
        && crate::core::bus::listening()
        && let Some(r) = replay()
    {
        crate::core::bus::emit(Event::Lineage { replay: r });
    }
    p
}

/// A memset of `bytes` bytes with `value` repeated at `width` bytes (1 or 4).
pub fn memset(
    api: &str,
    ptr: u64,
    bytes: u64,
    stream: Option<u64>,
    value: u32,
    width: u8,
) -> Option<Pending> {
    let touches = range(ptr, bytes, Access::W);
    let p = Pending::new(Event::Memset {
        api: api.into(),
        ptr,
        size: bytes,
        stream,
        touches,
        result: 0,
    });
    with_lineage(Some(p.timed(stream.unwrap_or(0))), || {
        Some(Replay::Memset { value, width })
    })
}

pub fn sync(api: &str, stream: Option<u64>) -> Option<Pending> {
    crate::sinks::timing::drain(false);
    Some(Pending::new(Event::Sync {
        api: api.into(),
        stream,
        result: 0,
    }))
}

/// A launched kernel as Marmoset knows it: the host stub a `cudaKernel_t` was made for (CUDA 13's
/// `<<<>>>`), else the handle as given (a host stub already).
fn stub(k: *const c_void) -> u64 {
    crate::access::fatbins::stub_of(k as usize).unwrap_or(k as usize) as u64
}

fn kernel(
    api: &str,
    f: u64,
    g: Dim3,
    b: Dim3,
    args: *mut P,
    shared: usize,
    stream: P,
) -> Option<Pending> {
    let touches = launch::touches(
        f as usize,
        true,
        [g.x, g.y, g.z],
        args,
        std::ptr::null_mut(),
    );
    let p = Pending::new(Event::Launch {
        api: api.into(),
        func: f,
        grid: [g.x, g.y, g.z],
        block: [b.x, b.y, b.z],
        stream: Some(stream as u64),
        touches,
        result: 0,
    });
    with_lineage(Some(p.timed(stream as u64)), || {
        launch::param_buffer(f as usize, true, args, std::ptr::null_mut()).map(|buf| {
            Replay::Kernel {
                params: buf,
                shared: shared as u64,
            }
        })
    })
}

/// Under a memory policy Marmoset allocates; None: forward to the real allocator.
pub fn managed_alloc(entry: &'static super::Entry, out: *mut u64, size: usize) -> Option<c_int> {
    super::attempt(entry, || crate::virt::memory::alloc(out, size))
}

/// A stream-ordered allocation under a memory policy: Marmoset allocates, and counts it in the
/// statistics of `pool` (None: the device's current pool); None: forward to the real allocator.
pub fn managed_alloc_async(
    entry: &'static super::Entry,
    out: *mut u64,
    size: usize,
    pool: Option<u64>,
) -> Option<c_int> {
    let r = managed_alloc(entry, out, size)?;
    if r == 0 {
        // SAFETY: Marmoset's allocation succeeded, so `out` is non-null and holds the new pointer.
        let ptr = unsafe { *out };
        super::attempt(entry, || {
            crate::virt::memory::stats::allocated(ptr, size as u64, pool);
            Some(())
        });
    }
    Some(r)
}

pub fn managed_free(entry: &'static super::Entry, ptr: u64, stream: Option<u64>) -> Option<c_int> {
    super::attempt(entry, || {
        crate::virt::memory::stats::freed(ptr);
        crate::virt::memory::free(ptr, stream)
    })
}

/// A memory pool's statistic under a memory policy, from Marmoset's counts (memory::stats);
/// None: the real pool's attribute.
pub fn pool_get(
    entry: &'static super::Entry,
    pool: u64,
    attr: c_int,
    value: *mut c_void,
) -> Option<c_int> {
    let v = super::attempt(entry, || crate::virt::memory::stats::figure(pool, attr))?;
    if value.is_null() {
        return Some(crate::virt::memory::stats::INVALID_VALUE);
    }
    // SAFETY: the caller's non-null output for one of the pool's figures, a cuuint64_t.
    unsafe { *(value as *mut u64) = v };
    Some(0)
}

/// A pool's high mark reset under a memory policy (memory::stats); None: the real pool's
/// attribute.
pub fn pool_set(
    entry: &'static super::Entry,
    pool: u64,
    attr: c_int,
    value: *mut c_void,
) -> Option<c_int> {
    if !crate::virt::memory::stats::is_figure(attr) {
        return None;
    }
    let v = if value.is_null() {
        u64::MAX
    } else {
        // SAFETY: the caller's non-null input for one of the pool's figures, a cuuint64_t.
        unsafe { *(value as *const u64) }
    };
    let r = super::attempt(entry, || crate::virt::memory::stats::set(pool, attr, v))?;
    Some(r.err().unwrap_or(0))
}

pub fn managed_info(
    entry: &'static super::Entry,
    free: *mut usize,
    total: *mut usize,
) -> Option<c_int> {
    super::attempt(entry, || crate::virt::memory::mem_info(free, total))
}

// SAFETY (every `unsafe { real(..) }` in this table): `real` is the real function of the
// entry's own name and signature (see `hooks!`), called with the caller's arguments unchanged.
hooks! {
    libs = crate::ffi::real::CUDART, unavailable = ERROR_INITIALIZATION, names = (entry, real);
    [""] fn cudaMalloc(p: *mut P, size: usize) => alloc("cudaMalloc", p as *mut u64, size, None),
        call = managed_alloc(entry, p as *mut u64, size).unwrap_or_else(|| unsafe { real(p, size) });
    [""] fn cudaFree(p: P) => free("cudaFree", p as u64, None),
        call = managed_free(entry, p as u64, None).unwrap_or_else(|| unsafe { real(p) });
    [""] fn cudaMallocAsync(p: *mut P, size: usize, s: P) => alloc("cudaMallocAsync", p as *mut u64, size, Some(s as u64)),
        call = managed_alloc_async(entry, p as *mut u64, size, None).unwrap_or_else(|| unsafe { real(p, size, s) });
    [""] fn cudaMallocFromPoolAsync(p: *mut P, size: usize, pool: P, s: P) =>
        alloc("cudaMallocFromPoolAsync", p as *mut u64, size, Some(s as u64)),
        call = managed_alloc_async(entry, p as *mut u64, size, Some(pool as u64)).unwrap_or_else(|| unsafe { real(p, size, pool, s) });
    [""] fn cudaFreeAsync(p: P, s: P) => free("cudaFreeAsync", p as u64, Some(s as u64)),
        call = managed_free(entry, p as u64, Some(s as u64)).unwrap_or_else(|| unsafe { real(p, s) });
    [""] fn cudaMallocHost(p: *mut P, size: usize) => None;
    [""] fn cudaHostAlloc(p: *mut P, size: usize, flags: c_uint) => None;
    [""] fn cudaFreeHost(p: P) => None;
    [""] fn cudaMemPoolGetAttribute(pool: P, attr: c_int, v: P) => None,
        call = pool_get(entry, pool as u64, attr, v).unwrap_or_else(|| unsafe { real(pool, attr, v) });
    [""] fn cudaMemPoolSetAttribute(pool: P, attr: c_int, v: P) => None,
        call = pool_set(entry, pool as u64, attr, v).unwrap_or_else(|| unsafe { real(pool, attr, v) });
    [""] fn cudaMemGetInfo(free: *mut usize, total: *mut usize) => None,
        call = managed_info(entry, free, total).unwrap_or_else(|| unsafe { real(free, total) });
    [""] fn cudaMemcpy(dst: P, src: *const c_void, n: usize, kind: c_int) =>
        copy("cudaMemcpy", dst as u64, src as u64, n, Some(kind).filter(|&k| k != 4), None);
    [""] fn cudaMemcpyAsync(dst: P, src: *const c_void, n: usize, kind: c_int, s: P) =>
        copy("cudaMemcpyAsync", dst as u64, src as u64, n, Some(kind).filter(|&k| k != 4), Some(s as u64));
    [""] fn cudaMemset(p: P, v: c_int, n: usize) => memset("cudaMemset", p as u64, n as u64, None, v as u8 as u32, 1);
    [""] fn cudaMemsetAsync(p: P, v: c_int, n: usize, s: P) => memset("cudaMemsetAsync", p as u64, n as u64, Some(s as u64), v as u8 as u32, 1);
    [""] fn cudaLaunchKernel(f: *const c_void, g: Dim3, b: Dim3, args: *mut P, shared: usize, s: P) =>
        kernel("cudaLaunchKernel", stub(f), g, b, args, shared, s);
    [""] fn __cudaLaunchKernel(k: *const c_void, g: Dim3, b: Dim3, args: *mut P, shared: usize, s: P) =>
        kernel("__cudaLaunchKernel", stub(k), g, b, args, shared, s);
    [""] fn __cudaLaunchKernel_ptsz(k: *const c_void, g: Dim3, b: Dim3, args: *mut P, shared: usize, s: P) =>
        kernel("__cudaLaunchKernel_ptsz", stub(k), g, b, args, shared, s);
    [""] fn cudaLaunchKernelExC(cfg: *const LaunchConfig, f: *const c_void, args: *mut P) => {
        // SAFETY: cfg is null or a valid cudaLaunchConfig_t (API contract); read before forwarding.
        unsafe { cfg.as_ref() }.and_then(|c| kernel("cudaLaunchKernelExC", stub(f), c.grid, c.block, args, c.shared, c.stream))
    };
    [""] fn cudaStreamSynchronize(s: P) => sync("cudaStreamSynchronize", Some(s as u64));
    [""] fn cudaDeviceSynchronize() => sync("cudaDeviceSynchronize", None);
    [""] fn cudaEventSynchronize(e: P) => sync("cudaEventSynchronize", None);
    [""] fn cudaStreamWaitEvent(s: P, e: P, flags: c_uint) => sync("cudaStreamWaitEvent", Some(s as u64));
}
