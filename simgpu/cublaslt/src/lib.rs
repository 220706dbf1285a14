//! `libcublasLt.so.13` of the simulated GPU: handles, matmul descriptors, matrix layouts and
//! preferences as opaque heap objects with cublasLt.h's attributes ([`attrs`]), the heuristic,
//! algorithm configuration and `cublasLtMatmul` with its epilogues ([`matmul`]), with the real
//! names, argument layouts and cuBLAS status codes.
//!
//! A cuBLAS handle is a cuBLASLt handle, as NVIDIA documents (torch casts one to the other): the
//! simulated libcublas creates its handles here, through `cublasLtCreate`.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

mod attrs;
mod matmul;

use attrs::{Kind, Obj};
use simgpu_blas::types::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, Mutex, MutexGuard};

type Handle = *mut c_void;

/// The version reported: cuBLAS 13.2.0, the one CUDA 13.2 ships (assumption: the patch level).
pub const VERSION: usize = 130200;
/// The CUDA runtime version cuBLASLt reports being built against (13.2).
const CUDART_VERSION: usize = 13020;

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Handle,
    Obj(Obj),
}

/// Live handles and objects, by address: an unknown or destroyed one is an error status, never
/// undefined behaviour.
static LIVE: LazyLock<Mutex<HashMap<usize, Entry>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn live() -> MutexGuard<'static, HashMap<usize, Entry>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs an API body: a panic becomes CUBLAS_STATUS_INTERNAL_ERROR with a message.
fn run(f: impl FnOnce() -> Result<(), Status>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("simgpu cublasLt: internal error (panic)");
            INTERNAL_ERROR
        }
    }
}

fn create(out: *mut Handle, e: Entry) -> Result<(), Status> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // An opaque heap object of the header's size class; only its address is used.
    let addr = Box::into_raw(Box::new([0u64; 8])) as usize;
    live().insert(addr, e);
    // SAFETY: non-null output pointer.
    unsafe { *out = addr as Handle };
    Ok(())
}

fn destroy(h: Handle, want: impl Fn(&Entry) -> bool) -> Result<(), Status> {
    let mut l = live();
    match l.get(&(h as usize)) {
        Some(e) if want(e) => {
            l.remove(&(h as usize));
            // SAFETY: the address came from Box::into_raw in `create` and is removed once.
            drop(unsafe { Box::from_raw(h as *mut [u64; 8]) });
            Ok(())
        }
        _ => Err(INVALID_VALUE),
    }
}

fn check_handle(h: Handle) -> Result<(), Status> {
    match live().get(&(h as usize)) {
        Some(Entry::Handle) => Ok(()),
        _ => Err(NOT_INITIALIZED),
    }
}

fn obj(h: *const c_void, kind: Kind) -> Result<Obj, Status> {
    match live().get(&(h as usize)) {
        Some(Entry::Obj(o)) if o.kind == kind => Ok(o.clone()),
        _ => Err(INVALID_VALUE),
    }
}

fn with_obj(h: *mut c_void, kind: Kind, f: impl FnOnce(&mut Obj) -> Result<(), Status>) -> Status {
    run(|| match live().get_mut(&(h as usize)) {
        Some(Entry::Obj(o)) if o.kind == kind => f(o),
        _ => Err(INVALID_VALUE),
    })
}

// ==================================================================== handles and versions

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtCreate(h: *mut Handle) -> Status {
    run(|| {
        simgpu_blas::driver::sim().ok_or(NOT_INITIALIZED)?;
        create(h, Entry::Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtDestroy(h: Handle) -> Status {
    run(|| destroy(h, |e| *e == Entry::Handle).map_err(|_| NOT_INITIALIZED))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetVersion() -> usize {
    VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetCudartVersion() -> usize {
    CUDART_VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetProperty(kind: c_int, value: *mut c_int) -> Status {
    run(|| {
        let v = match kind {
            0 => VERSION / 10000,
            1 => VERSION / 100 % 100,
            2 => VERSION % 100,
            _ => return Err(INVALID_VALUE),
        };
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null output pointer.
        unsafe { *value = v as c_int };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetStatusName(s: Status) -> *const c_char {
    status_name(s).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetStatusString(s: Status) -> *const c_char {
    status_name(s).as_ptr()
}

// ==================================================================== descriptors

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulDescCreate(d: *mut Handle, compute: c_int, scale: c_int) -> Status {
    run(|| {
        let mut o = Obj::new(Kind::Desc);
        o.put(attrs::DESC_COMPUTE_TYPE, compute as i64);
        o.put(attrs::DESC_SCALE_TYPE, scale as i64);
        create(d, Entry::Obj(o))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulDescDestroy(d: Handle) -> Status {
    run(|| destroy(d, |e| matches!(e, Entry::Obj(o) if o.kind == Kind::Desc)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulDescSetAttribute(
    d: Handle,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> Status {
    with_obj(d, Kind::Desc, |o| o.set_bytes(attr as u32, buf, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulDescGetAttribute(
    d: Handle,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Status {
    with_obj(d, Kind::Desc, |o| {
        o.get_bytes(attr as u32, buf, size, written)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatrixLayoutCreate(
    l: *mut Handle,
    dtype: c_int,
    rows: u64,
    cols: u64,
    ld: i64,
) -> Status {
    run(|| {
        let mut o = Obj::new(Kind::Layout);
        o.put(attrs::LAYOUT_TYPE, dtype as i64);
        o.put(attrs::LAYOUT_ROWS, rows as i64);
        o.put(attrs::LAYOUT_COLS, cols as i64);
        o.put(attrs::LAYOUT_LD, ld);
        create(l, Entry::Obj(o))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatrixLayoutDestroy(l: Handle) -> Status {
    run(|| destroy(l, |e| matches!(e, Entry::Obj(o) if o.kind == Kind::Layout)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatrixLayoutSetAttribute(
    l: Handle,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> Status {
    with_obj(l, Kind::Layout, |o| o.set_bytes(attr as u32, buf, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatrixLayoutGetAttribute(
    l: Handle,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Status {
    with_obj(l, Kind::Layout, |o| {
        o.get_bytes(attr as u32, buf, size, written)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulPreferenceCreate(p: *mut Handle) -> Status {
    run(|| create(p, Entry::Obj(Obj::new(Kind::Pref))))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulPreferenceDestroy(p: Handle) -> Status {
    run(|| destroy(p, |e| matches!(e, Entry::Obj(o) if o.kind == Kind::Pref)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulPreferenceSetAttribute(
    p: Handle,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> Status {
    with_obj(p, Kind::Pref, |o| o.set_bytes(attr as u32, buf, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulPreferenceGetAttribute(
    p: Handle,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Status {
    with_obj(p, Kind::Pref, |o| {
        o.get_bytes(attr as u32, buf, size, written)
    })
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
