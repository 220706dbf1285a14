//! Our hand-written integers against cudarc's bindings, generated from NVIDIA's CUDA 13.2
//! cuBLAS / cuBLASLt headers.

use crate::epilogue;
use crate::types::*;
use cudarc::cublas::sys as blas;
use cudarc::cublaslt::sys as lt;

#[test]
fn status_codes_and_names() {
    use blas::cublasStatus_t as S;
    for (ours, theirs) in [
        (SUCCESS, S::CUBLAS_STATUS_SUCCESS),
        (NOT_INITIALIZED, S::CUBLAS_STATUS_NOT_INITIALIZED),
        (ALLOC_FAILED, S::CUBLAS_STATUS_ALLOC_FAILED),
        (INVALID_VALUE, S::CUBLAS_STATUS_INVALID_VALUE),
        (ARCH_MISMATCH, S::CUBLAS_STATUS_ARCH_MISMATCH),
        (MAPPING_ERROR, S::CUBLAS_STATUS_MAPPING_ERROR),
        (EXECUTION_FAILED, S::CUBLAS_STATUS_EXECUTION_FAILED),
        (INTERNAL_ERROR, S::CUBLAS_STATUS_INTERNAL_ERROR),
        (NOT_SUPPORTED, S::CUBLAS_STATUS_NOT_SUPPORTED),
        (LICENSE_ERROR, S::CUBLAS_STATUS_LICENSE_ERROR),
    ] {
        assert_eq!(ours, theirs as i32);
        assert_eq!(status_name(ours).to_str().unwrap(), format!("{theirs:?}"));
    }
}

