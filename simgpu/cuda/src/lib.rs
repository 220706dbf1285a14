//! `libcuda.so.1` of the simulated GPU: the CUDA driver API subset Marmoset and its workloads
//! use, with the real names, argument layouts and CUresult values, over the device model in
//! [`device`]. Also exports the simulator's own calls (`simgpu*`), which the simulated runtime
//! and cuDNN, and the workloads (to register host-implemented kernels), reach through `dlsym`.
//!
//! Every figure this library prints or writes is simulated.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod abort;
mod context;
mod device;
pub mod devices;
mod fatbin;
mod host_kernels;
mod library;
mod loaded;
mod modules;
mod props;
mod ptx;

use __simgpu_stubs::{
    cuCtxPopCurrent, cuCtxPushCurrent, cuMemExportToShareableHandle,
    cuMemGetAllocationPropertiesFromHandle, cuMemImportFromShareableHandle,
    cuMemRetainAllocationHandle, cuStreamWriteValue32,
};
use device::*;
use loaded::*;
use simgpu_model::CopyDir;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, Mutex, MutexGuard};

type CUresult = c_int;
type CUdeviceptr = u64;
type Handle = *mut c_void;

static DEVICE: LazyLock<Result<Mutex<Device>, String>> = LazyLock::new(|| {
    let d = Device::from_env().map_err(|e| {
        eprintln!("simgpu: {e}; the simulated device is unavailable");
        e
    })?;
    Device::guard_address_space();
    if d.report.is_some() || d.keeps_timeline() {
        // SAFETY: registering a plain extern "C" function with atexit.
        unsafe { libc::atexit(write_report) };
    }
    Ok(Mutex::new(d))
});

fn lock() -> Result<MutexGuard<'static, Device>, CUresult> {
    match &*DEVICE {
        Ok(m) => {
            let d = m.lock().unwrap_or_else(|p| p.into_inner());
            // An abort runs no atexit handler: the report is written from SIGABRT's (`abort`),
            // once the report's path is known (on a machine of several devices, once the
            // process works on one).
            static ABORT: std::sync::Once = std::sync::Once::new();
            if !ABORT.is_completed()
                && let Some(path) = d.report.as_deref().and_then(devices::report_path)
            {
                ABORT.call_once(|| abort::install(m, &path));
            }
            Ok(d)
        }
        Err(_) => Err(NOT_INITIALIZED),
    }
}

/// [`with`], for a call that works in the thread's current context: CUDA_ERROR_INVALID_CONTEXT
/// on a thread that has none. The runtime binds its primary context to a thread at its first
/// call there that needs one; whoever calls the driver before that must bind one itself.
fn with_ctx(f: impl FnOnce(&mut Device) -> Result<(), CUresult>) -> CUresult {
    if !devices::bound() {
        return context::INVALID_CONTEXT;
    }
    with(f)
}

/// Runs `f` on the device; a panic becomes CUDA_ERROR_UNKNOWN with a message, never an abort.
fn with(f: impl FnOnce(&mut Device) -> Result<(), CUresult>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(|| {
        let mut d = lock()?;
        f(&mut d)
    })) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("simgpu: internal error (panic) in the simulated driver");
            UNKNOWN
        }
    }
}

extern "C" fn write_report() {
    let Ok(mut d) = lock() else { return };
    if let Some(w) = d.timeline.as_mut() {
        use std::io::Write;
        if let Err(e) = w.flush() {
            eprintln!("simgpu: cannot write SIMGPU_TIMELINE: {e}");
        }
    }
    if let Some(path) = d.report.as_deref().and_then(devices::report_path)
        && let Err(e) = std::fs::write(&path, d.report_json())
    {
        eprintln!("simgpu: cannot write SIMGPU_REPORT {path}: {e}");
    }
}

/// Writes `v` through an output pointer, or fails with CUDA_ERROR_INVALID_VALUE when it is null.
fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the caller passed a non-null output pointer for a T, as the API requires.
    unsafe { p.write(v) };
    Ok(())
}

// ==================================================================== init, device, context

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    with(|_| {
        if flags != 0 {
            Err(INVALID_VALUE)
        } else if devices::count() == 0 {
            Err(NO_DEVICE)
        } else {
            Ok(())
        }
    })
}

/// The driver version the simulator claims (CUDA 13.2), enough for cudart 12 and 13.
pub const DRIVER_VERSION: c_int = 13020;

