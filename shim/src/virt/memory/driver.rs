//! The driver calls Marmoset's allocator makes for itself (VMM ranges, events, copies): the
//! real functions, resolved once each, never through our hooks.

use crate::real::{CUDA, resolve};
use std::collections::HashSet;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(super) type P = *mut c_void;

pub(super) const OUT_OF_MEMORY: c_int = 2;

pub(super) fn slot(s: &AtomicUsize, name: &CStr) -> usize {
    let mut p = s.load(Ordering::Acquire);
    if p == 0 {
        p = resolve(CUDA, name);
        s.store(p, Ordering::Release);
    }
    p
}

/// Calls the real driver function `name` with these argument types; the driver's error (or
/// CUDA_ERROR_NOT_INITIALIZED when it cannot be found) as Err.
macro_rules! cu {
    ($name:literal ($($t:ty),*) ($($a:expr),*)) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::virt::memory::driver::slot(&SLOT, $name);
        if p == 0 {
            Err(3)
        } else {
            // SAFETY: the real driver function named $name has this signature; the arguments are
            // Marmoset's own (addresses it reserved, handles it created, buffers it owns).
            let r = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> std::ffi::c_int>(p)($($a),*) };
            if r == 0 { Ok(()) } else { Err(r) }
        }
    }};
}
pub(super) use cu;

#[repr(C)]
pub(super) struct AllocProp {
    pub(super) type_: u32,
    pub(super) handle_types: u32,
    pub(super) location_type: u32,
    pub(super) location_id: i32,
    pub(super) win32: P,
    pub(super) flags: [u8; 8],
}

#[repr(C)]
pub(super) struct AccessDesc {
    pub(super) location_type: u32,
    pub(super) location_id: i32,
    pub(super) flags: u32,
}

pub(super) fn prop() -> AllocProp {
    AllocProp {
        type_: 1,
        handle_types: 0,
        location_type: 1,
        location_id: 0,
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
    cu!(c"cuEventCreate" (*mut P, u32) (&mut e, flags)).ok()?;
    Some(e as usize)
}

pub(super) fn destroy_event(e: usize) {
    let _ = cu!(c"cuEventDestroy_v2"(P)(e as P));
}

pub(super) fn record(e: usize, stream: u64) -> Result<(), c_int> {
    cu!(c"cuEventRecord"(P, P)(e as P, stream as P))
}

pub(super) fn sync_event(e: usize) {
    let _ = cu!(c"cuEventSynchronize"(P)(e as P));
}

pub(super) fn done(e: usize) -> bool {
    cu!(c"cuEventQuery"(P)(e as P)).is_ok()
}

/// Whether timed event `a` completed after timed event `b`, by the device's clock; None while
/// either is still to come. Without timing (an error), true: the caller's cautious answer.
pub(super) fn finished_after(a: usize, b: usize) -> Option<bool> {
    if !done(a) || !done(b) {
        return None;
    }
    let mut ms = 0f32;
    match cu!(c"cuEventElapsedTime"(*mut f32, P, P)(&mut ms, b as P, a as P)) {
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
                let _ = cu!(c"cuStreamWaitEvent"(P, P, u32)(to as P, e as P, 0));
            }
            destroy_event(e);
        }
    }
}

/// A driver error as the driver names it, with its number: `CUDA_ERROR_UNKNOWN (999)`.
pub(super) fn error_name(code: c_int) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    if cu!(c"cuGetErrorName" (c_int, *mut *const std::ffi::c_char) (code, &mut name)).is_ok()
        && !name.is_null()
    {
        // SAFETY: the driver returns a static NUL-terminated string.
        let n = unsafe { CStr::from_ptr(name) };
        return format!("{} ({code})", n.to_string_lossy());
    }
    format!("CUDA error {code}")
}

/// The runtime's own initialisation (`cudaFree(NULL)`), when a runtime is loaded.
pub(super) fn init_runtime() {
    let p = resolve(crate::real::CUDART, c"cudaFree");
    if p != 0 {
        // SAFETY: the real cudaFree(void*); freeing NULL only initialises the runtime.
        let free: unsafe extern "C" fn(P) -> c_int = unsafe { std::mem::transmute(p) };
        // SAFETY: as above.
        let _ = unsafe { free(std::ptr::null_mut()) };
    }
}