#[test]
fn data_and_compute_types() {
    use blas::cublasComputeType_t as C;
    use blas::cudaDataType_t as D;
    for (ours, theirs) in [
        (R_32F, D::CUDA_R_32F),
        (R_64F, D::CUDA_R_64F),
        (R_16F, D::CUDA_R_16F),
        (R_16BF, D::CUDA_R_16BF),
        (R_8I, D::CUDA_R_8I),
        (R_32I, D::CUDA_R_32I),
    ] {
        assert_eq!(ours, theirs as i32, "{theirs:?}");
    }
    for (ours, theirs) in [
        (COMPUTE_16F, C::CUBLAS_COMPUTE_16F),
        (COMPUTE_16F_PEDANTIC, C::CUBLAS_COMPUTE_16F_PEDANTIC),
        (COMPUTE_32F, C::CUBLAS_COMPUTE_32F),
        (COMPUTE_32F_PEDANTIC, C::CUBLAS_COMPUTE_32F_PEDANTIC),
        (COMPUTE_64F, C::CUBLAS_COMPUTE_64F),
        (COMPUTE_64F_PEDANTIC, C::CUBLAS_COMPUTE_64F_PEDANTIC),
        (COMPUTE_32I, C::CUBLAS_COMPUTE_32I),
        (COMPUTE_32I_PEDANTIC, C::CUBLAS_COMPUTE_32I_PEDANTIC),
        (COMPUTE_32F_FAST_16F, C::CUBLAS_COMPUTE_32F_FAST_16F),
        (COMPUTE_32F_FAST_16BF, C::CUBLAS_COMPUTE_32F_FAST_16BF),
        (COMPUTE_32F_FAST_TF32, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        (
            COMPUTE_32F_EMULATED_16BFX9,
            C::CUBLAS_COMPUTE_32F_EMULATED_16BFX9,
        ),
        (
            COMPUTE_64F_EMULATED_FIXEDPOINT,
            C::CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT,
        ),
    ] {
        assert_eq!(ours, theirs as i32, "{theirs:?}");
    }
}

#[test]
fn operations_modes_and_algorithms() {
    assert_eq!(OP_N, blas::cublasOperation_t::CUBLAS_OP_N as i32);
    assert_eq!(OP_T, blas::cublasOperation_t::CUBLAS_OP_T as i32);
    assert_eq!(OP_C, blas::cublasOperation_t::CUBLAS_OP_C as i32);
    assert_eq!(OP_CONJG, blas::cublasOperation_t::CUBLAS_OP_CONJG as i32);
    use blas::cublasMath_t as M;
    for (ours, theirs) in [
        (DEFAULT_MATH, M::CUBLAS_DEFAULT_MATH),
        (TENSOR_OP_MATH, M::CUBLAS_TENSOR_OP_MATH),
        (PEDANTIC_MATH, M::CUBLAS_PEDANTIC_MATH),
        (TF32_TENSOR_OP_MATH, M::CUBLAS_TF32_TENSOR_OP_MATH),
        (
            FP32_EMULATED_BF16X9_MATH,
            M::CUBLAS_FP32_EMULATED_BF16X9_MATH,
        ),
        (
            FP64_EMULATED_FIXEDPOINT_MATH,
            M::CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH,
        ),
        (
            DISALLOW_REDUCED_PRECISION_REDUCTION,
            M::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
        ),
    ] {
        assert_eq!(ours, theirs as i32, "{theirs:?}");
    }
    assert_eq!(
        POINTER_MODE_DEVICE,
        blas::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE as i32
    );
    assert_eq!(
        POINTER_MODE_DEVICE,
        lt::cublasLtPointerMode_t::CUBLASLT_POINTER_MODE_DEVICE as i32
    );
    use blas::cublasGemmAlgo_t as A;
    assert_eq!(GEMM_DEFAULT, A::CUBLAS_GEMM_DFALT as i32);
    assert_eq!(GEMM_ALGO23, A::CUBLAS_GEMM_ALGO23 as i32);
    assert_eq!(
        GEMM_DEFAULT_TENSOR_OP,
        A::CUBLAS_GEMM_DEFAULT_TENSOR_OP as i32
    );
    assert_eq!(
        GEMM_ALGO15_TENSOR_OP,
        A::CUBLAS_GEMM_ALGO15_TENSOR_OP as i32
    );
    assert_eq!(GEMM_AUTOTUNE, A::CUBLAS_GEMM_AUTOTUNE as i32);
}

#[test]
fn epilogues() {
    use lt::cublasLtEpilogue_t as E;
    for (ours, theirs) in [
        (epilogue::DEFAULT, E::CUBLASLT_EPILOGUE_DEFAULT),
        (epilogue::RELU, E::CUBLASLT_EPILOGUE_RELU),
        (epilogue::RELU_AUX, E::CUBLASLT_EPILOGUE_RELU_AUX),
        (epilogue::BIAS, E::CUBLASLT_EPILOGUE_BIAS),
        (epilogue::RELU_BIAS, E::CUBLASLT_EPILOGUE_RELU_BIAS),
        (epilogue::RELU_AUX_BIAS, E::CUBLASLT_EPILOGUE_RELU_AUX_BIAS),
        (epilogue::DRELU, E::CUBLASLT_EPILOGUE_DRELU),
        (epilogue::DRELU_BGRAD, E::CUBLASLT_EPILOGUE_DRELU_BGRAD),
        (epilogue::GELU, E::CUBLASLT_EPILOGUE_GELU),
        (epilogue::GELU_AUX, E::CUBLASLT_EPILOGUE_GELU_AUX),
        (epilogue::GELU_BIAS, E::CUBLASLT_EPILOGUE_GELU_BIAS),
        (epilogue::GELU_AUX_BIAS, E::CUBLASLT_EPILOGUE_GELU_AUX_BIAS),
        (epilogue::DGELU, E::CUBLASLT_EPILOGUE_DGELU),
        (epilogue::DGELU_BGRAD, E::CUBLASLT_EPILOGUE_DGELU_BGRAD),
        (epilogue::BGRADA, E::CUBLASLT_EPILOGUE_BGRADA),
        (epilogue::BGRADB, E::CUBLASLT_EPILOGUE_BGRADB),
    ] {
        assert_eq!(ours, theirs as u32, "{theirs:?}");
    }
}
