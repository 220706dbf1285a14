//! CUDA 13's kernel handles as the real runtime keeps them: `__cudaGetKernel` gives each
//! registered host stub a `cudaKernel_t` of its own, distinct from the stub, which
//! `__cudaLaunchKernel` takes and which calls wanting a host stub (`cudaGetFuncBySymbol`,
//! `cudaLaunchKernel`) refuse as an invalid device function. A program's `<<<>>>` launches go
//! through these handles, so an interposer that treats the handle as the stub fails here as it
//! does on a GPU.

use super::driver;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

#[derive(Default)]
struct Handles {
    by_stub: HashMap<usize, usize>,
    stubs: HashMap<usize, usize>,
}

static HANDLES: Mutex<Option<Handles>> = Mutex::new(None);

/// The handle of a registered stub, made at its first asking (a leaked word holding the stub:
/// an address no stub has, alive for the process like the runtime's own).
pub fn handle_of(stub: *const c_void) -> *const c_void {
    let mut g = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    let h = g.get_or_insert_with(Handles::default);
    let k = *h
        .by_stub
        .entry(stub as usize)
        .or_insert_with(|| Box::into_raw(Box::new(stub as usize)) as usize);
    h.stubs.insert(k, stub as usize);
    k as *const c_void
}

/// The host stub whose handle `k` is; None for anything `__cudaGetKernel` did not make.
pub fn stub_of(k: *const c_void) -> Option<*const c_void> {
    let g = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?
        .stubs
        .get(&(k as usize))
        .map(|&s| s as *const c_void)
}

/// Whether the driver knows `f` as a kernel (a registered host stub is one in the simulator),
/// asked without touching the runtime's last error.
pub fn registered(f: *const c_void) -> bool {
    let Some(d) = driver() else { return false };
    // SAFETY: cuFuncGetName was resolved from the driver for exactly this signature.
    let get: unsafe extern "C" fn(*mut *const c_char, *const c_void) -> c_int =
        unsafe { std::mem::transmute(d.fns["cuFuncGetName"]) };
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: a valid output pointer; the driver answers INVALID_HANDLE for unknown handles.
    unsafe { get(&mut name, f) == 0 }
}
