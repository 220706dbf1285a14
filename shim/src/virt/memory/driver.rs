//! The allocator's helpers over the driver calls it makes for itself (events, waits between
//! streams, error names, the allocation properties it maps with): the real functions of the FFI
//! table, never our hooks.

use crate::ffi::call;
use crate::ffi::cuda::AllocProp;
use crate::ffi::table;
use std::collections::HashSet;
use std::ffi::{CStr, c_int, c_void};

pub(super) type P = *mut c_void;

pub(super) const OUT_OF_MEMORY: c_int = 2;

/// The device the process's memory is on: its current context's when first asked (the
/// allocator is made by the process's first allocation, in the thread that works on the
/// device), 0 if the driver cannot say. One process, one device: as torchrun runs ranks.
pub(super) fn device() -> c_int {
    use std::sync::atomic::{AtomicI32, Ordering};
    static DEVICE: AtomicI32 = AtomicI32::new(-1);
    let d = DEVICE.load(Ordering::Acquire);
    if d >= 0 {
        return d;
    }
    let mut dev = 0;
    if call!(cuCtxGetDevice(&mut dev)).is_err() || dev < 0 {
        return 0;
    }
    DEVICE.store(dev, Ordering::Release);
    dev
}

pub(super) fn prop() -> AllocProp {
    AllocProp {
        type_: 1,
        handle_types: 0,
        location_type: 1,
        location_id: device(),
        win32: std::ptr::null_mut(),
        flags: [0; 8],
    }
}

pub(super) fn event() -> Option<usize> {
    event_flags(2)
}

/// An event that can time (CU_EVENT_DEFAULT) or not (CU_EVENT_DISABLE_TIMING).
pub(super) fn event_flags(flags: u32) -> Option<usize> {
    let mut e: P = std::ptr::null_mut();
    call!(cuEventCreate(&mut e, flags)).ok()?;
    Some(e as usize)
}

pub(super) fn destroy_event(e: usize) {
    let _ = call!(cuEventDestroy_v2(e as P));
}

pub(super) fn record(e: usize, stream: u64) -> Result<(), c_int> {
    call!(cuEventRecord(e as P, stream as P))
}

pub(super) fn sync_event(e: usize) {
    let _ = call!(cuEventSynchronize(e as P));
}

pub(super) fn done(e: usize) -> bool {
    call!(cuEventQuery(e as P)).is_ok()
}

/// Whether timed event `a` completed after timed event `b`, by the device's clock; None while
/// either is still to come. Without timing (an error), true: the caller's cautious answer.
pub(super) fn finished_after(a: usize, b: usize) -> Option<bool> {
    if !done(a) || !done(b) {
        return None;
    }
    let mut ms = 0f32;
    match call!(cuEventElapsedTime(&mut ms, b as P, a as P)) {
        Ok(()) => Some(ms > 0.0),
        Err(_) => Some(true),
    }
}

/// Makes `to` wait for everything issued so far on each of `from`.
pub(super) fn wait_for(to: usize, from: &HashSet<u64>) {
    let streams: Vec<u64> = if from.is_empty() {
        vec![0]
    } else {
        from.iter().copied().collect()
    };
    for s in streams {
        if let Some(e) = event() {
            if record(e, s).is_ok() {
                let _ = call!(cuStreamWaitEvent(to as P, e as P, 0));
            }
            destroy_event(e);
        }
    }
}

/// A driver error as the driver names it, with its number: `CUDA_ERROR_UNKNOWN (999)`.
pub(super) fn error_name(code: c_int) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    if call!(cuGetErrorName(code, &mut name)).is_ok() && !name.is_null() {
        // SAFETY: the driver returns a static NUL-terminated string.
        let n = unsafe { CStr::from_ptr(name) };
        return format!("{} ({code})", n.to_string_lossy());
    }
    format!("CUDA error {code}")
}

/// The runtime's own initialisation (`cudaFree(NULL)`), when a runtime is loaded.
pub(super) fn init_runtime() {
    if let Some(free) = table::cudaFree() {
        // SAFETY: the real cudaFree(void*); freeing NULL only initialises the runtime.
        let _ = unsafe { free(std::ptr::null_mut()) };
    }
}
