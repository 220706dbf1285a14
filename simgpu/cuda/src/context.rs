//! The driver calls a framework makes around its kernels, beyond memory, streams and launches:
//! the primary context's state, device identity and attributes, stream priorities, capture mode,
//! host functions and stream callbacks, pointer attributes, function attributes and occupancy,
//! 2D copies, log callbacks. PyTorch finds them with `dlsym` on libcuda.so.1 or through
//! `cuGetProcAddress` ([`PROCS`]).

use crate::device::*;
use crate::devices;
use crate::{CUdeviceptr, CUresult, Handle, out, with};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, mpsc};

// ==================================================================== primary context

/// Each device's primary context: its references and flags.
static PRIMARY_REFS: [AtomicI32; devices::MAX_DEVICES as usize] =
    [const { AtomicI32::new(0) }; devices::MAX_DEVICES as usize];
static PRIMARY_FLAGS: [AtomicU32; devices::MAX_DEVICES as usize] =
    [const { AtomicU32::new(0) }; devices::MAX_DEVICES as usize];

/// cuDevicePrimaryCtxRetain took a reference on ordinal `dev` (a valid one).
pub fn primary_retained(dev: c_int) {
    PRIMARY_REFS[dev as usize].fetch_add(1, Ordering::Relaxed);
}

/// cuDevicePrimaryCtxRelease dropped one.
pub fn primary_released(dev: c_int) -> Result<(), CUresult> {
    PRIMARY_REFS[dev as usize]
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
            (r > 0).then_some(r - 1)
        })
        .map(|_| ())
        .map_err(|_| INVALID_CONTEXT)
}

pub const INVALID_CONTEXT: CUresult = 201;
pub const INVALID_DEVICE: CUresult = 101;
pub const NOT_SUPPORTED: CUresult = 801;

