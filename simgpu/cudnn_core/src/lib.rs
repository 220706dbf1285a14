//! The shared core of the simulated cuDNN 9. NVIDIA's `libcudnn.so.9` is a small dispatcher that
//! finds each API function in a sub-library with `dlopen` + `dlsym`; ours is the same shape
//! (simgpu/cudnn), and this crate is what the sub-libraries have in common: the object
//! registry they share (`shared`), handles and legacy descriptors (`state`), the simulated
//! driver (`driver`), moving tensors and timing (`tensor`), convolutions with cuDNN's support
//! rules and workspaces (`convolution`), batch normalisation (`batchnorm`), and the float32
//! arithmetic (`math`). It exports no C symbol: each sub-library exports its own part of the API.
//!
//! Bytes move through the simulated driver (`simgpu_read` / `simgpu_write`), so an operation that
//! touches an unmapped range traps there; time goes on the handle's stream through
//! `simgpu_submit`, with durations from the performance model in `simgpu_model`.
#![allow(clippy::missing_safety_doc)]
// The C API's pointer arguments are checked for null; their contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

pub mod batchnorm;
pub mod convolution;
pub mod driver;
pub mod math;
pub mod shared;
pub mod state;
pub mod tensor;

pub use convolution::*;
pub use driver::*;
pub use math::{ConvSpec, Pool};
pub use simgpu_model::Profile;
pub use simgpu_model::conv::{self, Dir, Geom};
pub use state::*;
pub use std::collections::HashMap;
pub use std::ffi::{CStr, c_char, c_int, c_void};
pub use std::panic::{AssertUnwindSafe, catch_unwind};
pub use std::sync::{LazyLock, Mutex, OnceLock};
pub use tensor::*;

pub type Status = c_int;
pub type Handle = *mut c_void;

// cudnnStatus_t (cuDNN 9).
pub const SUCCESS: Status = 0;
pub const NOT_INITIALIZED: Status = 1001;
pub const BAD_PARAM: Status = 2000;
pub const BAD_PARAM_NULL_POINTER: Status = 2002;
pub const BAD_PARAM_NOT_FINALIZED: Status = 2004;
pub const BAD_PARAM_SIZE_INSUFFICIENT: Status = 2006;
pub const NOT_SUPPORTED: Status = 3000;
pub const NOT_SUPPORTED_GRAPH_PATTERN: Status = 3001;
pub const NOT_SUPPORTED_DATA_TYPE: Status = 3003;
pub const INTERNAL_ERROR: Status = 4000;
pub const DEVICE_ALLOCATION_FAILED: Status = 4004;
pub const EXECUTION_FAILED: Status = 5000;
pub const EXECUTION_FAILED_CUDA_DRIVER: Status = 5001;

/// The version the simulator reports: 9.26.0, what torch 2.15 (cu132) was built against and the
/// version of NVIDIA's wheel measured in docs (nvidia-cudnn-cu13 9.26.0.51). torch's own check
/// (`torch.backends.cudnn.version()`) refuses a runtime whose minor version is below the one it
/// was compiled with, so an older number would make unmodified scripts fail there.
pub const VERSION: usize = 9 * 10000 + 26 * 100;
/// The CUDA runtime version this cuDNN says it was built with (cudnnGetCudartVersion): 13.2.
pub const CUDART_VERSION: usize = 13020;

pub const DATA_FLOAT: c_int = 0;
pub const TENSOR_NCHW: c_int = 0;
pub const TENSOR_NHWC: c_int = 1;

/// The name cuDNN gives a status (cudnnGetErrorString).
pub fn status_name(s: Status) -> &'static CStr {
    match s {
        SUCCESS => c"CUDNN_STATUS_SUCCESS",
        NOT_INITIALIZED => c"CUDNN_STATUS_NOT_INITIALIZED",
        BAD_PARAM => c"CUDNN_STATUS_BAD_PARAM",
        BAD_PARAM_NULL_POINTER => c"CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
        BAD_PARAM_NOT_FINALIZED => c"CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
        BAD_PARAM_SIZE_INSUFFICIENT => c"CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
        NOT_SUPPORTED => c"CUDNN_STATUS_NOT_SUPPORTED",
        NOT_SUPPORTED_GRAPH_PATTERN => c"CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
        NOT_SUPPORTED_DATA_TYPE => c"CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
        INTERNAL_ERROR => c"CUDNN_STATUS_INTERNAL_ERROR",
        DEVICE_ALLOCATION_FAILED => c"CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
        EXECUTION_FAILED => c"CUDNN_STATUS_EXECUTION_FAILED",
        EXECUTION_FAILED_CUDA_DRIVER => c"CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
        _ => c"CUDNN_STATUS_UNKNOWN",
    }
}

