//! The C ABI's integers: statuses and enums of cublas_api.h / cublasLt.h / library_types.h,
//! written by hand and cross-checked against cudarc's generated bindings in the tests.

use std::ffi::c_int;

pub type Status = c_int;

// cublasStatus_t
pub const SUCCESS: Status = 0;
pub const NOT_INITIALIZED: Status = 1;
pub const ALLOC_FAILED: Status = 3;
pub const INVALID_VALUE: Status = 7;
pub const ARCH_MISMATCH: Status = 8;
pub const MAPPING_ERROR: Status = 11;
pub const EXECUTION_FAILED: Status = 13;
pub const INTERNAL_ERROR: Status = 14;
pub const NOT_SUPPORTED: Status = 15;
pub const LICENSE_ERROR: Status = 16;

/// cublasStatus_t's names, as cublasGetStatusName / cublasLtGetStatusName give them.
pub fn status_name(s: Status) -> &'static std::ffi::CStr {
    match s {
        SUCCESS => c"CUBLAS_STATUS_SUCCESS",
        NOT_INITIALIZED => c"CUBLAS_STATUS_NOT_INITIALIZED",
        ALLOC_FAILED => c"CUBLAS_STATUS_ALLOC_FAILED",
        INVALID_VALUE => c"CUBLAS_STATUS_INVALID_VALUE",
        ARCH_MISMATCH => c"CUBLAS_STATUS_ARCH_MISMATCH",
        MAPPING_ERROR => c"CUBLAS_STATUS_MAPPING_ERROR",
        EXECUTION_FAILED => c"CUBLAS_STATUS_EXECUTION_FAILED",
        INTERNAL_ERROR => c"CUBLAS_STATUS_INTERNAL_ERROR",
        NOT_SUPPORTED => c"CUBLAS_STATUS_NOT_SUPPORTED",
        LICENSE_ERROR => c"CUBLAS_STATUS_LICENSE_ERROR",
        _ => c"CUBLAS_STATUS_UNKNOWN",
    }
}

// cudaDataType_t
pub const R_32F: c_int = 0;
pub const R_64F: c_int = 1;
pub const R_16F: c_int = 2;
pub const R_8I: c_int = 3;
pub const R_32I: c_int = 10;
pub const R_16BF: c_int = 14;

// cublasComputeType_t
pub const COMPUTE_16F: c_int = 64;
pub const COMPUTE_16F_PEDANTIC: c_int = 65;
pub const COMPUTE_32F: c_int = 68;
pub const COMPUTE_32F_PEDANTIC: c_int = 69;
pub const COMPUTE_64F: c_int = 70;
pub const COMPUTE_64F_PEDANTIC: c_int = 71;
pub const COMPUTE_32I: c_int = 72;
pub const COMPUTE_32I_PEDANTIC: c_int = 73;
pub const COMPUTE_32F_FAST_16F: c_int = 74;
pub const COMPUTE_32F_FAST_16BF: c_int = 75;
pub const COMPUTE_32F_FAST_TF32: c_int = 77;
pub const COMPUTE_32F_EMULATED_16BFX9: c_int = 78;
pub const COMPUTE_64F_EMULATED_FIXEDPOINT: c_int = 79;

// cublasOperation_t
pub const OP_N: c_int = 0;
pub const OP_T: c_int = 1;
pub const OP_C: c_int = 2;
pub const OP_CONJG: c_int = 3;

// cublasPointerMode_t (cuBLASLt's cublasLtPointerMode_t shares HOST and DEVICE).
pub const POINTER_MODE_HOST: c_int = 0;
pub const POINTER_MODE_DEVICE: c_int = 1;

// cublasMath_t
pub const DEFAULT_MATH: c_int = 0;
pub const TENSOR_OP_MATH: c_int = 1;
pub const PEDANTIC_MATH: c_int = 2;
pub const TF32_TENSOR_OP_MATH: c_int = 3;
pub const FP32_EMULATED_BF16X9_MATH: c_int = 4;
pub const FP64_EMULATED_FIXEDPOINT_MATH: c_int = 8;
pub const DISALLOW_REDUCED_PRECISION_REDUCTION: c_int = 16;

// cublasGemmAlgo_t
pub const GEMM_DEFAULT: c_int = -1;
pub const GEMM_ALGO23: c_int = 23;
pub const GEMM_DEFAULT_TENSOR_OP: c_int = 99;
pub const GEMM_ALGO15_TENSOR_OP: c_int = 115;
pub const GEMM_AUTOTUNE: c_int = 999;

/// Bytes of one element of a data type this simulator can hold.
pub fn elem_bytes(t: c_int) -> Option<usize> {
    match t {
        R_32F | R_32I => Some(4),
        R_64F => Some(8),
        R_16F | R_16BF => Some(2),
        R_8I => Some(1),
        _ => None,
    }
}
