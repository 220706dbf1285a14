//! `libcublas.so.13` of the simulated GPU: handles with their stream, workspace, math mode,
//! pointer mode and SM-count target, and the GEMMs torch calls ([`gemm`]: `cublasSgemm_v2`,
//! `cublasGemmEx`, the strided-batched and pointer-array batched forms, GEMV), with the real
//! names, argument layouts and cuBLAS status codes.
//!
//! As the real library, it rests on libcublasLt.so.13: a cuBLAS handle is a cuBLASLt handle
//! (created there with `cublasLtCreate`, so torch's cast of one to the other works), and the
//! arithmetic and timing are the shared engine of `simgpu_blas`.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

mod gemm;

use simgpu_blas::driver::sim;
use simgpu_blas::types::*;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

type Handle = *mut c_void;

/// The version reported: cuBLAS 13.2.0 (as libcublasLt; assumption: the patch level).
pub const VERSION: c_int = 130200;

/// What a handle holds.
#[derive(Debug, Clone, Copy)]
struct State {
    stream: usize,
    workspace: usize,
    workspace_bytes: usize,
    /// Whether the caller set a workspace (else the library's own default applies).
    user_workspace: bool,
    math: c_int,
    pointer_mode: c_int,
    sm_count: c_int,
    atomics: c_int,
}

static HANDLES: LazyLock<Mutex<HashMap<usize, State>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn handles() -> MutexGuard<'static, HashMap<usize, State>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

/// An unknown or destroyed handle is CUBLAS_STATUS_NOT_INITIALIZED, as in the real library.
fn state(h: Handle) -> Result<State, Status> {
    handles().get(&(h as usize)).copied().ok_or(NOT_INITIALIZED)
}

fn update(h: Handle, f: impl FnOnce(&mut State) -> Result<(), Status>) -> Status {
    run(|| match handles().get_mut(&(h as usize)) {
        Some(s) => f(s),
        None => Err(NOT_INITIALIZED),
    })
}

/// Runs an API body: a panic becomes CUBLAS_STATUS_INTERNAL_ERROR with a message.
fn run(f: impl FnOnce() -> Result<(), Status>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("simgpu cublas: internal error (panic)");
            INTERNAL_ERROR
        }
    }
}

fn put<T>(p: *mut T, v: T) -> Result<(), Status> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null output pointer.
    unsafe { p.write(v) };
    Ok(())
}

type LtCreate = unsafe extern "C" fn(*mut Handle) -> Status;
type LtDestroy = unsafe extern "C" fn(Handle) -> Status;

/// cublasLtCreate / cublasLtDestroy of libcublasLt.so.13 (found beside this library).
fn lt() -> Option<&'static (LtCreate, LtDestroy)> {
    static L: OnceLock<Option<(LtCreate, LtDestroy)>> = OnceLock::new();
    L.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols have these signatures.
        unsafe {
            let h = libc::dlopen(c"libcublasLt.so.13".as_ptr(), libc::RTLD_NOW);
            if h.is_null() {
                eprintln!("simgpu cublas: cannot open libcublasLt.so.13");
                return None;
            }
            let sym = |n: &CStr| {
                let p = libc::dlsym(h, n.as_ptr());
                (!p.is_null()).then_some(p)
            };
            Some((
                std::mem::transmute::<*mut c_void, LtCreate>(sym(c"cublasLtCreate")?),
                std::mem::transmute::<*mut c_void, LtDestroy>(sym(c"cublasLtDestroy")?),
            ))
        }
    })
    .as_ref()
}

// ==================================================================== handles and versions