#[unsafe(no_mangle)]
pub extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    with(|_| out(v, DRIVER_VERSION))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    with(|_| out(n, devices::count()))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult {
    with(|_| {
        devices::physical(ordinal)?;
        out(dev, ordinal)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    with(|d| {
        devices::physical(dev)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let bytes = d.profile.device_name.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: name points to len writable bytes (API contract); we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
            *name.add(n) = 0;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    with(|d| {
        devices::physical(dev)?;
        out(bytes, d.capacity as usize)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attrib: c_int, dev: c_int) -> CUresult {
    with(|d| {
        let value = props::attribute(d, attrib, devices::physical(dev)?)?;
        out(v, value)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: c_int) -> CUresult {
    with(|_| {
        devices::physical(dev)?;
        out(ctx, devices::context_handle(dev) as Handle)?;
        context::primary_retained(dev);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CUresult {
    with(|_| {
        devices::physical(dev)?;
        context::primary_released(dev)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetCurrent(ctx: *mut Handle) -> CUresult {
    // NULL on a thread with no context current.
    let h = if devices::bound() {
        devices::context_handle(devices::current())
    } else {
        0
    };
    with(|_| out(ctx, h as Handle))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    with(|_| {
        if ctx.is_null() {
            devices::unbind();
            return Ok(());
        }
        let dev = devices::context_ordinal(ctx as usize).ok_or(context::INVALID_CONTEXT)?;
        devices::set_current(dev)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> CUresult {
    with_ctx(|_| out(dev, devices::current()))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    context::drain_host_functions();
    with_ctx(|d| d.device_sync())
}

// ==================================================================== memory

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAlloc_v2(p: *mut CUdeviceptr, size: usize) -> CUresult {
    with_ctx(|d| {
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        devices::claim()?;
        d.host_now += d.profile.api_call();
        let a = d.malloc(size as u64)?;
        out(p, a)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(p: CUdeviceptr) -> CUresult {
    with_ctx(|d| {
        d.host_now += d.profile.api_call();
        d.free(p)
    })
}

/// A stream-ordered allocation from `pool` (None: the device's current pool, its default one:
/// the simulated device has no cuDeviceSetMemPool).
fn alloc_async(p: *mut CUdeviceptr, size: usize, pool: Option<u64>, stream: Handle) -> CUresult {
    with_ctx(|d| {
        if p.is_null() {
            return Err(INVALID_VALUE);
        }
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        let pool = match pool {
            Some(h) if d.pools.contains(&h) => h,
            Some(_) => return Err(INVALID_VALUE),
            None => d.default_pool(),
        };
        devices::claim()?;
        d.host_now += d.profile.api_call();
        let a = d.pool_malloc(pool, size as u64)?;
        out(p, a)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocAsync(p: *mut CUdeviceptr, size: usize, stream: Handle) -> CUresult {
    alloc_async(p, size, None, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocFromPoolAsync(
    p: *mut CUdeviceptr,
    size: usize,
    pool: Handle,
    stream: Handle,
) -> CUresult {
    alloc_async(p, size, Some(pool as u64), stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(p: CUdeviceptr, stream: Handle) -> CUresult {
    // Work is executed in program order, so everything issued before on `stream` is done: the
    // memory can go back at once.
    with_ctx(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        d.host_now += d.profile.api_call();
        d.free(p)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: c_int) -> CUresult {
    with(|d| {
        devices::physical(dev)?;
        let h = d.default_pool();
        out(pool, h as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolCreate(pool: *mut Handle, props: *const c_void) -> CUresult {
    with(|d| {
        if props.is_null() {
            return Err(INVALID_VALUE);
        }
        let h = d.new_handle();
        d.pools.push(h);
        out(pool, h as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: Handle, _keep: usize) -> CUresult {
    with(|d| {
        if d.pools.contains(&(pool as u64)) {
            Ok(())
        } else {
            Err(INVALID_VALUE)
        }
    })
}

/// A pool's attributes: the reuse flags and the release threshold are accepted and have no
/// effect (the simulated pool keeps nothing back); the high marks (RESERVED_MEM_HIGH 6,
/// USED_MEM_HIGH 8) are reset to the current figures by a 0, the only value allowed; the current
/// figures are read-only.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolSetAttribute(pool: Handle, attr: c_int, value: *mut c_void) -> CUresult {
    with(|d| {
        if !d.pools.contains(&(pool as u64)) || value.is_null() {
            return Err(INVALID_VALUE);
        }
        match attr {
            1..=4 => Ok(()),
            6 | 8 => {
                // SAFETY: the high marks' value type is cuuint64_t; non-null (checked above).
                let v = unsafe { *(value as *const u64) };
                d.pool_reset(pool as u64, attr, v)
            }
            _ => Err(INVALID_VALUE),
        }
    })
}

/// A pool's attributes: the reuse flags read as off and the release threshold as 0; the
/// reserved and used figures (current and high) are those of the allocations made from this
/// pool (`Device::pool_malloc`), not the device's: modules' variables and plain allocations are
/// no pool's.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolGetAttribute(pool: Handle, attr: c_int, value: *mut c_void) -> CUresult {
    with(|d| {
        if !d.pools.contains(&(pool as u64)) || value.is_null() {
            return Err(INVALID_VALUE);
        }
        match attr {
            1..=3 => out(value as *mut c_int, 0),
            4 => out(value as *mut u64, 0),
            _ => match d.pool_figure(pool as u64, attr) {
                Some(v) => out(value as *mut u64, v),
                None => Err(INVALID_VALUE),
            },
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    with_ctx(|d| {
        d.host_now += d.profile.api_call();
        let (f, t) = d.mem_info();
        out(free, f as usize)?;
        out(total, t as usize)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CUresult {
    with_ctx(|d| {
        let p = d.host_alloc(size)?;
        out(pp, p as *mut c_void)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, _flags: c_uint) -> CUresult {
    cuMemAllocHost_v2(pp, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    with(|d| d.host_free(p as *mut u8))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, _flags: c_uint) -> CUresult {
    with(|d| d.host_register(p as usize, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    with(|d| d.host_unregister(p as usize))
}

// ==================================================================== virtual memory management

/// CUmemAllocationProp (cuda.h): type, requested handle types, location {type, id}, win32
/// metadata pointer, allocation flags. 32 bytes.
#[repr(C)]
pub struct MemAllocationProp {
    pub type_: c_uint,
    pub requested_handle_types: c_uint,
    pub location_type: c_uint,
    pub location_id: c_int,
    pub win32_metadata: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// CUmemAccessDesc: location {type, id}, flags.
#[repr(C)]
pub struct MemAccessDesc {
    pub location_type: c_uint,
    pub location_id: c_int,
    pub flags: c_uint,
}

const MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;
const MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
const MEM_ACCESS_FLAGS_PROT_READWRITE: c_uint = 3;

/// Checks a VMM allocation's properties; returns the device ordinal they name.
fn check_prop(prop: *const MemAllocationProp) -> Result<c_int, CUresult> {
    if prop.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null pointer to a CUmemAllocationProp, as the API requires.
    let p = unsafe { &*prop };
    if p.type_ != MEM_ALLOCATION_TYPE_PINNED
        || p.location_type != MEM_LOCATION_TYPE_DEVICE
        || devices::physical(p.location_id).is_err()
    {
        return Err(INVALID_VALUE);
    }
    Ok(p.location_id)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAllocationGranularity(
    g: *mut usize,
    prop: *const MemAllocationProp,
    option: c_int,
) -> CUresult {
    with(|_| {
        check_prop(prop)?;
        if !(0..=1).contains(&option) {
            return Err(INVALID_VALUE);
        }
        out(g, GRANULARITY as usize)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    align: usize,
    addr: CUdeviceptr,
    _flags: u64,
) -> CUresult {
    with(|d| {
        if ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let va = d.address_reserve(size as u64, align as u64, addr)?;
        out(ptr, va)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    with(|d| d.address_free(ptr, size as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> CUresult {
    with(|d| {
        let dev = check_prop(prop)?;
        if handle.is_null() || flags != 0 {
            return Err(INVALID_VALUE);
        }
        devices::claim_device(dev)?;
        d.host_now += d.profile.api_call();
        let h = d.mem_create(size as u64)?;
        out(handle, h)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    with(|d| d.mem_release(handle))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    with(|d| {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        d.host_now += d.profile.api_call();
        d.mem_map(ptr, size as u64, offset as u64, handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    with(|d| {
        d.host_now += d.profile.api_call();
        d.mem_unmap(ptr, size as u64)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const MemAccessDesc,
    count: usize,
) -> CUresult {
    with(|d| {
        if desc.is_null() || count == 0 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: desc points to `count` CUmemAccessDesc entries (API contract).
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut rw = None;
        for x in descs {
            // Access from the working device only: the simulator has no peer access.
            if x.location_type != MEM_LOCATION_TYPE_DEVICE || x.location_id != devices::working() {
                return Err(INVALID_VALUE);
            }
            rw = Some(x.flags == MEM_ACCESS_FLAGS_PROT_READWRITE);
        }
        d.set_access(ptr, size as u64, rw.unwrap_or(false))
    })
}

// ==================================================================== copies and memsets

/// One copy: checks, moves the bytes (data mode) and places it on the timeline.
fn copy(
    d: &mut Device,
    dst: u64,
    src: u64,
    bytes: usize,
    stream: u64,
    sync: bool,
) -> Result<(), CUresult> {
    if !d.valid_stream(stream) {
        return Err(INVALID_HANDLE);
    }
    d.count_copy()?;
    if bytes == 0 {
        return Ok(());
    }
    let (sd, dd) = (d.is_device(src), d.is_device(dst));
    if (!sd && src == 0) || (!dd && dst == 0) {
        return Err(INVALID_VALUE);
    }
    let n = bytes as u64;
    match (sd, dd) {
        (false, true) => {
            // SAFETY: src is a host pointer to `bytes` readable bytes (API contract).
            let host = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
            d.write(dst, host, "a host-to-device copy")?;
            d.time_copy(CopyDir::H2D, n, stream, Some((src as usize, sync)))
        }
        (true, false) => {
            if d.holds_bytes(src, n) {
                // SAFETY: dst is a host pointer to `bytes` writable bytes (API contract).
                let host = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes) };
                d.read(src, host, "a device-to-host copy")?;
            } else {
                d.check(src, n, "a device-to-host copy")?;
            }
            d.time_copy(CopyDir::D2H, n, stream, Some((dst as usize, sync)))
        }
        (true, true) => {
            if d.holds_bytes(src, n) && d.holds_bytes(dst, n) {
                let mut tmp = vec![0u8; bytes];
                d.read(src, &mut tmp, "a device-to-device copy")?;
                d.write(dst, &tmp, "a device-to-device copy")?;
            } else {
                d.check(src, n, "a device-to-device copy")?;
                d.check(dst, n, "a device-to-device copy")?;
            }
            d.time_copy(CopyDir::D2D, n, stream, None)?;
            if sync {
                d.stream_sync(stream)?;
            }
            Ok(())
        }
        (false, false) => {
            // SAFETY: both are host pointers to `bytes` bytes (API contract); copy allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        }
    }
}

macro_rules! copy_fn {
    ($name:ident, $dst:ty, $src:ty, sync) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(dst: $dst, src: $src, bytes: usize) -> CUresult {
            with_ctx(|d| copy(d, dst as u64, src as u64, bytes, 0, true))
        }
    };
    ($name:ident, $dst:ty, $src:ty, async) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(dst: $dst, src: $src, bytes: usize, stream: Handle) -> CUresult {
            with_ctx(|d| copy(d, dst as u64, src as u64, bytes, stream as u64, false))
        }
    };
}

copy_fn!(cuMemcpy, CUdeviceptr, CUdeviceptr, sync);
copy_fn!(cuMemcpyHtoD_v2, CUdeviceptr, *const c_void, sync);
copy_fn!(cuMemcpyDtoH_v2, *mut c_void, CUdeviceptr, sync);
copy_fn!(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, sync);
copy_fn!(cuMemcpyAsync, CUdeviceptr, CUdeviceptr, async);
copy_fn!(cuMemcpyHtoDAsync_v2, CUdeviceptr, *const c_void, async);
copy_fn!(cuMemcpyDtoHAsync_v2, *mut c_void, CUdeviceptr, async);
copy_fn!(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, async);

fn memset(
    d: &mut Device,
    dst: u64,
    pattern: &[u8],
    count: usize,
    stream: u64,
    sync: bool,
) -> Result<(), CUresult> {
    if !d.valid_stream(stream) {
        return Err(INVALID_HANDLE);
    }
    d.check_sticky()?;
    let bytes = (pattern.len() * count) as u64;
    if d.holds_bytes(dst, bytes) {
        let buf: Vec<u8> = pattern
            .iter()
            .copied()
            .cycle()
            .take(bytes as usize)
            .collect();
        d.write(dst, &buf, "a memset")?;
    } else {
        d.check(dst, bytes, "a memset")?;
    }
    let dur = d.profile.kernel_time(0.0, bytes as f64, 1.0, false);
    let (_, end) = d.issue(stream, ENGINE_COMPUTE, dur, d.profile.api_call())?;
    if sync {
        d.host_wait_until(end);
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CUresult {
    with_ctx(|d| memset(d, dst, &[v], n, 0, true))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) -> CUresult {
    with_ctx(|d| memset(d, dst, &v.to_ne_bytes(), n, 0, true))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) -> CUresult {
    with_ctx(|d| memset(d, dst, &v.to_ne_bytes(), n, 0, true))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: Handle) -> CUresult {
    with_ctx(|d| memset(d, dst, &[v], n, s as u64, false))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async(dst: CUdeviceptr, v: u32, n: usize, s: Handle) -> CUresult {
    with_ctx(|d| memset(d, dst, &v.to_ne_bytes(), n, s as u64, false))
}

// ==================================================================== streams and events

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreate(s: *mut Handle, flags: c_uint) -> CUresult {
    with_ctx(|d| {
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        let h = d.stream_create(flags & 1 == 0);
        out(s, h as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreateWithPriority(
    s: *mut Handle,
    flags: c_uint,
    prio: c_int,
) -> CUresult {
    let r = cuStreamCreate(s, flags);
    if r == SUCCESS {
        // SAFETY: cuStreamCreate succeeded, so s is a valid pointer holding the new stream.
        let h = unsafe { *s } as u64;
        with_ctx(|d| {
            context::set_priority(d, h, prio);
            Ok(())
        });
    }
    r
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(s: Handle) -> CUresult {
    with(|d| d.stream_destroy(s as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(s: Handle) -> CUresult {
    context::drain_host_functions();
    with(|d| d.stream_sync(s as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(s: Handle) -> CUresult {
    with(|d| d.stream_query(s as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(s: Handle, e: Handle, _flags: c_uint) -> CUresult {
    with(|d| d.stream_wait_event(s as u64, e as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventCreate(e: *mut Handle, flags: c_uint) -> CUresult {
    with_ctx(|d| {
        if e.is_null() {
            return Err(INVALID_VALUE);
        }
        let h = d.new_handle();
        // CU_EVENT_DISABLE_TIMING = 2
        d.events.insert(
            h,
            Event {
                time: None,
                timing: flags & 2 == 0,
            },
        );
        out(e, h as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(e: Handle) -> CUresult {
    with(|d| {
        d.events
            .remove(&(e as u64))
            .map(|_| ())
            .ok_or(INVALID_HANDLE)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(e: Handle, s: Handle) -> CUresult {
    with(|d| d.event_record(e as u64, s as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(e: Handle) -> CUresult {
    context::drain_host_functions();
    with(|d| d.event_sync(e as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(e: Handle) -> CUresult {
    with(|d| d.event_query(e as u64))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventElapsedTime(ms: *mut f32, a: Handle, b: Handle) -> CUresult {
    with(|d| {
        let v = d.elapsed_ms(a as u64, b as u64)?;
        out(ms, v)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, a: Handle, b: Handle) -> CUresult {
    cuEventElapsedTime(ms, a, b)
}

// ==================================================================== kernels

/// A host implementation of a kernel: called with the launch context and the argument array
/// (one pointer per parameter, pointing at the parameter's value, as `kernelParams`).
pub type KernelFn = unsafe extern "C" fn(ctx: *mut KernelCtx, params: *mut *mut c_void);

/// What a running kernel may do: stage device ranges in and out, and report its work.
pub struct KernelCtx {
    stages: Vec<(u64, bool, Vec<u8>)>,
    trapped: Option<CUresult>,
    flops: f64,
    bytes: f64,
    data: bool,
}

/// Registers a host-implemented kernel; `*handle` then works as a `CUfunction`, a `cudaKernel_t`
/// and as the `func` of `cudaLaunchKernel`. Parameter sizes and alignments give the offsets that
/// `cuFuncGetParamInfo` reports and that packed (`extra`) parameter buffers use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuRegisterKernel(
    name: *const c_char,
    func: Option<KernelFn>,
    nparams: c_uint,
    sizes: *const usize,
    aligns: *const usize,
    handle: *mut Handle,
) -> CUresult {
    with(|d| {
        let func = func.ok_or(INVALID_VALUE)?;
        if name.is_null() || (nparams > 0 && (sizes.is_null() || aligns.is_null())) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: name is a NUL-terminated string; sizes/aligns hold nparams entries (contract).
        let (name, sizes, aligns) = unsafe {
            (
                CStr::from_ptr(name).to_string_lossy().into_owned(),
                std::slice::from_raw_parts(sizes, nparams as usize).to_vec(),
                std::slice::from_raw_parts(aligns, nparams as usize).to_vec(),
            )
        };
        let mut offsets = Vec::new();
        let mut at = 0usize;
        for (s, a) in sizes.iter().zip(&aligns) {
            if *s == 0 || !a.is_power_of_two() {
                return Err(INVALID_VALUE);
            }
            at = at.div_ceil(*a) * a;
            offsets.push(at);
            at += s;
        }
        let h = d.new_handle();
        d.kernels.insert(
            h,
            Kernel {
                name,
                func: func as usize,
                offsets,
                sizes,
            },
        );
        out(handle, h as Handle)
    })
}

/// Stages `bytes` of device memory at `dptr` for a kernel: returns a host pointer to a copy
/// (written back after the kernel when `write` is set), or NULL in shape mode or when the range
/// is not accessible (the launch then fails with CUDA_ERROR_ILLEGAL_ADDRESS).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuKernelAccess(
    ctx: *mut KernelCtx,
    dptr: CUdeviceptr,
    bytes: usize,
    write: c_int,
) -> *mut c_void {
    // SAFETY: ctx is the live context the simulator passed to the running kernel.
    let Some(ctx) = (unsafe { ctx.as_mut() }) else {
        return std::ptr::null_mut();
    };
    if ctx.trapped.is_some() {
        return std::ptr::null_mut();
    }
    let Ok(mut d) = lock() else {
        return std::ptr::null_mut();
    };
    ctx.bytes += bytes as f64;
    if !ctx.data {
        if let Err(e) = d.check(dptr, bytes as u64, "a kernel") {
            ctx.trapped = Some(e);
        }
        return std::ptr::null_mut();
    }
    let mut buf = vec![0u8; bytes];
    if let Err(e) = d.read(dptr, &mut buf, "a kernel") {
        ctx.trapped = Some(e);
        return std::ptr::null_mut();
    }
    ctx.stages.push((dptr, write != 0, buf));
    ctx.stages.last_mut().unwrap().2.as_mut_ptr() as *mut c_void
}

/// Lets a kernel state its arithmetic and memory traffic (otherwise the bytes it staged count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuKernelWork(ctx: *mut KernelCtx, flops: f64, bytes: f64) {
    // SAFETY: ctx is the live context the simulator passed to the running kernel.
    if let Some(ctx) = unsafe { ctx.as_mut() } {
        ctx.flops += flops;
        ctx.bytes = ctx.bytes.max(bytes);
    }
}

/// 1 in data mode (bytes and arithmetic are real), 0 in shape mode.
#[unsafe(no_mangle)]
pub extern "C" fn simgpuDataMode() -> c_int {
    lock().map(|d| (d.mode == Mode::Data) as c_int).unwrap_or(0)
}

const LAUNCH_PARAM_END: usize = 0;
const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;

/// The packed argument buffer and its size from a launch's `extra` list.
fn extra_buffer(extra: *mut *mut c_void) -> Result<(*mut u8, usize), CUresult> {
    let (mut buf, mut size) = (std::ptr::null_mut::<u8>(), None);
    let mut i = 0;
    loop {
        // SAFETY: extra is a LAUNCH_PARAM_END-terminated list of (key, value) pairs.
        let key = unsafe { *extra.add(i) } as usize;
        if key == LAUNCH_PARAM_END {
            break;
        }
        // SAFETY: as above; each key is followed by its value.
        let val = unsafe { *extra.add(i + 1) };
        match key {
            LAUNCH_PARAM_BUFFER_POINTER => buf = val as *mut u8,
            // SAFETY: the BUFFER_SIZE value points to a size_t.
            LAUNCH_PARAM_BUFFER_SIZE if !val.is_null() => {
                size = Some(unsafe { *(val as *const usize) })
            }
            _ => return Err(INVALID_VALUE),
        }
        i += 2;
    }
    Ok((buf, size.ok_or(INVALID_VALUE)?))
}

/// Runs one launch of a registered kernel on `stream`: a host-implemented one
/// (`simgpuRegisterKernel`) or a fatbin kernel (`modules`).
fn launch(
    f: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    if !devices::bound() {
        return context::INVALID_CONTEXT;
    }
    if let Some(r) = modules::launch(f as usize, grid, block, shared, stream, params, extra) {
        return r;
    }
    let prep = (|| -> Result<(KernelFn, Vec<*mut c_void>, bool), CUresult> {
        let mut d = lock()?;
        let k = d.kernels.get(&(f as u64)).ok_or(INVALID_HANDLE)?;
        if grid.contains(&0) || block.contains(&0) || block.iter().product::<c_uint>() > 1024 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: func was registered as a KernelFn and stored as its address.
        let func: KernelFn = unsafe { std::mem::transmute::<usize, KernelFn>(k.func) };
        let mut args: Vec<*mut c_void> = Vec::with_capacity(k.offsets.len());
        if !params.is_null() {
            // SAFETY: kernelParams holds one pointer per parameter (API contract).
            args.extend((0..k.offsets.len()).map(|i| unsafe { *params.add(i) }));
        } else if !extra.is_null() {
            let (buf, size) = extra_buffer(extra)?;
            let need = k
                .offsets
                .last()
                .map(|o| o + k.sizes.last().unwrap())
                .unwrap_or(0);
            if buf.is_null() || size < need {
                return Err(INVALID_VALUE);
            }
            // SAFETY: buf holds `size` >= need bytes, so each offset is inside it.
            args.extend(
                k.offsets
                    .iter()
                    .map(|&o| unsafe { buf.add(o) } as *mut c_void),
            );
        } else if !k.offsets.is_empty() {
            return Err(INVALID_VALUE);
        }
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        d.count_launch()?;
        d.counters.kernels += 1;
        Ok((func, args, d.mode == Mode::Data))
    })();
    let (func, mut args, data) = match prep {
        Ok(x) => x,
        Err(e) => return e,
    };
    let _ = grid;
    let mut ctx = KernelCtx {
        stages: Vec::new(),
        trapped: None,
        flops: 0.0,
        bytes: 0.0,
        data,
    };
    // SAFETY: calling the program's registered kernel with its context and argument array; the
    // device lock is not held, so the kernel may call simgpuKernelAccess.
    let ran = catch_unwind(AssertUnwindSafe(|| unsafe {
        func(&mut ctx, args.as_mut_ptr())
    }));
    with(|d| {
        if ran.is_err() {
            return Err(LAUNCH_FAILED);
        }
        if let Some(e) = ctx.trapped {
            return Err(e);
        }
        for (addr, write, buf) in &ctx.stages {
            if *write {
                d.write(*addr, buf, "a kernel")?;
            }
        }
        let dur = d.profile.kernel_time(ctx.flops, ctx.bytes, 1.0, false);
        let cost = d.profile.launch();
        d.issue(stream as u64, ENGINE_COMPUTE, dur, cost)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchKernel(
    f: Handle,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra)
}

/// CUlaunchConfig (cuda.h).
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared: c_uint,
    pub stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    f: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    // SAFETY: config is null or points to a CUlaunchConfig (API contract).
    let Some(c) = (unsafe { config.as_ref() }) else {
        return INVALID_VALUE;
    };
    launch(f, c.grid, c.block, c.shared, c.stream, params, extra)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetParamInfo(
    f: Handle,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    if modules::is_registered(f as usize) {
        return match modules::params(f as usize) {
            Ok(k) => match k.params.get(index) {
                Some(&(o, s)) => out(offset, o)
                    .and_then(|_| out(size, s))
                    .err()
                    .unwrap_or(SUCCESS),
                None => INVALID_VALUE,
            },
            Err(e) => e,
        };
    }
    with(|d| {
        let k = d.kernels.get(&(f as u64)).ok_or(INVALID_HANDLE)?;
        let (o, s) = (*k.offsets.get(index).ok_or(INVALID_VALUE)?, k.sizes[index]);
        out(offset, o)?;
        out(size, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, f: Handle) -> CUresult {
    if let Some(n) = modules::name(f as usize) {
        let c = std::ffi::CString::new(n).unwrap_or_default();
        // Names live as long as the process, like a module's.
        return out(name, c.into_raw() as *const c_char)
            .err()
            .unwrap_or(SUCCESS);
    }
    with(|d| {
        let k = d.kernels.get(&(f as u64)).ok_or(INVALID_HANDLE)?;
        let c = std::ffi::CString::new(k.name.clone()).map_err(|_| UNKNOWN)?;
        // Names live as long as the process, like a module's.
        out(name, c.into_raw() as *const c_char)
    })
}

// ==================================================================== errors and entry points

fn error_name(e: CUresult) -> &'static CStr {
    match e {
        0 => c"CUDA_SUCCESS",
        1 => c"CUDA_ERROR_INVALID_VALUE",
        2 => c"CUDA_ERROR_OUT_OF_MEMORY",
        3 => c"CUDA_ERROR_NOT_INITIALIZED",
        101 => c"CUDA_ERROR_INVALID_DEVICE",
        200 => c"CUDA_ERROR_INVALID_IMAGE",
        201 => c"CUDA_ERROR_INVALID_CONTEXT",
        209 => c"CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => c"CUDA_ERROR_INVALID_PTX",
        400 => c"CUDA_ERROR_INVALID_HANDLE",
        500 => c"CUDA_ERROR_NOT_FOUND",
        600 => c"CUDA_ERROR_NOT_READY",
        700 => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        719 => c"CUDA_ERROR_LAUNCH_FAILED",
        801 => c"CUDA_ERROR_NOT_SUPPORTED",
        999 => c"CUDA_ERROR_UNKNOWN",
        _ => c"",
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    let n = error_name(e);
    if n.is_empty() {
        return INVALID_VALUE;
    }
    match out(s, n.as_ptr()) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    cuGetErrorName(e, s)
}

/// cuGetProcAddress symbol status values.
const PROC_SUCCESS: c_int = 0;
const PROC_SYMBOL_NOT_FOUND: c_int = 1;
const PROC_VERSION_NOT_SUFFICIENT: c_int = 2;

macro_rules! proc_table {
    ($( $base:literal, $ver:literal => $f:ident ),* $(,)?) => {
        /// (base name, first CUDA version of this ABI variant, exported name, function).
        fn proc_table() -> &'static [(&'static str, c_int, &'static str, usize)] {
            static T: LazyLock<Vec<(&'static str, c_int, &'static str, usize)>> = LazyLock::new(|| {
                vec![$( ($base, $ver, stringify!($f), $f as *const () as usize) ),*]
            });
            &T
        }
    };
}

proc_table! {
    "cuInit", 2000 => cuInit,
    "cuDriverGetVersion", 2020 => cuDriverGetVersion,
    "cuDeviceGet", 2000 => cuDeviceGet,
    "cuDeviceGetCount", 2000 => cuDeviceGetCount,
    "cuDeviceGetName", 2000 => cuDeviceGetName,
    "cuDeviceTotalMem", 3020 => cuDeviceTotalMem_v2,
    "cuDeviceGetAttribute", 2000 => cuDeviceGetAttribute,
    "cuDevicePrimaryCtxRetain", 7000 => cuDevicePrimaryCtxRetain,
    "cuDevicePrimaryCtxRelease", 11000 => cuDevicePrimaryCtxRelease_v2,
    "cuCtxGetCurrent", 4000 => cuCtxGetCurrent,
    "cuCtxSetCurrent", 4000 => cuCtxSetCurrent,
    "cuCtxGetDevice", 2000 => cuCtxGetDevice,
    "cuCtxSynchronize", 2000 => cuCtxSynchronize,
    "cuMemAlloc", 3020 => cuMemAlloc_v2,
    "cuMemFree", 3020 => cuMemFree_v2,
    "cuMemAllocAsync", 11020 => cuMemAllocAsync,
    "cuMemAllocFromPoolAsync", 11020 => cuMemAllocFromPoolAsync,
    "cuMemFreeAsync", 11020 => cuMemFreeAsync,
    "cuDeviceGetDefaultMemPool", 11020 => cuDeviceGetDefaultMemPool,
    "cuMemPoolCreate", 11020 => cuMemPoolCreate,
    "cuMemPoolTrimTo", 11020 => cuMemPoolTrimTo,
    "cuMemPoolSetAttribute", 11020 => cuMemPoolSetAttribute,
    "cuMemPoolGetAttribute", 11020 => cuMemPoolGetAttribute,
    "cuMemGetInfo", 3020 => cuMemGetInfo_v2,
    "cuMemAllocHost", 3020 => cuMemAllocHost_v2,
    "cuMemHostAlloc", 2020 => cuMemHostAlloc,
    "cuMemFreeHost", 2000 => cuMemFreeHost,
    "cuMemHostRegister", 6050 => cuMemHostRegister_v2,
    "cuMemHostUnregister", 4000 => cuMemHostUnregister,
    "cuMemGetAllocationGranularity", 10020 => cuMemGetAllocationGranularity,
    "cuMemAddressReserve", 10020 => cuMemAddressReserve,
    "cuMemAddressFree", 10020 => cuMemAddressFree,
    "cuMemCreate", 10020 => cuMemCreate,
    "cuMemRelease", 10020 => cuMemRelease,
    "cuMemMap", 10020 => cuMemMap,
    "cuMemUnmap", 10020 => cuMemUnmap,
    "cuMemSetAccess", 10020 => cuMemSetAccess,
    "cuMemcpy", 4000 => cuMemcpy,
    "cuMemcpyAsync", 4000 => cuMemcpyAsync,
    "cuMemcpyHtoD", 3020 => cuMemcpyHtoD_v2,
    "cuMemcpyDtoH", 3020 => cuMemcpyDtoH_v2,
    "cuMemcpyDtoD", 3020 => cuMemcpyDtoD_v2,
    "cuMemcpyHtoDAsync", 3020 => cuMemcpyHtoDAsync_v2,
    "cuMemcpyDtoHAsync", 3020 => cuMemcpyDtoHAsync_v2,
    "cuMemcpyDtoDAsync", 3020 => cuMemcpyDtoDAsync_v2,
    "cuMemsetD8", 3020 => cuMemsetD8_v2,
    "cuMemsetD16", 3020 => cuMemsetD16_v2,
    "cuMemsetD32", 3020 => cuMemsetD32_v2,
    "cuMemsetD8Async", 3020 => cuMemsetD8Async,
    "cuMemsetD32Async", 3020 => cuMemsetD32Async,
    "cuStreamCreate", 2000 => cuStreamCreate,
    "cuStreamCreateWithPriority", 5050 => cuStreamCreateWithPriority,
    "cuStreamDestroy", 4000 => cuStreamDestroy_v2,
    "cuStreamSynchronize", 2000 => cuStreamSynchronize,
    "cuStreamQuery", 2000 => cuStreamQuery,
    "cuStreamWaitEvent", 3020 => cuStreamWaitEvent,
    "cuEventCreate", 2000 => cuEventCreate,
    "cuEventDestroy", 4000 => cuEventDestroy_v2,
    "cuEventRecord", 2000 => cuEventRecord,
    "cuEventSynchronize", 2000 => cuEventSynchronize,
    "cuEventQuery", 2000 => cuEventQuery,
    "cuEventElapsedTime", 2000 => cuEventElapsedTime,
    "cuEventElapsedTime", 12080 => cuEventElapsedTime_v2,
    "cuLaunchKernel", 4000 => cuLaunchKernel,
    "cuLaunchKernelEx", 11060 => cuLaunchKernelEx,
    "cuFuncGetParamInfo", 12040 => cuFuncGetParamInfo,
    "cuModuleLoadData", 2000 => cuModuleLoadData,
    "cuModuleLoadDataEx", 2010 => cuModuleLoadDataEx,
    "cuModuleLoadFatBinary", 2000 => cuModuleLoadFatBinary,
    "cuModuleGetFunction", 2000 => cuModuleGetFunction,
    "cuModuleGetGlobal", 3020 => cuModuleGetGlobal_v2,
    "cuModuleUnload", 2000 => cuModuleUnload,
    "cuFuncGetName", 12030 => cuFuncGetName,
    "cuGetErrorName", 6000 => cuGetErrorName,
    "cuGetErrorString", 6000 => cuGetErrorString,
    "cuGetProcAddress", 11030 => cuGetProcAddress,
    "cuGetProcAddress", 12000 => cuGetProcAddress_v2,
    // Not simulated, but a real driver hands them out, and programs that load a list of
    // driver functions at once (PyTorch's c10 DriverAPI) stop at the first one missing: found,
    // each answers CUDA_ERROR_NOT_SUPPORTED (its stub, as when linked directly).
    "cuMemExportToShareableHandle", 10020 => cuMemExportToShareableHandle,
    "cuMemImportFromShareableHandle", 10020 => cuMemImportFromShareableHandle,
    "cuMemRetainAllocationHandle", 11000 => cuMemRetainAllocationHandle,
    "cuMemGetAllocationPropertiesFromHandle", 10020 => cuMemGetAllocationPropertiesFromHandle,
    "cuStreamWriteValue32", 8000 => cuStreamWriteValue32,
    "cuCtxPushCurrent", 4000 => cuCtxPushCurrent,
    "cuCtxPopCurrent", 4000 => cuCtxPopCurrent,
}

/// The exported function named exactly `name` (for tests and `dlsym`-like look-ups).
fn lookup(symbol: &CStr, version: c_int) -> (Option<usize>, c_int) {
    let Ok(name) = symbol.to_str() else {
        return (None, PROC_SYMBOL_NOT_FOUND);
    };
    let mut found = false;
    let mut best: Option<(c_int, usize)> = None;
    let more = context::procs().iter().map(|&(b, v, f)| (b, v, "", f));
    for (base, ver, _, f) in proc_table().iter().copied().chain(more) {
        if base != name {
            continue;
        }
        found = true;
        if ver <= version && best.is_none_or(|(v, _)| ver > v) {
            best = Some((ver, f));
        }
    }
    match (found, best) {
        (_, Some((_, f))) => (Some(f), PROC_SUCCESS),
        (true, None) => (None, PROC_VERSION_NOT_SUFFICIENT),
        (false, _) => (None, PROC_SYMBOL_NOT_FOUND),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    _flags: u64,
    status: *mut c_int,
) -> CUresult {
    if symbol.is_null() || pfn.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: symbol is a NUL-terminated string (API contract).
    let name = unsafe { CStr::from_ptr(symbol) };
    let (f, st) = lookup(name, version);
    if f.is_none() {
        log_miss(name, version);
    }
    if !status.is_null() {
        // SAFETY: non-null status pointer supplied by the caller.
        unsafe { *status = st };
    }
    // SAFETY: pfn is non-null (checked).
    unsafe { *pfn = f.map(|f| f as *mut c_void).unwrap_or(std::ptr::null_mut()) };
    if f.is_some() { SUCCESS } else { NOT_FOUND }
}

/// At SIMGPU_LOG=debug, names a function a program asked for and did not get, once.
fn log_miss(name: &CStr, version: c_int) {
    static SEEN: Mutex<Vec<std::ffi::CString>> = Mutex::new(Vec::new());
    if !std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug") {
        return;
    }
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.iter().any(|s| s.as_c_str() == name) {
        seen.push(name.to_owned());
        eprintln!(
            "simgpu: libcuda.so.1: cuGetProcAddress({}, {version}) is not simulated; CUDA_ERROR_NOT_FOUND",
            name.to_string_lossy()
        );
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    // SAFETY: same contract as cuGetProcAddress_v2 without the status output.
    unsafe { cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut()) }
}

// ==================================================================== the simulator's own calls

/// 0 when the device is usable, else the CUresult every call returns.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_status() -> CUresult {
    with(|d| d.check_sticky())
}

/// The profile's JSON text, for the simulated cuDNN's performance model.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_profile_json() -> *const c_char {
    match lock() {
        Ok(d) => d.profile_json.as_ptr(),
        Err(_) => std::ptr::null(),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpu_read(
    src: CUdeviceptr,
    dst: *mut u8,
    bytes: usize,
    what: *const c_char,
) -> CUresult {
    // SAFETY: what is null or a NUL-terminated string; dst holds `bytes` writable bytes.
    let what = unsafe { what_str(what) };
    with(|d| {
        if bytes == 0 || !d.holds_bytes(src, bytes as u64) {
            return d.check(src, bytes as u64, &what);
        }
        // SAFETY: dst holds `bytes` writable bytes (the simulator's own callers).
        let buf = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
        d.read(src, buf, &what)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpu_write(
    dst: CUdeviceptr,
    src: *const u8,
    bytes: usize,
    what: *const c_char,
) -> CUresult {
    // SAFETY: what is null or a NUL-terminated string.
    let what = unsafe { what_str(what) };
    with(|d| {
        if bytes == 0 || !d.holds_bytes(dst, bytes as u64) {
            return d.check(dst, bytes as u64, &what);
        }
        // SAFETY: src holds `bytes` readable bytes (the simulator's own callers).
        let buf = unsafe { std::slice::from_raw_parts(src, bytes) };
        d.write(dst, buf, &what)
    })
}

/// 1 when [ptr, ptr + bytes) holds its bytes (data mode; in shape mode, a small allocation),
/// so that [`simgpu_read`] and [`simgpu_write`] move them; 0 otherwise, or for an invalid range.
#[unsafe(no_mangle)]
pub extern "C" fn simgpuHoldsBytes(ptr: CUdeviceptr, bytes: usize) -> c_int {
    let mut holds = 0;
    with(|d| {
        holds = d.holds_bytes(ptr, bytes as u64) as c_int;
        Ok(())
    });
    holds
}

/// Checks that an operation may touch [ptr, ptr + bytes) without moving any bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpu_check(
    ptr: CUdeviceptr,
    bytes: usize,
    what: *const c_char,
) -> CUresult {
    // SAFETY: what is null or a NUL-terminated string.
    let what = unsafe { what_str(what) };
    with(|d| d.check(ptr, bytes as u64, &what))
}

/// Places `seconds` of cuDNN work on the compute engine for `stream`; `sync` makes the host wait.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_submit(stream: Handle, seconds: f64, sync: c_int) -> CUresult {
    // The library launches through its own runtime, which binds a context first.
    devices::bind_as_runtime();
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        d.count_launch()?;
        d.counters.cudnn_calls += 1;
        let cost = d.profile.launch();
        let (_, end) = d.issue(stream as u64, ENGINE_COMPUTE, seconds, cost)?;
        if sync != 0 {
            d.host_wait_until(end);
        }
        Ok(())
    })
}

/// The time at which work enqueued on `stream` now could start on this device's clock (its
/// stream's last work, the host's clock after a launch's cost), for a collective whose peers run
/// in other processes: the collective starts at the latest of its ranks' times.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_stream_time(stream: Handle, t: *mut f64) -> CUresult {
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        d.check_sticky()?;
        d.host_now += d.profile.launch();
        let ready = d.stream_time(stream as u64)?;
        out(t, ready.max(d.host_now))
    })
}

/// Places `seconds` of a collective on the links engine for `stream`, starting no earlier than
/// `not_before` (the latest of its ranks' [`simgpu_stream_time`]); `sync` makes the host wait.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_submit_link(
    stream: Handle,
    not_before: f64,
    seconds: f64,
    sync: c_int,
) -> CUresult {
    // The library launches through its own runtime, which binds a context first.
    devices::bind_as_runtime();
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        if !not_before.is_finite() || !seconds.is_finite() || seconds < 0.0 {
            return Err(INVALID_VALUE);
        }
        d.count_launch()?;
        d.counters.collectives += 1;
        let (_, end) = d.issue_after(stream as u64, ENGINE_LINK, seconds, 0.0, not_before)?;
        if sync != 0 {
            d.host_wait_until(end);
        }
        Ok(())
    })
}

/// Writes the report now (tests call this instead of waiting for exit).
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_write_report() {
    write_report();
}

unsafe fn what_str(p: *const c_char) -> String {
    if p.is_null() {
        return "an operation".into();
    }
    // SAFETY: non-null NUL-terminated string (caller's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_address_picks_the_abi_variant_for_the_version() {
        let (f, st) = lookup(c"cuMemAlloc", 12000);
        assert_eq!(
            (f, st),
            (Some(cuMemAlloc_v2 as *const () as usize), PROC_SUCCESS)
        );
        assert_eq!(
            lookup(c"cuMemAlloc", 3000),
            (None, PROC_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            lookup(c"cuGetProcAddress", 12000).0,
            Some(cuGetProcAddress_v2 as *const () as usize)
        );
        assert_eq!(
            lookup(c"cuGetProcAddress", 11080).0,
            Some(cuGetProcAddress as *const () as usize)
        );
        assert_eq!(
            lookup(c"cuEventElapsedTime", 13000).0,
            Some(cuEventElapsedTime_v2 as *const () as usize)
        );
        assert_eq!(lookup(c"cudnnCreate", 13000), (None, PROC_SYMBOL_NOT_FOUND));
    }
}

/// Our hand-written ABI against cudarc's bindings, generated from NVIDIA's CUDA 13.2 headers.
#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::driver::sys as cu;
    use std::mem::{offset_of, size_of};

    #[test]
    fn result_codes() {
        use cu::cudaError_enum as E;
        let pairs = [
            (SUCCESS, E::CUDA_SUCCESS),
            (INVALID_VALUE, E::CUDA_ERROR_INVALID_VALUE),
            (OUT_OF_MEMORY, E::CUDA_ERROR_OUT_OF_MEMORY),
            (NOT_INITIALIZED, E::CUDA_ERROR_NOT_INITIALIZED),
            (INVALID_HANDLE, E::CUDA_ERROR_INVALID_HANDLE),
            (NOT_FOUND, E::CUDA_ERROR_NOT_FOUND),
            (NOT_READY, E::CUDA_ERROR_NOT_READY),
            (ILLEGAL_ADDRESS, E::CUDA_ERROR_ILLEGAL_ADDRESS),
            (LAUNCH_FAILED, E::CUDA_ERROR_LAUNCH_FAILED),
            (UNKNOWN, E::CUDA_ERROR_UNKNOWN),
            (101, E::CUDA_ERROR_INVALID_DEVICE),
            (201, E::CUDA_ERROR_INVALID_CONTEXT),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs as i32, "{theirs:?}");
        }
    }

    #[test]
    fn enums_and_flags() {
        assert_eq!(
            MEM_ALLOCATION_TYPE_PINNED,
            cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED as u32
        );
        assert_eq!(
            MEM_LOCATION_TYPE_DEVICE,
            cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32
        );
        assert_eq!(
            MEM_ACCESS_FLAGS_PROT_READWRITE,
            cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32
        );
        assert_eq!(LAUNCH_PARAM_END as u32, cu::CU_LAUNCH_PARAM_END_AS_INT);
        assert_eq!(
            LAUNCH_PARAM_BUFFER_POINTER as u32,
            cu::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT
        );
        assert_eq!(
            LAUNCH_PARAM_BUFFER_SIZE as u32,
            cu::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT
        );
        use cu::CUdriverProcAddressQueryResult as Q;
        assert_eq!(PROC_SUCCESS, Q::CU_GET_PROC_ADDRESS_SUCCESS as i32);
        assert_eq!(
            PROC_SYMBOL_NOT_FOUND,
            Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND as i32
        );
        assert_eq!(
            PROC_VERSION_NOT_SUFFICIENT,
            Q::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT as i32
        );
        assert_eq!(2, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
        use cu::CUdevice_attribute as A;
        for (ours, theirs) in [
            (16, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            (75, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            (76, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            (
                102,
                A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            ),
            (115, A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
        ] {
            assert_eq!(ours, theirs as i32, "{theirs:?}");
        }
    }

    #[test]
    fn struct_layouts() {
        assert_eq!(
            size_of::<MemAllocationProp>(),
            size_of::<cu::CUmemAllocationProp>()
        );
        assert_eq!(
            offset_of!(MemAllocationProp, win32_metadata),
            offset_of!(cu::CUmemAllocationProp, win32HandleMetaData)
        );
        assert_eq!(
            offset_of!(MemAllocationProp, alloc_flags),
            offset_of!(cu::CUmemAllocationProp, allocFlags)
        );
        assert_eq!(size_of::<MemAccessDesc>(), size_of::<cu::CUmemAccessDesc>());
        assert_eq!(
            offset_of!(MemAccessDesc, flags),
            offset_of!(cu::CUmemAccessDesc, flags)
        );
        assert_eq!(size_of::<LaunchConfig>(), size_of::<cu::CUlaunchConfig>());
        assert_eq!(
            offset_of!(LaunchConfig, stream),
            offset_of!(cu::CUlaunchConfig, hStream)
        );
        assert_eq!(
            offset_of!(LaunchConfig, num_attrs),
            offset_of!(cu::CUlaunchConfig, numAttrs)
        );
    }
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