/// The index of a valid ordinal in the per-device tables.
fn device(dev: c_int) -> Result<usize, CUresult> {
    devices::physical(dev).map(|_| dev as usize)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    with(|_| {
        let i = device(dev)?;
        out(flags, PRIMARY_FLAGS[i].load(Ordering::Relaxed))?;
        out(
            active,
            (PRIMARY_REFS[i].load(Ordering::Relaxed) > 0) as c_int,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, flags: c_uint) -> CUresult {
    with(|_| {
        let i = device(dev)?;
        // CU_CTX_SCHED_MASK (0x07) | CU_CTX_MAP_HOST (0x08) | CU_CTX_LMEM_RESIZE_TO_MAX (0x10)
        // | CU_CTX_COREDUMP_ENABLE (0x20) | CU_CTX_USER_COREDUMP_ENABLE (0x40) | SYNC_MEMOPS (0x80)
        if flags & !0xff != 0 {
            return Err(INVALID_VALUE);
        }
        PRIMARY_FLAGS[i].store(flags, Ordering::Relaxed);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: c_int) -> CUresult {
    with(|_| {
        PRIMARY_REFS[device(dev)?].store(0, Ordering::Relaxed);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    with(|_| {
        out(
            flags,
            PRIMARY_FLAGS[device(devices::current())?].load(Ordering::Relaxed),
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetApiVersion(_ctx: Handle, version: *mut c_uint) -> CUresult {
    // Contexts made by the CUDA 3.2+ API report 3020.
    with(|_| out(version, 3020))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    with(|d| {
        let g = crate::props::arch(d.profile.compute_capability).greatest_priority;
        // Either output may be NULL.
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, g)?;
        }
        Ok(())
    })
}

// ==================================================================== device identity

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    with(|d| out(uuid, crate::props::uuid(d, devices::physical(dev)?)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetPCIBusId(buf: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    with(|_| {
        let id = crate::props::pci_bus_id(devices::physical(dev)?);
        if buf.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let n = id.len().min(len as usize - 1);
        // SAFETY: buf has len writable bytes (API contract); we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(id.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        Ok(())
    })
}

// ==================================================================== logs

/// Registered log callbacks: the simulator emits no driver log messages, so they are kept only
/// to be unregistered.
static LOG_CALLBACKS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

#[unsafe(no_mangle)]
pub extern "C" fn cuLogsRegisterCallback(
    callback: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_char, usize)>,
    _user: *mut c_void,
    handle: *mut Handle,
) -> CUresult {
    let Some(cb) = callback else {
        return INVALID_VALUE;
    };
    let mut v = LOG_CALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
    v.push(cb as usize);
    if handle.is_null() {
        return SUCCESS;
    }
    // SAFETY: non-null output pointer (API contract).
    unsafe { *handle = v.len() as Handle };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuLogsUnregisterCallback(handle: Handle) -> CUresult {
    let mut v = LOG_CALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
    match (handle as usize).checked_sub(1).and_then(|i| v.get_mut(i)) {
        Some(slot) if *slot != 0 => {
            *slot = 0;
            SUCCESS
        }
        _ => INVALID_VALUE,
    }
}

// ==================================================================== stream priorities

static PRIORITIES: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);

/// Records the priority of a stream made by cuStreamCreateWithPriority, clamped to the device's
/// range as the driver does.
pub fn set_priority(d: &Device, stream: u64, prio: c_int) {
    let g = crate::props::arch(d.profile.compute_capability).greatest_priority;
    let mut p = PRIORITIES.lock().unwrap_or_else(|p| p.into_inner());
    p.get_or_insert_with(HashMap::new)
        .insert(stream, prio.clamp(g, 0));
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamGetPriority(stream: Handle, prio: *mut c_int) -> CUresult {
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        let p = PRIORITIES.lock().unwrap_or_else(|p| p.into_inner());
        let v = p
            .as_ref()
            .and_then(|m| m.get(&(stream as u64)).copied())
            .unwrap_or(0);
        out(prio, v)
    })
}

// ==================================================================== capture

thread_local! {
    /// cudaStreamCaptureModeGlobal (0) until a thread exchanges it.
    static CAPTURE_MODE: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

#[unsafe(no_mangle)]
pub extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> CUresult {
    if mode.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null in/out pointer (API contract).
    let new = unsafe { *mode };
    // CU_STREAM_CAPTURE_MODE_GLOBAL 0, THREAD_LOCAL 1, RELAXED 2.
    if !(0..=2).contains(&new) {
        return INVALID_VALUE;
    }
    let old = CAPTURE_MODE.with(|m| m.replace(new));
    // SAFETY: as above.
    unsafe { *mode = old };
    SUCCESS
}

/// The simulator never captures: every stream is CU_STREAM_CAPTURE_STATUS_NONE.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) -> CUresult {
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        out(status, 0)
    })
}

// ==================================================================== host functions

type HostFn = unsafe extern "C" fn(*mut c_void);
type StreamCallback = unsafe extern "C" fn(Handle, CUresult, *mut c_void);

enum Job {
    Host(HostFn, usize),
    Callback(StreamCallback, usize, usize),
}

/// Host functions run in order on one driver thread, as the real driver runs them, never on the
/// thread that enqueued them (which may hold locks the function takes).
struct HostQueue {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    pending: Mutex<u64>,
    done: Condvar,
}

static HOST: HostQueue = HostQueue {
    tx: Mutex::new(None),
    pending: Mutex::new(0),
    done: Condvar::new(),
};

fn enqueue(job: Job) -> Result<(), CUresult> {
    let mut tx = HOST.tx.lock().unwrap_or_else(|p| p.into_inner());
    if tx.is_none() {
        let (s, r) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("simgpu-hostfn".into())
            .spawn(move || {
                for job in r {
                    let ran = std::panic::catch_unwind(|| match job {
                        // SAFETY: the program's host function and its argument, called once,
                        // after the work before it on its stream, as cuLaunchHostFunc promises.
                        Job::Host(f, arg) => unsafe { f(arg as *mut c_void) },
                        // SAFETY: as above, with the stream and the status (success).
                        Job::Callback(f, stream, arg) => unsafe {
                            f(stream as Handle, SUCCESS, arg as *mut c_void)
                        },
                    });
                    if ran.is_err() {
                        eprintln!("simgpu: a host function panicked");
                    }
                    let mut p = HOST.pending.lock().unwrap_or_else(|p| p.into_inner());
                    *p -= 1;
                    HOST.done.notify_all();
                }
            })
            .map_err(|_| UNKNOWN)?;
        *tx = Some(s);
    }
    *HOST.pending.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    if tx.as_ref().is_some_and(|s| s.send(job).is_ok()) {
        Ok(())
    } else {
        *HOST.pending.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        Err(UNKNOWN)
    }
}

/// Waits until every host function enqueued so far has run: a synchronising call returns only
/// after its stream's host functions, as on a real device. (The simulator runs device work in
/// program order, so there is no other ordering to keep.) Not from the host-function thread.
pub fn drain_host_functions() {
    if std::thread::current().name() == Some("simgpu-hostfn") {
        return;
    }
    let mut p = HOST.pending.lock().unwrap_or_else(|p| p.into_inner());
    while *p > 0 {
        p = HOST.done.wait(p).unwrap_or_else(|p| p.into_inner());
    }
}

/// A host function occupies its stream for an API call's time on the virtual clock.
fn place_on_stream(d: &mut Device, stream: Handle) -> Result<(), CUresult> {
    if !d.valid_stream(stream as u64) {
        return Err(INVALID_HANDLE);
    }
    let cost = d.profile.api_call();
    d.issue(stream as u64, ENGINE_COMPUTE, 0.0, cost)
        .map(|_| ())
}

#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchHostFunc(
    stream: Handle,
    f: Option<HostFn>,
    user: *mut c_void,
) -> CUresult {
    let Some(f) = f else {
        return INVALID_VALUE;
    };
    let r = with(|d| place_on_stream(d, stream));
    if r != SUCCESS {
        return r;
    }
    match enqueue(Job::Host(f, user as usize)) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamAddCallback(
    stream: Handle,
    f: Option<StreamCallback>,
    user: *mut c_void,
    flags: c_uint,
) -> CUresult {
    let Some(f) = f else {
        return INVALID_VALUE;
    };
    if flags != 0 {
        return INVALID_VALUE;
    }
    let r = with(|d| place_on_stream(d, stream));
    if r != SUCCESS {
        return r;
    }
    match enqueue(Job::Callback(f, stream as usize, user as usize)) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) -> CUresult {
    // CU_EVENT_RECORD_DEFAULT 0; CU_EVENT_RECORD_EXTERNAL 1 is for stream capture only.
    match flags {
        0 => crate::cuEventRecord(e, s),
        1 => NOT_SUPPORTED,
        _ => INVALID_VALUE,
    }
}

// ==================================================================== pointer attributes

// CUpointer_attribute (cuda.h).
const PA_CONTEXT: c_int = 1;
const PA_MEMORY_TYPE: c_int = 2;
const PA_DEVICE_POINTER: c_int = 3;
const PA_HOST_POINTER: c_int = 4;
const PA_SYNC_MEMOPS: c_int = 6;
const PA_BUFFER_ID: c_int = 7;
const PA_IS_MANAGED: c_int = 8;
const PA_DEVICE_ORDINAL: c_int = 9;
const PA_RANGE_START_ADDR: c_int = 11;
const PA_RANGE_SIZE: c_int = 12;
const PA_MAPPED: c_int = 13;
// CUmemorytype.
pub const MEMORYTYPE_HOST: c_uint = 1;
pub const MEMORYTYPE_DEVICE: c_uint = 2;

/// What the driver knows about an address: device memory or pinned host memory, with its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Device(u64, u64),
    Pinned(u64, u64),
}

pub fn classify(d: &Device, p: u64) -> Option<Known> {
    if let Some((s, l)) = d.device_range(p) {
        return Some(Known::Device(s, l));
    }
    d.pinned_range(p as usize)
        .map(|(s, l)| Known::Pinned(s as u64, l as u64))
}

/// Writes one attribute of `k` for address `p` to `data`. Unknown (pageable) memory is
/// CUDA_ERROR_INVALID_VALUE, as on a real device.
fn pointer_attribute(
    k: Option<Known>,
    p: u64,
    attr: c_int,
    data: *mut c_void,
) -> Result<(), CUresult> {
    if data.is_null() {
        return Err(INVALID_VALUE);
    }
    let k = k.ok_or(INVALID_VALUE)?;
    let (start, len, ty) = match k {
        Known::Device(s, l) => (s, l, MEMORYTYPE_DEVICE),
        Known::Pinned(s, l) => (s, l, MEMORYTYPE_HOST),
    };
    match attr {
        PA_CONTEXT => out(
            data as *mut Handle,
            devices::context_handle(devices::working()) as Handle,
        ),
        PA_MEMORY_TYPE => out(data as *mut c_uint, ty),
        // Unified addressing: the same address on both sides.
        PA_DEVICE_POINTER => out(data as *mut u64, p),
        PA_HOST_POINTER => match k {
            Known::Pinned(..) => out(data as *mut u64, p),
            Known::Device(..) => Err(INVALID_VALUE),
        },
        PA_SYNC_MEMOPS => out(data as *mut c_int, 1),
        PA_BUFFER_ID => out(data as *mut u64, start),
        PA_IS_MANAGED => out(data as *mut c_int, 0),
        PA_DEVICE_ORDINAL => out(data as *mut c_int, devices::working()),
        PA_RANGE_START_ADDR => out(data as *mut u64, start),
        PA_RANGE_SIZE => out(data as *mut usize, len as usize),
        PA_MAPPED => out(data as *mut c_int, 1),
        _ => Err(INVALID_VALUE),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attr: c_int,
    p: CUdeviceptr,
) -> CUresult {
    with(|d| pointer_attribute(classify(d, p), p, attr, data))
}

/// The device allocation holding `p`: its start and size (each output optional). An address
/// in no device allocation is CUDA_ERROR_NOT_FOUND.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    p: CUdeviceptr,
) -> CUresult {
    with(|d| {
        let (start, len) = d.device_range(p).ok_or(NOT_FOUND)?;
        if !base.is_null() {
            out(base, start)?;
        }
        if !size.is_null() {
            out(size, len as usize)?;
        }
        Ok(())
    })
}

/// Several attributes at once; unlike the single query, unknown memory is not an error: each
/// value is left as the driver leaves it for unregistered memory (type 0, NULL, ordinal -2).
#[unsafe(no_mangle)]
pub extern "C" fn cuPointerGetAttributes(
    n: c_uint,
    attrs: *const c_int,
    data: *mut *mut c_void,
    p: CUdeviceptr,
) -> CUresult {
    with(|d| {
        if n > 0 && (attrs.is_null() || data.is_null()) {
            return Err(INVALID_VALUE);
        }
        let k = classify(d, p);
        for i in 0..n as usize {
            // SAFETY: attrs and data hold n entries (API contract).
            let (a, slot) = unsafe { (*attrs.add(i), *data.add(i)) };
            if k.is_some() {
                pointer_attribute(k, p, a, slot)?;
                continue;
            }
            if slot.is_null() {
                return Err(INVALID_VALUE);
            }
            match a {
                PA_MEMORY_TYPE => out(slot as *mut c_uint, 0)?,
                PA_DEVICE_ORDINAL => out(slot as *mut c_int, -2)?,
                PA_IS_MANAGED | PA_MAPPED => out(slot as *mut c_int, 0)?,
                PA_CONTEXT | PA_DEVICE_POINTER | PA_HOST_POINTER => out(slot as *mut u64, 0)?,
                _ => {}
            }
        }
        Ok(())
    })
}

// ==================================================================== functions and occupancy

/// Per-kernel settings made with cuFuncSetAttribute / cuFuncSetCacheConfig.
static FUNC_MAX_DYN_SHARED: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);

/// The registers and static shared memory a kernel uses. The fatbin registry may know them from
/// the kernel's .nv.info; without it, 32 registers a thread and no static shared memory.
fn kernel_resources(_d: &Device, _f: u64) -> (c_int, c_int) {
    (32, 0)
}

/// `f` as a kernel: one registered with a host implementation or from a fatbin. `fatbin` is
/// `modules::is_registered(f)`, asked before the device lock is taken (lock order).
fn known_kernel(d: &Device, f: Handle, fatbin: bool) -> Result<u64, CUresult> {
    if fatbin || d.kernels.contains_key(&(f as u64)) {
        Ok(f as u64)
    } else {
        Err(INVALID_HANDLE)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetAttribute(v: *mut c_int, attr: c_int, f: Handle) -> CUresult {
    let fatbin = crate::modules::is_registered(f as usize);
    // Before the device lock (lock order): the cubin's architecture, for fatbin kernels.
    let cubin = fatbin
        .then(|| crate::modules::cubin_arch(f as usize))
        .flatten();
    with(|d| {
        let k = known_kernel(d, f, fatbin)?;
        let (regs, shared) = kernel_resources(d, k);
        let cc = d.profile.compute_capability;
        let version = cubin.map_or(cc[0] * 10 + cc[1], |a| a as c_int);
        let optin = crate::props::arch(cc).shared_per_block_optin;
        let dynamic = FUNC_MAX_DYN_SHARED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|m| m.get(&k).copied())
            .unwrap_or(48 * 1024 - shared);
        let value = match attr {
            0 => 1024,                        // MAX_THREADS_PER_BLOCK
            1 => shared,                      // SHARED_SIZE_BYTES
            2 => 0,                           // CONST_SIZE_BYTES
            3 => 0,                           // LOCAL_SIZE_BYTES
            4 => regs,                        // NUM_REGS
            5 | 6 => version,                 // PTX_VERSION, BINARY_VERSION: the cubin's
            7 => 0,                           // CACHE_MODE_CA
            8 => dynamic.min(optin - shared), // MAX_DYNAMIC_SHARED_SIZE_BYTES
            9 => -1,                          // PREFERRED_SHARED_MEMORY_CARVEOUT: no preference
            10..=15 => 0,                     // cluster attributes: none required
            _ => return Err(INVALID_VALUE),
        };
        out(v, value)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetAttribute(f: Handle, attr: c_int, value: c_int) -> CUresult {
    let fatbin = crate::modules::is_registered(f as usize);
    with(|d| {
        let k = known_kernel(d, f, fatbin)?;
        let optin = crate::props::arch(d.profile.compute_capability).shared_per_block_optin;
        match attr {
            8 => {
                let (_, shared) = kernel_resources(d, k);
                if value < 0 || value > optin - shared {
                    return Err(INVALID_VALUE);
                }
                FUNC_MAX_DYN_SHARED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(HashMap::new)
                    .insert(k, value);
                Ok(())
            }
            9 if (-1..=100).contains(&value) => Ok(()),
            10..=15 => Ok(()),
            _ => Err(INVALID_VALUE),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetCacheConfig(f: Handle, config: c_int) -> CUresult {
    let fatbin = crate::modules::is_registered(f as usize);
    with(|d| {
        known_kernel(d, f, fatbin)?;
        // CU_FUNC_CACHE_PREFER_NONE .. PREFER_EQUAL (0..=3): a hint.
        if (0..=3).contains(&config) {
            Ok(())
        } else {
            Err(INVALID_VALUE)
        }
    })
}

/// Blocks of `block` threads that fit on one SM: threads, blocks, registers and shared memory.
pub fn occupancy(d: &Device, f: u64, block: c_int, dyn_shared: usize) -> Result<c_int, CUresult> {
    if block <= 0 || block > 1024 {
        return Err(INVALID_VALUE);
    }
    let a = crate::props::arch(d.profile.compute_capability);
    let (regs, shared) = kernel_resources(d, f);
    let warps = (block + 31) / 32;
    let by_threads = 2048 / (warps * 32);
    // Registers are allocated per warp in units of 256.
    let regs_per_warp = (regs * 32 + 255) / 256 * 256;
    let by_regs = 65536 / (regs_per_warp * warps).max(1);
    let smem = shared as usize + dyn_shared + a.reserved_shared_per_block as usize;
    let by_smem = (a.shared_per_sm as usize)
        .checked_div(smem)
        .map_or(c_int::MAX, |n| n as c_int);
    Ok(32.min(by_threads).min(by_regs).min(by_smem))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    n: *mut c_int,
    f: Handle,
    block: c_int,
    dyn_shared: usize,
) -> CUresult {
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, dyn_shared, 0)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    n: *mut c_int,
    f: Handle,
    block: c_int,
    dyn_shared: usize,
    flags: c_uint,
) -> CUresult {
    let fatbin = crate::modules::is_registered(f as usize);
    with(|d| {
        // CU_OCCUPANCY_DEFAULT 0, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE 1.
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        let k = known_kernel(d, f, fatbin)?;
        let v = occupancy(d, k, block, dyn_shared)?;
        out(n, v)
    })
}

#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchCooperativeKernel(
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
) -> CUresult {
    crate::cuLaunchKernel(
        f,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        shared,
        stream,
        params,
        std::ptr::null_mut(),
    )
}

// ==================================================================== 2D copies

/// CUDA_MEMCPY2D (cuda.h).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

// CUmemorytype: HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4.
fn base(ty: c_uint, host: u64, dev: u64) -> Result<u64, CUresult> {
    match ty {
        1 => Ok(host),
        2 | 4 => Ok(dev),
        _ => Err(INVALID_VALUE),
    }
}

fn copy2d(p: *const Memcpy2D, stream: Handle, sync: bool) -> CUresult {
    // SAFETY: p is null or a CUDA_MEMCPY2D (API contract).
    let Some(c) = (unsafe { p.as_ref() }).copied() else {
        return INVALID_VALUE;
    };
    with(|d| {
        let src = base(c.src_memory_type, c.src_host as u64, c.src_device)?;
        let dst = base(c.dst_memory_type, c.dst_host as u64, c.dst_device)?;
        let w = c.width_in_bytes;
        if c.height > 0 && (c.src_pitch < w || c.dst_pitch < w) {
            return Err(INVALID_VALUE);
        }
        let src = src + (c.src_y * c.src_pitch + c.src_x_in_bytes) as u64;
        let dst = dst + (c.dst_y * c.dst_pitch + c.dst_x_in_bytes) as u64;
        // Contiguous rows are one copy; otherwise one per row, on the same stream.
        if c.src_pitch == w && c.dst_pitch == w {
            return crate::copy(d, dst, src, w * c.height, stream as u64, sync);
        }
        for row in 0..c.height as u64 {
            crate::copy(
                d,
                dst + row * c.dst_pitch as u64,
                src + row * c.src_pitch as u64,
                w,
                stream as u64,
                sync,
            )?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy2DAsync_v2(p: *const Memcpy2D, stream: Handle) -> CUresult {
    copy2d(p, stream, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy2D_v2(p: *const Memcpy2D) -> CUresult {
    copy2d(p, std::ptr::null_mut(), true)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy2DUnaligned_v2(p: *const Memcpy2D) -> CUresult {
    copy2d(p, std::ptr::null_mut(), true)
}

// ==================================================================== cuGetProcAddress

/// (base name, first CUDA version of this ABI variant, function) for the calls above; looked up
/// after the main table.
pub fn procs() -> &'static [(&'static str, c_int, usize)] {
    static T: std::sync::LazyLock<Vec<(&'static str, c_int, usize)>> =
        std::sync::LazyLock::new(|| {
            macro_rules! p {
                ($base:literal, $ver:literal, $f:ident) => {
                    ($base, $ver, $f as *const () as usize)
                };
            }
            vec![
                p!(
                    "cuDevicePrimaryCtxGetState",
                    7000,
                    cuDevicePrimaryCtxGetState
                ),
                p!(
                    "cuDevicePrimaryCtxSetFlags",
                    11000,
                    cuDevicePrimaryCtxSetFlags_v2
                ),
                p!("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
                p!("cuCtxGetFlags", 7000, cuCtxGetFlags),
                p!("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
                p!(
                    "cuCtxGetStreamPriorityRange",
                    5050,
                    cuCtxGetStreamPriorityRange
                ),
                p!("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
                p!("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
                p!("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
                p!("cuLogsRegisterCallback", 12080, cuLogsRegisterCallback),
                p!("cuLogsUnregisterCallback", 12080, cuLogsUnregisterCallback),
                p!("cuStreamGetPriority", 5050, cuStreamGetPriority),
                p!(
                    "cuThreadExchangeStreamCaptureMode",
                    10010,
                    cuThreadExchangeStreamCaptureMode
                ),
                p!("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
                p!("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
                p!("cuStreamAddCallback", 5000, cuStreamAddCallback),
                p!("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
                p!("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
                p!("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
                p!("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
                p!("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
                p!("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
                p!("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
                p!(
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    6050,
                    cuOccupancyMaxActiveBlocksPerMultiprocessor
                ),
                p!(
                    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                    7000,
                    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
                ),
                p!("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
                p!("cuMemcpy2D", 3020, cuMemcpy2D_v2),
                p!("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2),
                p!("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
            ]
        });
    &T
}

// ==================================================================== module data

/// Device memory for a module's variable (`__cudaRegisterVar`): it takes device memory like the
/// program's allocations but is not one (no allocation is counted or injected).
#[unsafe(no_mangle)]
pub extern "C" fn simgpuAllocModuleData(size: usize, dptr: *mut CUdeviceptr) -> CUresult {
    with(|d| {
        let p = d.alloc_mapped(size as u64)?;
        d.counters.module_bytes += (size as u64).max(1).div_ceil(512) * 512;
        out(dptr, p)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn simgpuFreeModuleData(dptr: CUdeviceptr) -> CUresult {
    with(|d| d.free(dptr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_is_bounded_by_threads_registers_and_shared_memory() {
        let h100 = Device::for_test("h100");
        // 256 threads, 32 registers a thread: 8 blocks fill the 2048 threads of an SM.
        assert_eq!(occupancy(&h100, 0, 256, 0), Ok(8));
        assert_eq!(occupancy(&h100, 0, 1024, 0), Ok(2));
        assert_eq!(occupancy(&h100, 0, 32, 0), Ok(32), "the block limit");
        // 48 KiB of dynamic shared memory (+1 KiB reserved a block) of 228 KiB an SM.
        assert_eq!(occupancy(&h100, 0, 256, 48 << 10), Ok(4));
        let p100 = Device::for_test("p100");
        assert_eq!(occupancy(&p100, 0, 256, 48 << 10), Ok(1));
        assert_eq!(occupancy(&h100, 0, 0, 0), Err(INVALID_VALUE));
        assert_eq!(occupancy(&h100, 0, 2048, 0), Err(INVALID_VALUE));
    }

    #[test]
    fn every_attribute_torch_asks_is_answered_and_unknown_ones_are_invalid() {
        let d = Device::for_test("h100");
        for a in [
            8, 9, 10, 12, 19, 31, 32, 37, 38, 39, 40, 78, 81, 82, 83, 89, 95, 97, 106,
        ] {
            assert!(crate::props::attribute(&d, a, 0).is_ok(), "attribute {a}");
        }
        assert_eq!(crate::props::attribute(&d, 16, 0), Ok(132));
        assert_eq!(crate::props::attribute(&d, 97, 0), Ok(232448));
        assert_eq!(crate::props::attribute(&d, 0, 0), Err(INVALID_VALUE));
        assert_eq!(crate::props::attribute(&d, 9999, 0), Err(INVALID_VALUE));
        let p = Device::for_test("p100");
        assert_eq!(crate::props::attribute(&p, 97, 0), Ok(49152));
        assert_eq!(
            crate::props::attribute(&p, 120, 0),
            Ok(0),
            "no clusters before 9.0"
        );
    }

    #[test]
    fn cu_get_proc_address_finds_these_calls() {
        for name in [
            c"cuDevicePrimaryCtxGetState",
            c"cuLogsRegisterCallback",
            c"cuPointerGetAttributes",
            c"cuLaunchHostFunc",
        ] {
            assert!(crate::lookup(name, 13020).0.is_some(), "{name:?}");
        }
        assert_eq!(
            crate::lookup(c"cuLogsRegisterCallback", 12000).1,
            2,
            "too old"
        );
    }

    /// PyTorch's c10 DriverAPI looks up its whole list of driver functions at once (at CUDA
    /// 12.0) the first time it needs one (an out-of-memory report), and stops at the first
    /// missing: every name on its required list is found.
    #[test]
    fn cu_get_proc_address_finds_pytorchs_driver_list() {
        for name in [
            c"cuDeviceGetAttribute",
            c"cuMemAddressReserve",
            c"cuMemRelease",
            c"cuMemMap",
            c"cuMemAddressFree",
            c"cuMemSetAccess",
            c"cuMemUnmap",
            c"cuMemCreate",
            c"cuMemGetAllocationGranularity",
            c"cuMemExportToShareableHandle",
            c"cuMemImportFromShareableHandle",
            c"cuMemsetD32Async",
            c"cuStreamWriteValue32",
            c"cuGetErrorString",
            c"cuMemGetAddressRange",
            c"cuMemRetainAllocationHandle",
            c"cuMemGetAllocationPropertiesFromHandle",
            c"cuCtxGetCurrent",
            c"cuCtxSetCurrent",
            c"cuCtxPushCurrent",
            c"cuCtxPopCurrent",
            c"cuDeviceGet",
        ] {
            assert!(crate::lookup(name, 12000).0.is_some(), "{name:?}");
        }
    }

    #[test]
    fn an_address_range_is_its_allocation() {
        let _turn = crate::modules::tests::launching();
        let mut a = 0u64;
        assert_eq!(crate::cuMemAlloc_v2(&mut a, 3 << 20), 0);
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, &mut size, a + 12345), 0);
        assert_eq!((base, size), (a, 3 << 20));
        // Each output is optional.
        assert_eq!(
            cuMemGetAddressRange_v2(std::ptr::null_mut(), &mut size, a),
            0
        );
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, std::ptr::null_mut(), a),
            0
        );
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, a + (3 << 20)),
            NOT_FOUND,
            "past its end"
        );
        assert_eq!(crate::cuMemFree_v2(a), 0);
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, a),
            NOT_FOUND,
            "freed"
        );
    }

    #[test]
    fn a_2d_copy_description_has_cuda_h_layout() {
        use cudarc::driver::sys as drv;
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<Memcpy2D>(), size_of::<drv::CUDA_MEMCPY2D>());
        assert_eq!(
            offset_of!(Memcpy2D, dst_device),
            offset_of!(drv::CUDA_MEMCPY2D, dstDevice)
        );
        assert_eq!(
            offset_of!(Memcpy2D, height),
            offset_of!(drv::CUDA_MEMCPY2D, Height)
        );
    }
}
