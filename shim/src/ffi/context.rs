//! The context Marmoset's own driver calls run in.
//!
//! Driver calls that work in a context (allocations, copies, streams, events, launches) fail
//! with CUDA_ERROR_INVALID_CONTEXT on a thread that has none current. The runtime binds its
//! primary context to a thread at the thread's first runtime call that needs one, so a
//! framework's fresh thread (PyTorch's autograd workers leave the device alone when it is
//! already the one they want) can reach a hook with no context yet: the hooked call is what
//! would have bound it, and Marmoset's work for it (making room, bringing tensors back,
//! rebuilding them) comes first.

use super::last_error::quietly;
use super::{call, table};
use crate::core::config::Level;
use crate::core::state::log;
use std::ffi::c_void;

/// Makes sure the calling thread has a context current: where it has none, binds the one the
/// runtime would bind there (`cudaFree(NULL)`, which initialises the runtime on the thread's
/// device), leaving the thread's last runtime error as it was. Does nothing where the driver
/// or the runtime is not loaded.
pub fn ensure() {
    let mut current: *mut c_void = std::ptr::null_mut();
    if call!(cuCtxGetCurrent(&mut current)).is_err() || !current.is_null() {
        return;
    }
    if let Some(free) = table::cudaFree() {
        // SAFETY: the real cudaFree(void*); freeing NULL only initialises the runtime and binds
        // its context to this thread.
        let status = quietly(|| unsafe { free(std::ptr::null_mut()) });
        log(
            Level::Debug,
            &format!(
                "context: a thread reached Marmoset with no context current; bound the runtime's (cudaFree(NULL) returned {status})"
            ),
        );
    }
}
