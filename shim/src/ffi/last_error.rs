//! The CUDA runtime keeps one error per thread that every failing call sets and that
//! `cudaGetLastError` returns and clears; frameworks read it after each kernel launch (PyTorch's
//! `C10_CUDA_KERNEL_LAUNCH_CHECK`) and fail the operation on anything but success. A runtime call
//! Marmoset makes for itself on the program's thread therefore leaves that error as it found it:
//! when the call fails and no error was pending before it, the error it left is taken back.

use super::table;
use std::ffi::c_int;

/// Runs `call` (a real runtime call made on Marmoset's behalf) and returns its status, leaving
/// the thread's last error as it was before.
pub fn quietly(call: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: cudaPeekAtLastError takes nothing and only reads the thread's state.
    let pending = table::cudaPeekAtLastError().map_or(0, |f| unsafe { f() });
    let status = call();
    if status != 0
        && pending == 0
        && let Some(clear) = table::cudaGetLastError()
    {
        // SAFETY: cudaGetLastError takes nothing; it resets the error this call left.
        unsafe { clear() };
    }
    status
}
