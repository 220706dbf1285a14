//! `libcudnn_graph.so.9` of the simulated GPU: handles, versions and errors, and the backend
//! (graph) API. NVIDIA's `libcudnn.so.9` forwards these calls here by name; the other
//! sub-libraries find the state they share with this one through `simgpu_cudnn_shared`.
#![allow(non_snake_case)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

mod backend;

use simgpu_cudnn_core::*;

// ==================================================================== handles and versions

/// Where the other sub-libraries find the state they share with this one (see core's `shared`).
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_cudnn_shared() -> *const c_void {
    shared::own()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetVersion() -> usize {
    VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetErrorString(s: Status) -> *const c_char {
    status_name(s).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetCudartVersion() -> usize {
    CUDART_VERSION
}

/// libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetProperty(ty: c_int, value: *mut c_int) -> Status {
    run(|| {
        let v = match ty {
            0 => VERSION / 10000,
            1 => VERSION / 100 % 100,
            2 => VERSION % 100,
            _ => return Err(BAD_PARAM),
        };
        put(value, v as c_int)
    })
}

/// The message of the last failed call, cut to `max` bytes with its NUL.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetLastErrorString(out: *mut c_char, max: usize) {
    if out.is_null() || max == 0 {
        return;
    }
    let msg = std::mem::take(
        &mut *shared::shared()
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    let n = msg.len().min(max - 1);
    // SAFETY: out holds `max` bytes (API contract); n + 1 <= max.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), out as *mut u8, n);
        *out.add(n) = 0;
    }
}

/// Each sub-library checks that its siblings are the same version: ours are built together.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnGraphVersionCheck() -> Status {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreate(h: *mut Handle) -> Status {
    if sim().is_none() {
        return NOT_INITIALIZED;
    }
    create(h, Obj::Handle { stream: 0 })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroy(h: Handle) -> Status {
    match get(h) {
        Ok(Obj::Handle { .. }) => destroy(h),
        _ => BAD_PARAM,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetStream(h: Handle, s: Handle) -> Status {
    run(|| {
        handle_stream(h)?;
        set(h, Obj::Handle { stream: s as usize });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetStream(h: Handle, s: *mut Handle) -> Status {
    run(|| put(s, handle_stream(h)?))
}

/// Our hand-written ABI against cudarc's bindings, generated from NVIDIA's cuDNN 9 headers.
#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::cudnn::sys as dnn;

    #[test]
    fn status_codes() {
        use dnn::cudnnStatus_t as S;
        for (ours, theirs) in [
            (SUCCESS, S::CUDNN_STATUS_SUCCESS),
            (NOT_INITIALIZED, S::CUDNN_STATUS_NOT_INITIALIZED),
            (BAD_PARAM, S::CUDNN_STATUS_BAD_PARAM),
            (
                BAD_PARAM_NULL_POINTER,
                S::CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
            ),
            (
                BAD_PARAM_SIZE_INSUFFICIENT,
                S::CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
            ),
            (NOT_SUPPORTED, S::CUDNN_STATUS_NOT_SUPPORTED),
            (
                NOT_SUPPORTED_DATA_TYPE,
                S::CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
            ),
            (INTERNAL_ERROR, S::CUDNN_STATUS_INTERNAL_ERROR),
            (
                DEVICE_ALLOCATION_FAILED,
                S::CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
            ),
            (EXECUTION_FAILED, S::CUDNN_STATUS_EXECUTION_FAILED),
            (
                EXECUTION_FAILED_CUDA_DRIVER,
                S::CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
            ),
        ] {
            assert_eq!(ours, theirs as i32, "{theirs:?}");
            assert_eq!(
                // SAFETY: cudnnGetErrorString returns a static NUL-terminated string.
                unsafe { CStr::from_ptr(cudnnGetErrorString(ours)) }
                    .to_str()
                    .unwrap(),
                format!("{theirs:?}")
            );
        }
    }
}
