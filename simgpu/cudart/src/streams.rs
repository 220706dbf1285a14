//! Stream and event calls beyond create/sync/wait: priorities, capture state (the simulator
//! never captures: capture itself answers cudaErrorNotSupported), host functions and stream
//! callbacks, events recorded with flags.

use crate::*;

#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamGetPriority(s: Handle, prio: *mut c_int) -> Err {
    drv!("cuStreamGetPriority" (Handle, *mut c_int) (s, prio))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaThreadExchangeStreamCaptureMode(mode: *mut c_int) -> Err {
    drv!("cuThreadExchangeStreamCaptureMode" (*mut c_int) (mode))
}

/// `cudaStreamGetCaptureInfo` (CUDA 13: with edge data). Not capturing: the status is
/// cudaStreamCaptureStatusNone and the optional outputs are cleared.
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamGetCaptureInfo(
    s: Handle,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const Handle,
    edges: *mut *const c_void,
    ndeps: *mut usize,
) -> Err {
    if status.is_null() {
        return ret(INVALID_VALUE);
    }
    let r = drv!("cuStreamIsCapturing" (Handle, *mut c_int) (s, status));
    if r != SUCCESS {
        return r;
    }
    // SAFETY: each optional output is written only when non-null (API contract).
    unsafe {
        if !id.is_null() {
            *id = 0;
        }
        if !graph.is_null() {
            *graph = std::ptr::null_mut();
        }
        if !deps.is_null() {
            *deps = std::ptr::null();
        }
        if !edges.is_null() {
            *edges = std::ptr::null();
        }
        if !ndeps.is_null() {
            *ndeps = 0;
        }
    }
    SUCCESS
}

type HostFn = unsafe extern "C" fn(*mut c_void);
type StreamCallback = unsafe extern "C" fn(Handle, Err, *mut c_void);

#[unsafe(no_mangle)]
pub extern "C" fn cudaLaunchHostFunc(s: Handle, f: Option<HostFn>, user: *mut c_void) -> Err {
    drv!("cuLaunchHostFunc" (Handle, Option<HostFn>, *mut c_void) (s, f, user))
}

/// The driver calls back with a CUresult; the codes the simulator passes (success) are the same
/// numbers as cudaError_t.
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamAddCallback(
    s: Handle,
    f: Option<StreamCallback>,
    user: *mut c_void,
    flags: c_uint,
) -> Err {
    drv!("cuStreamAddCallback" (Handle, Option<StreamCallback>, *mut c_void, c_uint) (s, f, user, flags))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) -> Err {
    drv!("cuEventRecordWithFlags"(Handle, Handle, c_uint)(
        e, s, flags
    ))
}
