//! The simulated CUDA runtime: the `cuda*` subset Marmoset and its workloads use, with the real
//! names, argument layouts and `cudaError_t` values of CUDA 12/13. Like the real `libcudart`, it
//! opens `libcuda.so.1`, looks up `cuGetProcAddress_v2` with `dlsym`, and obtains every driver
//! function from it by base name and version. The error codes of the driver calls it uses have
//! the same numbers in `cudaError_t`, so they pass through unchanged.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

type Err = c_int;
type Handle = *mut c_void;

pub const SUCCESS: Err = 0;
pub const INVALID_VALUE: Err = 1;
pub const INVALID_DEVICE_FUNCTION: Err = 98;
pub const INVALID_MEMCPY_DIRECTION: Err = 21;
pub const INVALID_DEVICE: Err = 101;
pub const NO_DEVICE: Err = 100;
pub const PEER_ACCESS_UNSUPPORTED: Err = 217;
pub const SYMBOL_NOT_FOUND: Err = 500;
pub const INVALID_CONFIGURATION: Err = 9;
pub const INVALID_PITCH_VALUE: Err = 12;
pub const INVALID_SYMBOL: Err = 13;

unsafe extern "C" {
    /// Defined by the cdylib that links this crate (12 or 13).
    static SIMGPU_CUDART_MAJOR: c_int;
}

/// The runtime's major version: 12 for `libcudart.so.12`, 13 for `libcudart.so.13`.
fn runtime_major() -> c_int {
    // SAFETY: a plain integer static defined by the wrapping cdylib.
    unsafe { SIMGPU_CUDART_MAJOR }
}

fn runtime_version() -> c_int {
    match runtime_major() {
        12 => 12080,
        _ => 13020,
    }
}

thread_local! {
    static LAST: Cell<Err> = const { Cell::new(0) };
}

fn ret(e: Err) -> Err {
    if e != SUCCESS {
        LAST.with(|l| l.set(e));
    }
    e
}

type GetProc =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

/// The driver functions the runtime uses, resolved once.
struct Driver {
    /// The libcuda.so.1 handle, for the simulator's own calls (`simgpu*`), found with dlsym.
    handle: usize,
    get_proc: GetProc,
    fns: std::collections::HashMap<&'static str, usize>,
}

