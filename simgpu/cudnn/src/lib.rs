//! `libcudnn.so.9` of the simulated GPU, shaped as NVIDIA's: a small dispatch library that
//! exports the API and finds each function, on its first call, in a sub-library with
//! `dlopen(soname)` + `dlsym(handle, "exact API name")`, then forwards to it. An interposer sees
//! what it would see under the real library: the program's call lands here, and this library's
//! own `dlsym` look-ups go through whatever `dlsym` the process has (an interposer's included).
//!
//! The forwarders are generated (build.rs) from the sub-libraries' sources; a name a program may
//! import that no sub-library has answers CUDNN_STATUS_NOT_SUPPORTED, and says so once on stderr
//! when SIMGPU_LOG=debug.
#![allow(non_snake_case)]
// The forwarders pass their arguments on untouched: the pointer contracts are the callee's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

use std::collections::HashSet;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

type Status = c_int;
type Handle = *mut c_void;
/// The algorithm-performance structs travel by pointer only.
type AlgoPerf = c_void;

const NOT_SUPPORTED: Status = 3000;

/// The sub-libraries, indexed as build.rs numbers them.
const SUBLIBS: [&CStr; 3] = [
    c"libcudnn_graph.so.9",
    c"libcudnn_ops.so.9",
    c"libcudnn_cnn.so.9",
];

/// Handles of the opened sub-libraries (0: not yet).
static HANDLES: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

fn sublib(i: usize) -> Option<*mut c_void> {
    let h = HANDLES[i].load(Ordering::Acquire);
    if h != 0 {
        return Some(h as *mut c_void);
    }
    // SAFETY: dlopen with a NUL-terminated soname; found through our RUNPATH ($ORIGIN) like the
    // real dispatcher finds its siblings. Opening twice only bumps a reference count.
    let h = unsafe { libc::dlopen(SUBLIBS[i].as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return None;
    }
    HANDLES[i].store(h as usize, Ordering::Release);
    Some(h)
}

/// A forwarder's resolved target.
struct Slot(AtomicUsize);

impl Slot {
    const fn new() -> Self {
        Slot(AtomicUsize::new(0))
    }

    fn resolve(&self, lib: usize, name: &CStr) -> Option<*mut c_void> {
        let p = self.0.load(Ordering::Acquire);
        if p != 0 {
            return Some(p as *mut c_void);
        }
        let h = sublib(lib)?;
        // SAFETY: the public dlsym, on purpose (NVIDIA's dispatcher calls it the same way), with
        // a handle from dlopen and a NUL-terminated name.
        let f = unsafe { libc::dlsym(h, name.as_ptr()) };
        if f.is_null() {
            return None;
        }
        self.0.store(f as usize, Ordering::Release);
        Some(f)
    }
}

/// What a call answers when nothing implements it.
trait Fallback {
    fn fallback() -> Self;
}

impl Fallback for Status {
    fn fallback() -> Self {
        NOT_SUPPORTED
    }
}

impl Fallback for usize {
    fn fallback() -> Self {
        0
    }
}

impl Fallback for *const c_char {
    fn fallback() -> Self {
        c"CUDNN_STATUS_NOT_SUPPORTED".as_ptr()
    }
}

impl Fallback for *const c_void {
    fn fallback() -> Self {
        std::ptr::null()
    }
}

impl Fallback for () {
    fn fallback() -> Self {}
}

fn unresolved<T: Fallback>(name: &CStr) -> T {
    static SEEN: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Default::default);
    if std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug")
        && SEEN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.as_ptr() as usize)
    {
        eprintln!(
            "simgpu cudnn: {} is not simulated: CUDNN_STATUS_NOT_SUPPORTED",
            name.to_string_lossy()
        );
    }
    T::fallback()
}

include!(concat!(env!("OUT_DIR"), "/dispatch.rs"));
