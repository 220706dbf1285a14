//! The runtime's registration of a program's kernels: `__cudaRegisterFatBinary` (each fatbin a
//! library embeds, at its load) and `__cudaRegisterFunction` (each kernel's host stub and
//! name), so that a launched kernel's PTX can be read ([`crate::access::fatbins`]). Nothing is
//! read at registration: the program's fatbins stay where they are, and only the PTX of a
//! kernel launched is decompressed, when its launch is first read.

use super::Entry;
use crate::ffi::real::CUDART;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

type RegisterFatBinary = unsafe extern "C" fn(*mut c_void) -> *mut *mut c_void;
type UnregisterFatBinary = unsafe extern "C" fn(*mut *mut c_void);
type RegisterFunction = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *mut c_char,
    *const c_char,
    c_int,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_int,
);

type GetKernel = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;

pub static TABLE: [Entry; 4] = [
    Entry::new(c"__cudaRegisterFatBinary", "", CUDART, {
        fn addr() -> usize {
            __cudaRegisterFatBinary as *const () as usize
        }
        addr
    }),
    Entry::new(c"__cudaUnregisterFatBinary", "", CUDART, {
        fn addr() -> usize {
            __cudaUnregisterFatBinary as *const () as usize
        }
        addr
    }),
    Entry::new(c"__cudaRegisterFunction", "", CUDART, {
        fn addr() -> usize {
            __cudaRegisterFunction as *const () as usize
        }
        addr
    }),
    Entry::new(c"__cudaGetKernel", "", CUDART, {
        fn addr() -> usize {
            __cudaGetKernel as *const () as usize
        }
        addr
    }),
];

/// The fatbin's handle, as the runtime gives it; what the program registers is noted.
///
/// # Safety
/// As the runtime's own: `wrapper` is the program's fatbin wrapper.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFatBinary(wrapper: *mut c_void) -> *mut *mut c_void {
    let p = TABLE[0].real();
    if p == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: p is the real __cudaRegisterFatBinary, of this signature.
    let real: RegisterFatBinary = unsafe { std::mem::transmute::<usize, RegisterFatBinary>(p) };
    // SAFETY: the caller's wrapper, passed through unchanged.
    let handle = unsafe { real(wrapper) };
    if !handle.is_null() && !crate::core::state::config().disable {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            crate::access::fatbins::registered(handle as usize, wrapper as usize)
        }));
    }
    handle
}

/// # Safety
/// As the runtime's own: `handle` is one `__cudaRegisterFatBinary` returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let stubs = crate::access::fatbins::unregistered(handle as usize);
        crate::access::launch::forget_functions(&stubs);
    }));
    let p = TABLE[1].real();
    if p != 0 {
        // SAFETY: p is the real __cudaUnregisterFatBinary, of this signature.
        let real: UnregisterFatBinary =
            unsafe { std::mem::transmute::<usize, UnregisterFatBinary>(p) };
        // SAFETY: the caller's handle, passed through unchanged.
        unsafe { real(handle) };
    }
}

/// # Safety
/// As the runtime's own: `handle` from `__cudaRegisterFatBinary`, `host_fun` the kernel's host
/// stub, `device_name` its NUL-terminated mangled name.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    device_fun: *mut c_char,
    device_name: *const c_char,
    thread_limit: c_int,
    tid: *mut c_void,
    bid: *mut c_void,
    block: *mut c_void,
    grid: *mut c_void,
    wsize: *mut c_int,
) {
    let p = TABLE[2].real();
    if p != 0 {
        // SAFETY: p is the real __cudaRegisterFunction, of this signature.
        let real: RegisterFunction = unsafe { std::mem::transmute::<usize, RegisterFunction>(p) };
        // SAFETY: the caller's arguments, passed through unchanged.
        unsafe {
            real(
                handle,
                host_fun,
                device_fun,
                device_name,
                thread_limit,
                tid,
                bid,
                block,
                grid,
                wsize,
            )
        };
    }
    if !device_name.is_null() && !crate::core::state::config().disable {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the runtime's contract: a NUL-terminated name that lives with the module.
            let name = unsafe { std::ffi::CStr::from_ptr(device_name) };
            crate::access::fatbins::function(handle as usize, host_fun as usize, name)
        }));
    }
}

/// CUDA 13's `<<<>>>`: the kernel handle (`cudaKernel_t`) for a host stub, which the stub then
/// launches with `__cudaLaunchKernel`; Marmoset keeps which stub each handle stands for.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaGetKernel(kernel: *mut *mut c_void, entry: *const c_void) -> c_int {
    let p = TABLE[3].real();
    if p == 0 {
        // cudaErrorInitializationError: no runtime is loaded to answer.
        return 3;
    }
    // SAFETY: p is the real __cudaGetKernel, whose signature this is.
    let real: GetKernel = unsafe { std::mem::transmute::<usize, GetKernel>(p) };
    // SAFETY: the caller's arguments, forwarded unchanged.
    let status = unsafe { real(kernel, entry) };
    if status == 0 && !kernel.is_null() && !crate::core::state::config().disable {
        // SAFETY: on success the runtime wrote the handle through the non-null pointer.
        let k = unsafe { *kernel } as usize;
        let _ = catch_unwind(AssertUnwindSafe(|| {
            crate::access::fatbins::kernel(k, entry as usize)
        }));
    }
    status
}
