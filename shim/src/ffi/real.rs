//! Finding the real functions: lazily, through `dlopen(soname, RTLD_NOLOAD)` and the real `dlsym`
//! (libraries are opened after our constructor runs, and `dlsym(RTLD_NEXT, ...)` misses libraries
//! loaded `RTLD_LOCAL`). Pointers are kept in atomics, never under our own locks.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's own `dlsym`, never ours: `dlvsym(RTLD_NEXT, "dlsym", version)`.
pub fn dlsym_fn() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with NUL-terminated strings; RTLD_NEXT skips this library.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            if p != 0 {
                break;
            }
        }
        if p == 0 {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is glibc's dlsym, whose signature is DlsymFn.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// `name` in the first of `sonames` that is already loaded; else the next definition after us.
pub fn resolve(sonames: &[&CStr], name: &CStr) -> usize {
    let Some(dlsym) = dlsym_fn() else { return 0 };
    for so in sonames {
        // SAFETY: RTLD_NOLOAD only looks up an already loaded library; the reference it takes is
        // dropped with dlclose right after the look-up.
        unsafe {
            let h = libc::dlopen(so.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_NOW);
            if h.is_null() {
                continue;
            }
            let p = dlsym(h, name.as_ptr());
            libc::dlclose(h);
            if !p.is_null() {
                return p as usize;
            }
        }
    }
    // SAFETY: the real dlsym with RTLD_NEXT and a NUL-terminated name.
    unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// Whether a library of this soname is loaded in the process.
pub fn loaded(soname: &CStr) -> bool {
    // SAFETY: RTLD_NOLOAD only looks up an already loaded library; the reference it takes is
    // dropped with dlclose right after.
    unsafe {
        let h = libc::dlopen(soname.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

pub const CUDART: &[&CStr] = &[c"libcudart.so.13", c"libcudart.so.12"];
pub const CUDA: &[&CStr] = &[c"libcuda.so.1"];
pub const CUDNN: &[&CStr] = &[
    c"libcudnn.so.9",
    c"libcudnn_graph.so.9",
    c"libcudnn_ops.so.9",
    c"libcudnn_cnn.so.9",
];
pub const CUBLAS: &[&CStr] = &[c"libcublas.so.13", c"libcublas.so.12"];
pub const CUBLASLT: &[&CStr] = &[c"libcublasLt.so.13", c"libcublasLt.so.12"];
pub const NCCL: &[&CStr] = &[c"libnccl.so.2"];
