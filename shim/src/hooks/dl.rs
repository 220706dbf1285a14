//! Dynamic linking: the `dlsym` interposer (TensorFlow's RTLD_LOCAL trampolines, programs that
//! dlopen CUDA), the driver's `cuGetProcAddress(_v2)` and the runtime's
//! `cudaGetDriverEntryPoint(ByVersion)`: each returns our hook in place of a function we hook,
//! and teaches that hook where its real function is. `_exit` flushes the trace first.

use super::{Entry, driver_variant, find};
use crate::real::{CUDA, CUDART, dlsym_fn};
use crate::state;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

type GetProc =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type EntryPoint = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type EntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;

pub static TABLE: [Entry; 4] = [
    Entry::new(c"cuGetProcAddress", "cuGetProcAddress", CUDA, {
        fn addr() -> usize {
            cuGetProcAddress as *const () as usize
        }
        addr
    }),
    Entry::new(c"cuGetProcAddress_v2", "cuGetProcAddress", CUDA, {
        fn addr() -> usize {
            cuGetProcAddress_v2 as *const () as usize
        }
        addr
    }),
    Entry::new(c"cudaGetDriverEntryPoint", "", CUDART, {
        fn addr() -> usize {
            cudaGetDriverEntryPoint as *const () as usize
        }
        addr
    }),
    Entry::new(c"cudaGetDriverEntryPointByVersion", "", CUDART, {
        fn addr() -> usize {
            cudaGetDriverEntryPointByVersion as *const () as usize
        }
        addr
    }),
];

/// Replaces a real driver function the caller obtained by our hook of the same ABI variant;
/// anything we do not hook (or an unknown variant) is returned unchanged.
fn swap_driver_pointer(symbol: *const c_char, pfn: *mut *mut c_void) {
    if symbol.is_null() || pfn.is_null() || state::config().disable {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: pfn is the caller's output pointer, written by the real call.
        let real = unsafe { *pfn } as usize;
        if real == 0 {
            return;
        }
        // SAFETY: symbol is a NUL-terminated name (API contract).
        let base = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        if let Some(e) = driver_variant(base, real) {
            e.learn(real);
            // SAFETY: as above.
            unsafe { *pfn = (e.hook)() as *mut c_void };
        }
    }));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let p = TABLE[1].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cuGetProcAddress_v2.
    let real: GetProc = unsafe { std::mem::transmute::<usize, GetProc>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    let p = TABLE[0].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cuGetProcAddress (CUDA 11.3 signature).
    let real: GetProcV1 = unsafe { std::mem::transmute::<usize, GetProcV1>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let p = TABLE[2].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cudaGetDriverEntryPoint (CUDA 12 signature).
    let real: EntryPoint = unsafe { std::mem::transmute::<usize, EntryPoint>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let p = TABLE[3].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cudaGetDriverEntryPointByVersion.
    let real: EntryPointByVersion = unsafe { std::mem::transmute::<usize, EntryPointByVersion>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn);
    }
    r
}

/// The `dlsym` interposer. Exact names only; the real `dlsym` is always asked first, and a NULL
/// answer is returned as it is.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = dlsym_fn() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding the caller's arguments to glibc's dlsym.
    let p = unsafe { real(handle, symbol) };
    if p.is_null() || symbol.is_null() || state::config().disable {
        return p;
    }
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: symbol is a NUL-terminated name (dlsym's contract).
        let name = unsafe { CStr::from_ptr(symbol) };
        match find(name) {
            Some(e) => {
                e.learn(p as usize);
                (e.hook)() as *mut c_void
            }
            None => p,
        }
    }))
    .unwrap_or(p)
}

type ExitFn = unsafe extern "C" fn(c_int) -> !;

fn exit_via(name: &CStr, code: c_int) -> ! {
    crate::timing::drain(false);
    crate::trace::flush();
    let f = dlsym_fn()
        // SAFETY: the real dlsym with RTLD_NEXT finds libc's function of that name.
        .map(|d| unsafe { d(libc::RTLD_NEXT, name.as_ptr()) })
        .filter(|p| !p.is_null());
    match f {
        // SAFETY: libc's _exit / _Exit, which never return.
        Some(p) => unsafe { std::mem::transmute::<*mut c_void, ExitFn>(p)(code) },
        // SAFETY: the raw exit_group system call ends the process.
        None => unsafe {
            libc::syscall(libc::SYS_exit_group, code);
            libc::abort()
        },
    }
}

/// `_exit` skips atexit handlers: flush the trace first.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(code: c_int) -> ! {
    exit_via(c"_exit", code)
}

#[unsafe(no_mangle)]
pub extern "C" fn _Exit(code: c_int) -> ! {
    exit_via(c"_Exit", code)
}