#[unsafe(no_mangle)]
pub extern "C" fn cublasCreate_v2(out: *mut Handle) -> Status {
    run(|| {
        if out.is_null() {
            return Err(INVALID_VALUE);
        }
        sim().ok_or(NOT_INITIALIZED)?;
        let (create, _) = lt().ok_or(NOT_INITIALIZED)?;
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: cublasLtCreate writes a handle through a valid pointer.
        let r = unsafe { create(&mut h) };
        if r != SUCCESS {
            return Err(r);
        }
        handles().insert(
            h as usize,
            State {
                stream: 0,
                workspace: 0,
                workspace_bytes: 0,
                user_workspace: false,
                math: DEFAULT_MATH,
                pointer_mode: POINTER_MODE_HOST,
                sm_count: 0,
                atomics: 0,
            },
        );
        put(out, h)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDestroy_v2(h: Handle) -> Status {
    run(|| {
        handles().remove(&(h as usize)).ok_or(NOT_INITIALIZED)?;
        let (_, destroy) = lt().ok_or(NOT_INITIALIZED)?;
        // SAFETY: the handle came from cublasLtCreate and is destroyed once.
        match unsafe { destroy(h) } {
            SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetVersion_v2(h: Handle, v: *mut c_int) -> Status {
    run(|| {
        state(h)?;
        put(v, VERSION)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetProperty(kind: c_int, v: *mut c_int) -> Status {
    run(|| {
        let x = match kind {
            0 => VERSION / 10000,
            1 => VERSION / 100 % 100,
            2 => VERSION % 100,
            _ => return Err(INVALID_VALUE),
        };
        put(v, x)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetCudartVersion() -> usize {
    13020
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusName(s: Status) -> *const c_char {
    status_name(s).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusString(s: Status) -> *const c_char {
    status_name(s).as_ptr()
}

// ==================================================================== handle state

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetStream_v2(h: Handle, stream: *mut c_void) -> Status {
    update(h, |s| {
        s.stream = stream as usize;
        // A new stream drops a user workspace (cuBLAS documents resetting it to the default).
        if s.user_workspace {
            s.user_workspace = false;
            s.workspace = 0;
            s.workspace_bytes = 0;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStream_v2(h: Handle, stream: *mut *mut c_void) -> Status {
    run(|| put(stream, state(h)?.stream as *mut c_void))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetWorkspace_v2(h: Handle, ws: *mut c_void, bytes: usize) -> Status {
    update(h, |s| {
        // The workspace must be 256-byte aligned; none (NULL) with size 0 restores the default.
        if !(ws as usize).is_multiple_of(256) || (ws.is_null() && bytes > 0) {
            return Err(INVALID_VALUE);
        }
        s.workspace = ws as usize;
        s.workspace_bytes = bytes;
        s.user_workspace = !ws.is_null();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetMathMode(h: Handle, mode: c_int) -> Status {
    update(h, |s| {
        let base = mode & !DISALLOW_REDUCED_PRECISION_REDUCTION;
        let known = [
            DEFAULT_MATH,
            TENSOR_OP_MATH,
            PEDANTIC_MATH,
            TF32_TENSOR_OP_MATH,
            FP32_EMULATED_BF16X9_MATH,
            FP64_EMULATED_FIXEDPOINT_MATH,
        ];
        if !known.contains(&base) {
            return Err(INVALID_VALUE);
        }
        s.math = mode;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetMathMode(h: Handle, mode: *mut c_int) -> Status {
    run(|| put(mode, state(h)?.math))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetPointerMode_v2(h: Handle, mode: c_int) -> Status {
    update(h, |s| {
        if mode != POINTER_MODE_HOST && mode != POINTER_MODE_DEVICE {
            return Err(INVALID_VALUE);
        }
        s.pointer_mode = mode;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetPointerMode_v2(h: Handle, mode: *mut c_int) -> Status {
    run(|| put(mode, state(h)?.pointer_mode))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetSmCountTarget(h: Handle, count: c_int) -> Status {
    update(h, |s| {
        if count < 0 {
            return Err(INVALID_VALUE);
        }
        s.sm_count = count;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetSmCountTarget(h: Handle, count: *mut c_int) -> Status {
    run(|| put(count, state(h)?.sm_count))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetAtomicsMode(h: Handle, mode: c_int) -> Status {
    update(h, |s| {
        if !(0..=1).contains(&mode) {
            return Err(INVALID_VALUE);
        }
        s.atomics = mode;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetAtomicsMode(h: Handle, mode: *mut c_int) -> Status {
    run(|| put(mode, state(h)?.atomics))
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