const DRIVER_FNS: &[(&str, c_int)] = &[
    ("cuInit", 2000),
    ("cuFuncGetName", 12030),
    ("cuDriverGetVersion", 2020),
    ("cuDeviceGetAttribute", 2000),
    ("cuMemAlloc", 3020),
    ("cuMemFree", 3020),
    ("cuMemAllocAsync", 11020),
    ("cuMemAllocFromPoolAsync", 11020),
    ("cuMemFreeAsync", 11020),
    ("cuDeviceGetDefaultMemPool", 11020),
    ("cuMemPoolSetAttribute", 11020),
    ("cuMemPoolTrimTo", 11020),
    ("cuMemPoolGetAttribute", 11020),
    ("cuMemGetInfo", 3020),
    ("cuMemAllocHost", 3020),
    ("cuMemHostAlloc", 2020),
    ("cuMemFreeHost", 2000),
    ("cuMemHostRegister", 6050),
    ("cuMemHostUnregister", 4000),
    ("cuMemcpy", 4000),
    ("cuMemcpyAsync", 4000),
    ("cuMemsetD8", 3020),
    ("cuMemsetD8Async", 3020),
    ("cuStreamCreate", 2000),
    ("cuStreamCreateWithPriority", 5050),
    ("cuStreamDestroy", 4000),
    ("cuStreamSynchronize", 2000),
    ("cuStreamQuery", 2000),
    ("cuStreamWaitEvent", 3020),
    ("cuEventCreate", 2000),
    ("cuEventDestroy", 4000),
    ("cuEventRecord", 2000),
    ("cuEventSynchronize", 2000),
    ("cuEventQuery", 2000),
    ("cuEventElapsedTime", 2000),
    ("cuCtxSynchronize", 2000),
    ("cuLaunchKernel", 4000),
    ("cuDevicePrimaryCtxRetain", 7000),
    ("cuCtxSetCurrent", 4000),
    ("cuCtxGetCurrent", 4000),
    ("cuCtxGetDevice", 2000),
    ("cuDeviceGetCount", 2000),
    ("cuDeviceGetName", 2000),
    ("cuDeviceTotalMem", 3020),
    ("cuDeviceGetUuid", 11040),
    ("cuDeviceGetPCIBusId", 4010),
    ("cuCtxGetStreamPriorityRange", 5050),
    ("cuStreamGetPriority", 5050),
    ("cuThreadExchangeStreamCaptureMode", 10010),
    ("cuStreamIsCapturing", 10000),
    ("cuLaunchHostFunc", 10000),
    ("cuStreamAddCallback", 5000),
    ("cuEventRecordWithFlags", 11010),
    ("cuPointerGetAttributes", 7000),
    ("cuFuncGetAttribute", 2020),
    ("cuFuncSetAttribute", 9000),
    ("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000),
    ("cuLaunchCooperativeKernel", 9000),
    ("cuMemcpy2DAsync", 3020),
];

fn driver() -> Option<&'static Driver> {
    static D: OnceLock<Option<Driver>> = OnceLock::new();
    D.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; the handle is kept for the process.
        let (handle, get_proc) = unsafe {
            let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            if h.is_null() {
                eprintln!("simgpu cudart: cannot open libcuda.so.1");
                return None;
            }
            let f = libc::dlsym(h, c"cuGetProcAddress_v2".as_ptr());
            if f.is_null() {
                return None;
            }
            (h as usize, std::mem::transmute::<*mut c_void, GetProc>(f))
        };
        let mut fns = std::collections::HashMap::new();
        for &(name, ver) in DRIVER_FNS {
            let c = std::ffi::CString::new(name).ok()?;
            let mut p = std::ptr::null_mut();
            // SAFETY: valid name and output pointer; the driver fills p or leaves it null.
            let r = unsafe { get_proc(c.as_ptr(), &mut p, ver, 0, std::ptr::null_mut()) };
            if r != 0 || p.is_null() {
                eprintln!("simgpu cudart: the driver has no {name}");
                return None;
            }
            fns.insert(name, p as usize);
        }
        // SAFETY: cuInit resolved above; flags 0.
        let init: unsafe extern "C" fn(c_uint) -> c_int =
            unsafe { std::mem::transmute(fns["cuInit"]) };
        // SAFETY: as above.
        if unsafe { init(0) } != 0 {
            return None;
        }
        Some(Driver {
            handle,
            get_proc,
            fns,
        })
    })
    .as_ref()
}

/// The simulator's own driver call `name` (`simgpu*`), found with dlsym on the driver's handle as
/// the runtime finds `cuGetProcAddress_v2`; None when this driver lacks it.
fn simgpu_sym(name: &CStr) -> Option<usize> {
    let d = driver()?;
    // SAFETY: a live handle from dlopen and a NUL-terminated name.
    let f = unsafe { libc::dlsym(d.handle as *mut c_void, name.as_ptr()) };
    (!f.is_null()).then_some(f as usize)
}

thread_local! {
    /// The device cudaSetDevice chose on this thread (None: the driver's current one).
    static DEVICE: std::cell::Cell<Option<c_int>> = const { std::cell::Cell::new(None) };
}

/// The device this thread's runtime calls go to.
fn current_device(d: &Driver) -> c_int {
    DEVICE.with(|c| c.get()).unwrap_or_else(|| {
        let mut dev = 0;
        // SAFETY: obtained from the driver for this signature; a valid output pointer.
        let get: unsafe extern "C" fn(*mut c_int) -> c_int =
            unsafe { std::mem::transmute(d.fns["cuCtxGetDevice"]) };
        // SAFETY: as above.
        if unsafe { get(&mut dev) } != SUCCESS {
            dev = 0;
        }
        dev
    })
}

/// Retains device `dev`'s primary context once per process (the runtime's implicit
/// initialisation); returns its handle, or the driver's error.
fn primary_context(d: &Driver, dev: c_int) -> Result<Handle, c_int> {
    static CONTEXTS: std::sync::Mutex<Vec<(c_int, usize)>> = std::sync::Mutex::new(Vec::new());
    let mut done = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, h)) = done.iter().find(|(x, _)| *x == dev) {
        return Ok(h as Handle);
    }
    let mut ctx: Handle = std::ptr::null_mut();
    // SAFETY: obtained from the driver for this signature; a valid output pointer.
    let retain: unsafe extern "C" fn(*mut Handle, c_int) -> c_int =
        unsafe { std::mem::transmute(d.fns["cuDevicePrimaryCtxRetain"]) };
    // SAFETY: as above.
    let r = unsafe { retain(&mut ctx, dev) };
    if r != SUCCESS {
        return Err(r);
    }
    done.push((dev, ctx as usize));
    Ok(ctx)
}