/// Whether SIMGPU_LOG=debug asks the simulated cuDNN to say why calls fail.
pub fn debug() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug"))
}

/// Remembers why the last call failed, for cudnnGetLastErrorString.
pub fn record_error(msg: String) {
    *shared::shared()
        .last_error
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = msg;
}

/// Runs a cuDNN call body: panics become CUDNN_STATUS_INTERNAL_ERROR with a message.
pub fn run(f: impl FnOnce() -> Result<(), Status>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            record_error(status_name(e).to_string_lossy().into_owned());
            e
        }
        Err(_) => {
            eprintln!("simgpu cudnn: internal error (panic)");
            INTERNAL_ERROR
        }
    }
}

pub fn slice<'a, T>(p: *const T, n: usize) -> Result<&'a [T], Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: non-null pointer to `n` elements (the API's array arguments).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

pub fn put<T>(p: *mut T, v: T) -> Result<(), Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: non-null output pointer.
    unsafe { p.write(v) };
    Ok(())
}

pub fn scalar(p: *const c_void) -> Result<f32, Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: alpha/beta of float tensors point to a float (cuDNN's scaling parameter rule).
    Ok(unsafe { *(p as *const f32) })
}

/// Our hand-written ABI against cudarc's bindings, generated from NVIDIA's cuDNN 9 headers.
#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::cudnn::sys as dnn;
    use std::mem::{offset_of, size_of};

    #[test]
    fn enums() {
        assert_eq!(
            conv::FWD_ALGOS,
            dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_COUNT as usize
        );
        assert_eq!(
            conv::BWD_DATA_ALGOS,
            dnn::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT as usize
        );
        assert_eq!(
            conv::BWD_FILTER_ALGOS,
            dnn::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT as usize
        );
        use dnn::cudnnConvolutionBwdFilterAlgo_t as F;
        assert_eq!(F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING as usize, 6);
        assert_eq!(
            conv::method(conv::Dir::BwdFilter, 6),
            Some(conv::Method::FftTiling)
        );
        assert_eq!(
            conv::method(conv::Dir::BwdFilter, 3),
            Some(conv::Method::ReductionGemm)
        );
        assert_eq!(DATA_FLOAT, dnn::cudnnDataType_t::CUDNN_DATA_FLOAT as i32);
        assert_eq!(
            TENSOR_NHWC,
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC as i32
        );
        assert_eq!(0, dnn::cudnnConvolutionMode_t::CUDNN_CONVOLUTION as i32);
        assert_eq!(1, dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH as i32);
        assert_eq!(
            math::act::SWISH,
            dnn::cudnnActivationMode_t::CUDNN_ACTIVATION_SWISH as i32
        );
        assert_eq!(
            math::POOL_AVG_EXCLUDE_PAD,
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING as i32
        );
        assert_eq!(
            math::SOFTMAX_LOG,
            dnn::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_LOG as i32
        );
        assert_eq!(
            math::SOFTMAX_MODE_CHANNEL,
            dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_CHANNEL as i32
        );
    }

    #[test]
    fn perf_struct_layout() {
        type P = dnn::cudnnConvolutionFwdAlgoPerf_t;
        assert_eq!(size_of::<AlgoPerf>(), size_of::<P>());
        assert_eq!(offset_of!(AlgoPerf, time), offset_of!(P, time));
        assert_eq!(offset_of!(AlgoPerf, memory), offset_of!(P, memory));
        assert_eq!(offset_of!(AlgoPerf, math_type), offset_of!(P, mathType));
        assert_eq!(
            size_of::<AlgoPerf>(),
            size_of::<dnn::cudnnConvolutionBwdFilterAlgoPerf_t>()
        );
    }
}
