//! State the sub-libraries share. Like NVIDIA's, our cuDNN is several libraries: a handle made by
//! `libcudnn_graph.so.9` is used by `libcudnn_cnn.so.9`, a tensor descriptor made by
//! `libcudnn_ops.so.9` too. Each library links this crate, so each has its own copy of every
//! static; the one copy that counts is `libcudnn_graph.so.9`'s, which it exports as
//! `simgpu_cudnn_shared` and the others find with `dlopen` + `dlsym` (as NVIDIA's ops and cnn
//! libraries depend on the graph library). All copies come from one build of this crate, so the
//! type is the same; a magic number and the size guard against a stale library beside us.

use crate::state::Obj;
use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::{LazyLock, Mutex, OnceLock};

/// The graph library's export that hands out its state.
pub const EXPORT: &CStr = c"simgpu_cudnn_shared";
const MAGIC: u64 = 0x5349_4d44_4e4e_0001;

pub struct Shared {
    magic: u64,
    size: usize,
    /// Handles and legacy descriptors, by address.
    pub objs: Mutex<HashMap<usize, Obj>>,
    /// The message of the last failed call (cudnnGetLastErrorString).
    pub last_error: Mutex<String>,
}

static OWN: LazyLock<Shared> = LazyLock::new(|| Shared {
    magic: MAGIC,
    size: std::mem::size_of::<Shared>(),
    objs: Mutex::new(HashMap::new()),
    last_error: Mutex::new(String::new()),
});

/// This copy's state: what `libcudnn_graph.so.9` exports.
pub fn own() -> *const c_void {
    &*OWN as *const Shared as *const c_void
}

/// The state every sub-library uses: the graph library's, or this copy's when the graph library
/// cannot be found (a unit test, or a sub-library opened alone without its siblings).
pub fn shared() -> &'static Shared {
    static P: OnceLock<usize> = OnceLock::new();
    let p = *P.get_or_init(|| find().unwrap_or(own() as usize));
    // SAFETY: either our own static or the graph library's, checked by `find` to be a Shared of
    // this build; libraries are never unloaded while their objects are in use.
    unsafe { &*(p as *const Shared) }
}

fn find() -> Option<usize> {
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol is `extern "C" fn() -> *const
    // c_void` (the graph library's `simgpu_cudnn_shared`).
    unsafe {
        let so = c"libcudnn_graph.so.9";
        let mut h = libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if h.is_null() {
            h = libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        }
        if h.is_null() {
            return None;
        }
        let f = libc::dlsym(h, EXPORT.as_ptr());
        if f.is_null() {
            return None;
        }
        let f = std::mem::transmute::<*mut c_void, extern "C" fn() -> *const c_void>(f);
        let p = f() as *const Shared;
        if p.is_null() || (*p).magic != MAGIC || (*p).size != std::mem::size_of::<Shared>() {
            eprintln!("simgpu cudnn: libcudnn_graph.so.9 is from another build; using own state");
            return None;
        }
        Some(p as usize)
    }
}