/// Like the real runtime, a call that needs a context initialises the primary context of the
/// thread's device (device queries do not), and binds it to a thread that has no context
/// current: afterwards cuDevicePrimaryCtxGetState reports it active, and the driver's calls
/// work on this thread.
fn ensure_context(d: &Driver) {
    let Ok(ctx) = primary_context(d, current_device(d)) else {
        return;
    };
    let mut now: Handle = std::ptr::null_mut();
    // SAFETY: obtained from the driver for this signature; a valid output pointer.
    let get: unsafe extern "C" fn(*mut Handle) -> c_int =
        unsafe { std::mem::transmute(d.fns["cuCtxGetCurrent"]) };
    // SAFETY: as above.
    if unsafe { get(&mut now) } == SUCCESS && now.is_null() {
        // SAFETY: obtained from the driver for this signature.
        let set: unsafe extern "C" fn(Handle) -> c_int =
            unsafe { std::mem::transmute(d.fns["cuCtxSetCurrent"]) };
        // SAFETY: a context handle the driver gave.
        let _ = unsafe { set(ctx) };
    }
}

/// At SIMGPU_LOG=debug, names a driver call that failed (each name and code once).
fn debug_failure(name: &'static str, code: c_int) {
    static SEEN: std::sync::Mutex<Vec<(&'static str, c_int)>> = std::sync::Mutex::new(Vec::new());
    if !std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug") {
        return;
    }
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.contains(&(name, code)) {
        seen.push((name, code));
        eprintln!("simgpu cudart: {name} failed with {code}");
    }
}

/// Calls driver function `$name` with signature `fn($($t),*) -> c_int`.
macro_rules! drv {
    ($name:literal ($($t:ty),*) ($($a:expr),*)) => {{
        match driver() {
            None => ret(NO_DEVICE),
            Some(d) => {
                if !$name.starts_with("cuDevice") && $name != "cuDriverGetVersion" {
                    ensure_context(d);
                }
                // SAFETY: the function was obtained from the driver for exactly this signature.
                let f: unsafe extern "C" fn($($t),*) -> c_int = unsafe { std::mem::transmute(d.fns[$name]) };
                // SAFETY: arguments are passed through from the caller, as the runtime API does.
                let r = unsafe { f($($a),*) };
                if r != SUCCESS {
                    debug_failure($name, r);
                }
                ret(r)
            }
        }
    }};
}

// The runtime by subject (after `drv!`, which they use).
mod funcs;
mod kernels;
mod pointers;
mod props;
mod props12;
mod register;
mod streams;

