//! The FFI layer: how Marmoset reaches the real CUDA-family libraries on its own behalf. It
//! imports only the core; every layer above that calls a real function does it through here.
//!
//! - [`real`]: finding a real function (the real `dlsym`, the libraries' sonames).
//! - [`table`]: every real function Marmoset calls itself, one line each with its library and C
//!   signature, resolved once; [`call!`] and [`call_why!`] call one and check its status.
//! - [`caller`]: whether an address lies in a CUDA-family library.
//! - [`last_error`]: Marmoset's own runtime calls leave the program's last error as it was.
//! - [`context`]: a context current on the thread before Marmoset's own driver calls.
//! - [`variant_pack`]: cuDNN variant packs as the program filled them.
//! - [`cuda`], [`cudnn`], [`cublas`]: the C types and ABI facts the table's callers share.
//! - [`cudnn_backend`]: the cuDNN backend API as Marmoset uses it (descriptors, attributes,
//!   variant packs) and the lives of execution plans, shared by μ-cuDNN and recomputation.
//!
//! The hook tables (`hooks/`) are another thing: the functions Marmoset exports and forwards.

pub mod caller;
pub mod context;
pub mod cublas;
pub mod cuda;
pub mod cudnn;
pub mod cudnn_backend;
pub mod last_error;
pub mod real;
pub mod table;
pub mod variant_pack;

/// Calls the real function `f` of the [`table`] with these arguments: `Ok(())` when it returns
/// 0, else `Err(status)`; `Err` of its library's "not initialised" status when the function
/// cannot be found.
macro_rules! call {
    ($f:ident($($a:expr),* $(,)?)) => {
        match $crate::ffi::table::$f() {
            // SAFETY: the table gives the real function's C signature; the arguments are
            // Marmoset's own (handles and descriptors it created, addresses it reserved or that
            // live allocations hold, buffers and scalars it owns), as each caller states.
            Some(f) => match unsafe { f($($a),*) } {
                0 => Ok(()),
                r => Err(r),
            },
            None => Err($crate::ffi::table::library::$f.unavailable),
        }
    };
}
pub(crate) use call;

/// [`call!`], with `Err` saying what failed: "`f` returned `status`", or "`library` has no `f`".
macro_rules! call_why {
    ($f:ident($($a:expr),* $(,)?)) => {
        match $crate::ffi::table::$f() {
            // SAFETY: as in `call!`.
            Some(f) => match unsafe { f($($a),*) } {
                0 => Ok(()),
                r => Err(format!("{} returned {r}", stringify!($f))),
            },
            None => Err(format!(
                "{} has no {}",
                $crate::ffi::table::library::$f.who,
                stringify!($f)
            )),
        }
    };
}
pub(crate) use call_why;