// ==================================================================== device and versions

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDeviceCount(n: *mut c_int) -> Err {
    if n.is_null() {
        return ret(INVALID_VALUE);
    }
    if driver().is_none() {
        return ret(NO_DEVICE);
    }
    let r = drv!("cuDeviceGetCount" (*mut c_int) (n));
    // SAFETY: non-null output pointer, written by the driver on success.
    if r == SUCCESS && unsafe { *n } == 0 {
        return ret(NO_DEVICE);
    }
    r
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDevice(dev: *mut c_int) -> Err {
    if dev.is_null() {
        return ret(INVALID_VALUE);
    }
    let Some(d) = driver() else {
        return ret(NO_DEVICE);
    };
    // SAFETY: non-null output pointer.
    unsafe { *dev = current_device(d) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaSetDevice(dev: c_int) -> Err {
    let Some(d) = driver() else {
        return ret(NO_DEVICE);
    };
    let mut n = 0;
    // SAFETY: obtained from the driver for this signature; a valid output pointer.
    let count: unsafe extern "C" fn(*mut c_int) -> c_int =
        unsafe { std::mem::transmute(d.fns["cuDeviceGetCount"]) };
    // SAFETY: as above.
    if unsafe { count(&mut n) } != SUCCESS || !(0..n).contains(&dev) {
        return ret(INVALID_DEVICE);
    }
    // Since CUDA 12, cudaSetDevice initialises the device's primary context.
    let ctx = match primary_context(d, dev) {
        Ok(c) => c,
        Err(e) => return ret(e),
    };
    // SAFETY: obtained from the driver for this signature.
    let set: unsafe extern "C" fn(Handle) -> c_int =
        unsafe { std::mem::transmute(d.fns["cuCtxSetCurrent"]) };
    // SAFETY: a context handle the driver gave.
    let r = unsafe { set(ctx) };
    if r == SUCCESS {
        DEVICE.with(|c| c.set(Some(dev)));
    }
    ret(r)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceGetAttribute(v: *mut c_int, attr: c_int, dev: c_int) -> Err {
    drv!("cuDeviceGetAttribute" (*mut c_int, c_int, c_int) (v, attr, dev))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDriverGetVersion(v: *mut c_int) -> Err {
    drv!("cuDriverGetVersion" (*mut c_int) (v))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaRuntimeGetVersion(v: *mut c_int) -> Err {
    if v.is_null() {
        return ret(INVALID_VALUE);
    }
    // SAFETY: non-null output pointer.
    unsafe { *v = runtime_version() };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceSynchronize() -> Err {
    drv!("cuCtxSynchronize"()())
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetLastError() -> Err {
    LAST.with(|l| l.replace(SUCCESS))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaPeekAtLastError() -> Err {
    LAST.with(|l| l.get())
}

fn error_name(e: Err) -> &'static CStr {
    match e {
        0 => c"cudaSuccess",
        1 => c"cudaErrorInvalidValue",
        2 => c"cudaErrorMemoryAllocation",
        3 => c"cudaErrorInitializationError",
        21 => c"cudaErrorInvalidMemcpyDirection",
        98 => c"cudaErrorInvalidDeviceFunction",
        100 => c"cudaErrorNoDevice",
        101 => c"cudaErrorInvalidDevice",
        217 => c"cudaErrorPeerAccessUnsupported",
        400 => c"cudaErrorInvalidResourceHandle",
        500 => c"cudaErrorSymbolNotFound",
        600 => c"cudaErrorNotReady",
        700 => c"cudaErrorIllegalAddress",
        719 => c"cudaErrorLaunchFailure",
        801 => c"cudaErrorNotSupported",
        999 => c"cudaErrorUnknown",
        _ => c"unrecognized error code",
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorName(e: Err) -> *const c_char {
    error_name(e).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetErrorString(e: Err) -> *const c_char {
    error_name(e).as_ptr()
}

// ==================================================================== memory

#[unsafe(no_mangle)]
pub extern "C" fn cudaMalloc(p: *mut *mut c_void, size: usize) -> Err {
    if size == 0 && !p.is_null() {
        // cudaMalloc(0) succeeds with a null pointer.
        // SAFETY: non-null output pointer.
        unsafe { *p = std::ptr::null_mut() };
        return SUCCESS;
    }
    drv!("cuMemAlloc" (*mut *mut c_void, usize) (p, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaFree(p: *mut c_void) -> Err {
    if p.is_null() {
        // cudaFree(NULL) is how programs initialise the runtime: it loads the driver, makes
        // the context and binds it to the thread, as the real one does.
        return match driver() {
            Some(d) => {
                ensure_context(d);
                SUCCESS
            }
            None => ret(NO_DEVICE),
        };
    }
    drv!("cuMemFree" (*mut c_void) (p))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMallocAsync(p: *mut *mut c_void, size: usize, s: Handle) -> Err {
    drv!("cuMemAllocAsync" (*mut *mut c_void, usize, Handle) (p, size, s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMallocFromPoolAsync(
    p: *mut *mut c_void,
    size: usize,
    pool: Handle,
    s: Handle,
) -> Err {
    drv!("cuMemAllocFromPoolAsync" (*mut *mut c_void, usize, Handle, Handle) (p, size, pool, s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaFreeAsync(p: *mut c_void, s: Handle) -> Err {
    drv!("cuMemFreeAsync" (*mut c_void, Handle) (p, s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceGetDefaultMemPool(pool: *mut Handle, dev: c_int) -> Err {
    drv!("cuDeviceGetDefaultMemPool" (*mut Handle, c_int) (pool, dev))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemPoolSetAttribute(pool: Handle, attr: c_int, v: *mut c_void) -> Err {
    drv!("cuMemPoolSetAttribute" (Handle, c_int, *mut c_void) (pool, attr, v))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemPoolGetAttribute(pool: Handle, attr: c_int, v: *mut c_void) -> Err {
    drv!("cuMemPoolGetAttribute" (Handle, c_int, *mut c_void) (pool, attr, v))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemPoolTrimTo(pool: Handle, keep: usize) -> Err {
    drv!("cuMemPoolTrimTo"(Handle, usize)(pool, keep))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> Err {
    drv!("cuMemGetInfo" (*mut usize, *mut usize) (free, total))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMallocHost(p: *mut *mut c_void, size: usize) -> Err {
    drv!("cuMemAllocHost" (*mut *mut c_void, usize) (p, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> Err {
    drv!("cuMemHostAlloc" (*mut *mut c_void, usize, c_uint) (p, size, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaFreeHost(p: *mut c_void) -> Err {
    drv!("cuMemFreeHost" (*mut c_void) (p))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaHostRegister(p: *mut c_void, size: usize, flags: c_uint) -> Err {
    drv!("cuMemHostRegister" (*mut c_void, usize, c_uint) (p, size, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaHostUnregister(p: *mut c_void) -> Err {
    drv!("cuMemHostUnregister" (*mut c_void) (p))
}

/// cudaMemcpyKind: HostToHost 0 ... Default 4. With unified addressing the driver tells host
/// from device pointers, so every valid kind takes the same path.
fn valid_kind(kind: c_int) -> bool {
    (0..=4).contains(&kind)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) -> Err {
    if !valid_kind(kind) {
        return ret(INVALID_MEMCPY_DIRECTION);
    }
    drv!("cuMemcpy" (*mut c_void, *const c_void, usize) (dst, src, n))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    kind: c_int,
    s: Handle,
) -> Err {
    if !valid_kind(kind) {
        return ret(INVALID_MEMCPY_DIRECTION);
    }
    drv!("cuMemcpyAsync" (*mut c_void, *const c_void, usize, Handle) (dst, src, n, s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemset(p: *mut c_void, v: c_int, n: usize) -> Err {
    drv!("cuMemsetD8" (*mut c_void, u8, usize) (p, v as u8, n))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemsetAsync(p: *mut c_void, v: c_int, n: usize, s: Handle) -> Err {
    drv!("cuMemsetD8Async" (*mut c_void, u8, usize, Handle) (p, v as u8, n, s))
}

// ==================================================================== streams and events

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamCreate(s: *mut Handle) -> Err {
    drv!("cuStreamCreate" (*mut Handle, c_uint) (s, 0))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamCreateWithFlags(s: *mut Handle, flags: c_uint) -> Err {
    drv!("cuStreamCreate" (*mut Handle, c_uint) (s, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamCreateWithPriority(s: *mut Handle, flags: c_uint, prio: c_int) -> Err {
    drv!("cuStreamCreateWithPriority" (*mut Handle, c_uint, c_int) (s, flags, prio))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamDestroy(s: Handle) -> Err {
    drv!("cuStreamDestroy"(Handle)(s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamSynchronize(s: Handle) -> Err {
    drv!("cuStreamSynchronize"(Handle)(s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamQuery(s: Handle) -> Err {
    drv!("cuStreamQuery"(Handle)(s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamWaitEvent(s: Handle, e: Handle, flags: c_uint) -> Err {
    drv!("cuStreamWaitEvent"(Handle, Handle, c_uint)(s, e, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamIsCapturing(_s: Handle, status: *mut c_int) -> Err {
    if status.is_null() {
        return ret(INVALID_VALUE);
    }
    // SAFETY: non-null output; the simulator never captures graphs (cudaStreamCaptureStatusNone).
    unsafe { *status = 0 };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventCreate(e: *mut Handle) -> Err {
    drv!("cuEventCreate" (*mut Handle, c_uint) (e, 0))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventCreateWithFlags(e: *mut Handle, flags: c_uint) -> Err {
    drv!("cuEventCreate" (*mut Handle, c_uint) (e, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventDestroy(e: Handle) -> Err {
    drv!("cuEventDestroy"(Handle)(e))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventRecord(e: Handle, s: Handle) -> Err {
    drv!("cuEventRecord"(Handle, Handle)(e, s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventSynchronize(e: Handle) -> Err {
    drv!("cuEventSynchronize"(Handle)(e))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventQuery(e: Handle) -> Err {
    drv!("cuEventQuery"(Handle)(e))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventElapsedTime(ms: *mut f32, a: Handle, b: Handle) -> Err {
    drv!("cuEventElapsedTime" (*mut f32, Handle, Handle) (ms, a, b))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventElapsedTime_v2(ms: *mut f32, a: Handle, b: Handle) -> Err {
    cudaEventElapsedTime(ms, a, b)
}

// ==================================================================== launches

/// dim3, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

fn launch(
    f: *const c_void,
    g: Dim3,
    b: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    s: Handle,
) -> Err {
    let shared = match c_uint::try_from(shared) {
        Ok(v) => v,
        Err(_) => return ret(INVALID_VALUE),
    };
    let null: *mut *mut c_void = std::ptr::null_mut();
    let r = drv!("cuLaunchKernel"
        (*const c_void, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void)
        (f, g.x, g.y, g.z, b.x, b.y, b.z, shared, s, args, null));
    // An unknown kernel handle is an invalid device function to the runtime.
    if r == 400 {
        ret(INVALID_DEVICE_FUNCTION)
    } else {
        r
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaLaunchKernel(
    f: *const c_void,
    g: Dim3,
    b: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    s: Handle,
) -> Err {
    // It takes a `cudaKernel_t` as well as a host stub.
    launch(kernels::stub_of(f).unwrap_or(f), g, b, args, shared, s)
}

/// What `<<<...>>>` lowers to in CUDA 13, after `__cudaGetKernel`: a launch of the handle that
/// made, not of the host stub.
#[unsafe(no_mangle)]
pub extern "C" fn __cudaLaunchKernel(
    k: *const c_void,
    g: Dim3,
    b: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    s: Handle,
) -> Err {
    match kernels::stub_of(k) {
        Some(f) => launch(f, g, b, args, shared, s),
        None => ret(INVALID_DEVICE_FUNCTION),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaLaunchKernel_ptsz(
    k: *const c_void,
    g: Dim3,
    b: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    s: Handle,
) -> Err {
    __cudaLaunchKernel(k, g, b, args, shared, s)
}

/// A registered kernel's `cudaKernel_t`: the runtime's own handle, one per host stub, never the
/// stub itself (see [`kernels`]).
#[unsafe(no_mangle)]
pub extern "C" fn __cudaGetKernel(kernel: *mut *const c_void, entry: *const c_void) -> Err {
    if kernel.is_null() || entry.is_null() {
        return ret(INVALID_VALUE);
    }
    if !kernels::registered(entry) {
        return ret(INVALID_DEVICE_FUNCTION);
    }
    // SAFETY: non-null output pointer.
    unsafe { *kernel = kernels::handle_of(entry) };
    SUCCESS
}

/// A registered host stub's `cudaFunction_t` (in the simulator, the stub's own address is its
/// kernel's `CUfunction`). Anything else, a `cudaKernel_t` included, is an invalid device
/// function, and like every failing call it sets the thread's last error.
#[unsafe(no_mangle)]
pub extern "C" fn cudaGetFuncBySymbol(f: *mut *const c_void, symbol: *const c_void) -> Err {
    if f.is_null() || symbol.is_null() {
        return ret(INVALID_VALUE);
    }
    if !kernels::registered(symbol) {
        return ret(INVALID_DEVICE_FUNCTION);
    }
    // SAFETY: non-null output pointer.
    unsafe { *f = symbol };
    SUCCESS
}

/// cudaLaunchConfig_t.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared: usize,
    pub stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaLaunchKernelExC(
    config: *const LaunchConfig,
    f: *const c_void,
    args: *mut *mut c_void,
) -> Err {
    // SAFETY: config is null or a valid cudaLaunchConfig_t (API contract).
    let Some(c) = (unsafe { config.as_ref() }) else {
        return ret(INVALID_VALUE);
    };
    launch(
        kernels::stub_of(f).unwrap_or(f),
        c.grid,
        c.block,
        args,
        c.shared,
        c.stream,
    )
}

// ==================================================================== driver entry points

fn entry_point(
    symbol: *const c_char,
    fp: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> Err {
    let Some(d) = driver() else {
        return ret(NO_DEVICE);
    };
    if symbol.is_null() || fp.is_null() {
        return ret(INVALID_VALUE);
    }
    let mut st: c_int = 0;
    // SAFETY: valid pointers checked above; the driver writes fp and st.
    let r = unsafe { (d.get_proc)(symbol, fp, version, flags, &mut st) };
    if !status.is_null() {
        // SAFETY: non-null optional output.
        unsafe { *status = st };
    }
    match r {
        0 => SUCCESS,
        // CUDA 12+: a function the driver lacks is cudaSuccess with a NULL pointer and the
        // reason in driverStatus (cudaDriverEntryPointSymbolNotFound / VersionNotSufficent), not
        // an error the program would find later in cudaGetLastError.
        500 if st != 0 => {
            // SAFETY: fp is non-null (checked above).
            unsafe { *fp = std::ptr::null_mut() };
            SUCCESS
        }
        _ => ret(SYMBOL_NOT_FOUND),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    fp: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> Err {
    entry_point(symbol, fp, runtime_version(), flags, status)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    fp: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> Err {
    entry_point(symbol, fp, version as c_int, flags, status)
}

/// The test binary stands in for the wrapping cdylib.
#[cfg(test)]
#[unsafe(export_name = "SIMGPU_CUDART_MAJOR")]
static TEST_MAJOR: c_int = 13;

/// Our hand-written ABI against cudarc's bindings, generated from NVIDIA's CUDA 13.2 headers.
#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::runtime::sys as rt;
    use std::mem::{offset_of, size_of};

    #[test]
    fn error_codes_and_names() {
        use rt::cudaError as E;
        for (ours, theirs) in [
            (SUCCESS, E::cudaSuccess),
            (INVALID_VALUE, E::cudaErrorInvalidValue),
            (INVALID_MEMCPY_DIRECTION, E::cudaErrorInvalidMemcpyDirection),
            (INVALID_DEVICE, E::cudaErrorInvalidDevice),
            (NO_DEVICE, E::cudaErrorNoDevice),
            (PEER_ACCESS_UNSUPPORTED, E::cudaErrorPeerAccessUnsupported),
            (SYMBOL_NOT_FOUND, E::cudaErrorSymbolNotFound),
            (2, E::cudaErrorMemoryAllocation),
            (3, E::cudaErrorInitializationError),
            (98, E::cudaErrorInvalidDeviceFunction),
            (400, E::cudaErrorInvalidResourceHandle),
            (600, E::cudaErrorNotReady),
            (700, E::cudaErrorIllegalAddress),
            (719, E::cudaErrorLaunchFailure),
            (801, E::cudaErrorNotSupported),
            (999, E::cudaErrorUnknown),
        ] {
            assert_eq!(ours, theirs as i32, "{theirs:?}");
            // The name we print is the enumerator's.
            assert_eq!(error_name(ours).to_str().unwrap(), format!("{theirs:?}"));
        }
        assert_eq!(rt::cudaMemcpyKind::cudaMemcpyDefault as i32, 4);
        assert_eq!(rt::cudaStreamNonBlocking, 1);
        assert_eq!(rt::cudaEventDisableTiming, 2);
    }

    #[test]
    fn struct_layouts() {
        assert_eq!(size_of::<Dim3>(), size_of::<rt::dim3>());
        assert_eq!(
            size_of::<LaunchConfig>(),
            size_of::<rt::cudaLaunchConfig_t>()
        );
        assert_eq!(
            offset_of!(LaunchConfig, shared),
            offset_of!(rt::cudaLaunchConfig_t, dynamicSmemBytes)
        );
        assert_eq!(
            offset_of!(LaunchConfig, stream),
            offset_of!(rt::cudaLaunchConfig_t, stream)
        );
        assert_eq!(
            offset_of!(LaunchConfig, num_attrs),
            offset_of!(rt::cudaLaunchConfig_t, numAttrs)
        );
    }
}
