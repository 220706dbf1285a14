//! Every real function Marmoset calls on its own behalf, one line each: its library and its C
//! signature. Each line makes an accessor of the function's name that resolves it once (an
//! atomic slot per function: after the first call, one atomic load) and returns it typed, or
//! None while its library is not loaded; `ffi::call!` and `ffi::call_why!` call one and check
//! its status. Pointers to C structures are `P` (`void *`) and `C` (`const void *`) unless the
//! table's callers share the structure's type (`ffi::cuda`, `ffi::cudnn`).
//!
//! The functions a program calls and Marmoset forwards are the hook tables', not these.

use super::cuda::{AccessDesc, AllocProp};
use super::cudnn::AlgoPerf;
use super::real;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type P = *mut c_void;
type C = *const c_void;

/// A library: where its functions are found, and how failures name it.
pub struct Lib {
    pub sonames: &'static [&'static CStr],
    /// How a message names it ("cuDNN has no …").
    pub who: &'static str,
    /// Its "not initialised" status: a call's answer when the function cannot be found.
    pub unavailable: c_int,
}

const CUDA: Lib = Lib {
    sonames: real::CUDA,
    who: "the driver",
    unavailable: 3, // CUDA_ERROR_NOT_INITIALIZED
};
const CUDART: Lib = Lib {
    sonames: real::CUDART,
    who: "the runtime",
    unavailable: 3, // cudaErrorInitializationError
};
const CUDNN: Lib = Lib {
    sonames: real::CUDNN,
    who: "cuDNN",
    unavailable: 1001, // CUDNN_STATUS_NOT_INITIALIZED
};
const CUBLAS: Lib = Lib {
    sonames: real::CUBLAS,
    who: "cuBLAS",
    unavailable: 1, // CUBLAS_STATUS_NOT_INITIALIZED
};
const CUBLASLT: Lib = Lib {
    sonames: real::CUBLASLT,
    who: "cuBLAS",
    unavailable: 1, // CUBLAS_STATUS_NOT_INITIALIZED
};

const NCCL: Lib = Lib {
    sonames: real::NCCL,
    who: "NCCL",
    unavailable: 3, // ncclInternalError
};

/// The address in `s`, resolved on first use; while it is 0 (not found) each use looks again, so
/// a library loaded later is found.
#[inline]
fn slot(s: &AtomicUsize, lib: &Lib, name: &CStr) -> usize {
    let p = s.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    resolve(s, lib, name)
}

#[cold]
fn resolve(s: &AtomicUsize, lib: &Lib, name: &CStr) -> usize {
    let p = real::resolve(lib.sonames, name);
    s.store(p, Ordering::Release);
    p
}

/// A function's name as a C string, at compile time.
const fn c_name(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("a function name with a NUL inside"),
    }
}

macro_rules! table {
    ($($lib:ident $name:ident($($t:ty),* $(,)?) -> $ret:ty;)*) => {
        $(
            #[allow(non_snake_case)]
            #[inline]
            pub fn $name() -> Option<unsafe extern "C" fn($($t),*) -> $ret> {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                const NAME: &CStr = c_name(concat!(stringify!($name), "\0"));
                let p = slot(&SLOT, library::$name, NAME);
                // SAFETY: p is the real function of this name in its library, whose C signature
                // is this line of the table; a function pointer has a usize's size.
                (p != 0).then(|| unsafe {
                    std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $ret>(p)
                })
            }
        )*

        /// The library of each function of the table, by the function's name.
        #[allow(non_upper_case_globals)]
        pub mod library {
            $(pub const $name: &super::Lib = &super::$lib;)*
        }

    };
}

table! {
    // The driver: events, streams, copies, the VMM calls of the allocator, kernels.
    CUDA cuGetErrorName(c_int, *mut *const c_char) -> c_int;
    CUDA cuDeviceGetName(*mut c_char, c_int, c_int) -> c_int;
    CUDA cuDeviceGetDefaultMemPool(*mut P, c_int) -> c_int;
    CUDA cuCtxGetDevice(*mut c_int) -> c_int;
    CUDA cuCtxGetCurrent(*mut P) -> c_int;
    CUDA cuCtxSynchronize() -> c_int;
    CUDA cuStreamCreate(*mut P, u32) -> c_int;
    CUDA cuStreamWaitEvent(P, P, u32) -> c_int;
    CUDA cuEventCreate(*mut P, u32) -> c_int;
    CUDA cuEventDestroy_v2(P) -> c_int;
    CUDA cuEventRecord(P, P) -> c_int;
    CUDA cuEventQuery(P) -> c_int;
    CUDA cuEventSynchronize(P) -> c_int;
    CUDA cuEventElapsedTime(*mut f32, P, P) -> c_int;
    CUDA cuMemGetInfo_v2(*mut usize, *mut usize) -> c_int;
    CUDA cuMemAlloc_v2(*mut u64, usize) -> c_int;
    CUDA cuMemAllocHost_v2(*mut P, usize) -> c_int;
    CUDA cuMemFreeHost(P) -> c_int;
    CUDA cuMemGetAllocationGranularity(*mut usize, *const AllocProp, c_int) -> c_int;
    CUDA cuMemAddressReserve(*mut u64, usize, usize, u64, u64) -> c_int;
    CUDA cuMemAddressFree(u64, usize) -> c_int;
    CUDA cuMemCreate(*mut u64, usize, *const AllocProp, u64) -> c_int;
    CUDA cuMemRelease(u64) -> c_int;
    CUDA cuMemMap(u64, usize, usize, u64, u64) -> c_int;
    CUDA cuMemUnmap(u64, usize) -> c_int;
    CUDA cuMemSetAccess(u64, usize, *const AccessDesc, usize) -> c_int;
    CUDA cuMemcpyDtoH_v2(P, u64, usize) -> c_int;
    CUDA cuMemcpyHtoD_v2(u64, C, usize) -> c_int;
    CUDA cuMemcpyDtoHAsync_v2(P, u64, usize, P) -> c_int;
    CUDA cuMemcpyHtoDAsync_v2(u64, C, usize, P) -> c_int;
    CUDA cuMemcpyDtoDAsync_v2(u64, u64, usize, P) -> c_int;
    CUDA cuMemsetD8Async(u64, u8, usize, P) -> c_int;
    CUDA cuFuncGetName(*mut *const c_char, usize) -> c_int;
    CUDA cuFuncGetParamInfo(usize, usize, *mut usize, *mut usize) -> c_int;
    CUDA cuLaunchKernel(usize, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P) -> c_int;

    // The runtime: Marmoset's own buffers, timing events, kernels' driver handles.
    CUDART cudaMalloc(*mut P, usize) -> c_int;
    CUDART cudaFree(P) -> c_int;
    CUDART cudaEventCreate(*mut P) -> c_int;
    CUDART cudaEventDestroy(P) -> c_int;
    CUDART cudaEventRecord(P, P) -> c_int;
    CUDART cudaEventSynchronize(P) -> c_int;
    CUDART cudaEventElapsedTime(*mut f32, P, P) -> c_int;
    CUDART cudaGetFuncBySymbol(*mut usize, usize) -> c_int;
    CUDART cudaGetLastError() -> c_int;
    CUDART cudaPeekAtLastError() -> c_int;

    // cuDNN: handles and descriptors, read back and made anew.
    CUDNN cudnnGetVersion() -> usize;
    CUDNN cudnnCreate(*mut P) -> c_int;
    CUDNN cudnnSetStream(P, P) -> c_int;
    CUDNN cudnnGetStream(P, *mut P) -> c_int;
    CUDNN cudnnCreateTensorDescriptor(*mut P) -> c_int;
    CUDNN cudnnDestroyTensorDescriptor(P) -> c_int;
    CUDNN cudnnSetTensorNdDescriptor(P, c_int, c_int, *const c_int, *const c_int) -> c_int;
    CUDNN cudnnGetTensorNdDescriptor(C, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
    CUDNN cudnnCreateFilterDescriptor(*mut P) -> c_int;
    CUDNN cudnnDestroyFilterDescriptor(P) -> c_int;
    CUDNN cudnnSetFilterNdDescriptor(P, c_int, c_int, c_int, *const c_int) -> c_int;
    CUDNN cudnnGetFilterNdDescriptor(C, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
    CUDNN cudnnCreateConvolutionDescriptor(*mut P) -> c_int;
    CUDNN cudnnDestroyConvolutionDescriptor(P) -> c_int;
    CUDNN cudnnSetConvolutionNdDescriptor(P, c_int, *const c_int, *const c_int, *const c_int, c_int, c_int) -> c_int;
    CUDNN cudnnGetConvolutionNdDescriptor(C, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
    CUDNN cudnnSetConvolutionGroupCount(P, c_int) -> c_int;
    CUDNN cudnnGetConvolutionGroupCount(C, *mut c_int) -> c_int;
    CUDNN cudnnSetConvolutionMathType(P, c_int) -> c_int;
    CUDNN cudnnGetConvolutionMathType(C, *mut c_int) -> c_int;
    CUDNN cudnnCreateActivationDescriptor(*mut P) -> c_int;
    CUDNN cudnnDestroyActivationDescriptor(P) -> c_int;
    CUDNN cudnnSetActivationDescriptor(P, c_int, c_int, f64) -> c_int;
    CUDNN cudnnGetActivationDescriptor(C, *mut c_int, *mut c_int, *mut f64) -> c_int;

    // cuDNN: μ-cuDNN's measurements (per direction: how many algorithms, their workspaces,
    // the benchmark).
    CUDNN cudnnGetConvolutionForwardAlgorithmMaxCount(P, *mut c_int) -> c_int;
    CUDNN cudnnGetConvolutionBackwardDataAlgorithmMaxCount(P, *mut c_int) -> c_int;
    CUDNN cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(P, *mut c_int) -> c_int;
    CUDNN cudnnGetConvolutionForwardWorkspaceSize(P, C, C, C, C, c_int, *mut usize) -> c_int;
    CUDNN cudnnGetConvolutionBackwardDataWorkspaceSize(P, C, C, C, C, c_int, *mut usize) -> c_int;
    CUDNN cudnnGetConvolutionBackwardFilterWorkspaceSize(P, C, C, C, C, c_int, *mut usize) -> c_int;
    CUDNN cudnnFindConvolutionForwardAlgorithmEx(P, C, C, C, C, C, C, P, c_int, *mut c_int, *mut AlgoPerf, P, usize) -> c_int;
    CUDNN cudnnFindConvolutionBackwardDataAlgorithmEx(P, C, C, C, C, C, C, P, c_int, *mut c_int, *mut AlgoPerf, P, usize) -> c_int;
    CUDNN cudnnFindConvolutionBackwardFilterAlgorithmEx(P, C, C, C, C, C, C, P, c_int, *mut c_int, *mut AlgoPerf, P, usize) -> c_int;

    // cuDNN: the computations recomputation replays.
    CUDNN cudnnActivationForward(P, C, C, C, C, C, C, P) -> c_int;
    CUDNN cudnnAddTensor(P, C, C, C, C, C, P) -> c_int;
    CUDNN cudnnSoftmaxForward(P, c_int, c_int, C, C, C, C, C, P) -> c_int;
    CUDNN cudnnConvolutionForward(P, C, C, C, C, C, C, c_int, P, usize, C, C, P) -> c_int;
    CUDNN cudnnBatchNormalizationForwardTraining(P, c_int, C, C, C, C, C, P, C, C, C, f64, P, P, f64, P, P) -> c_int;
    CUDNN cudnnBatchNormalizationForwardTrainingEx(P, c_int, c_int, C, C, C, C, C, C, C, P, C, C, C, f64, P, P, f64, P, P, C, P, usize, P, usize) -> c_int;

    // cuDNN's backend API (ffi::cudnn_backend).
    CUDNN cudnnBackendCreateDescriptor(c_int, *mut P) -> c_int;
    CUDNN cudnnBackendDestroyDescriptor(P) -> c_int;
    CUDNN cudnnBackendFinalize(P) -> c_int;
    CUDNN cudnnBackendSetAttribute(P, c_int, c_int, i64, C) -> c_int;
    CUDNN cudnnBackendGetAttribute(C, c_int, c_int, i64, *mut i64, P) -> c_int;
    CUDNN cudnnBackendExecute(P, P, P) -> c_int;

    // cuBLAS: a handle's settings, and the GEMMs recomputation replays.
    CUBLAS cublasCreate_v2(*mut P) -> c_int;
    CUBLAS cublasSetStream_v2(P, P) -> c_int;
    CUBLAS cublasGetStream_v2(P, *mut P) -> c_int;
    CUBLAS cublasSetMathMode(P, c_int) -> c_int;
    CUBLAS cublasGetMathMode(P, *mut c_int) -> c_int;
    CUBLAS cublasSetPointerMode_v2(P, c_int) -> c_int;
    CUBLAS cublasGetPointerMode_v2(P, *mut c_int) -> c_int;
    CUBLAS cublasSgemm_v2(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, C, c_int, C, P, c_int) -> c_int;
    CUBLAS cublasDgemm_v2(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, C, c_int, C, P, c_int) -> c_int;
    CUBLAS cublasSgemmEx(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, c_int, C, c_int, c_int, C, P, c_int, c_int) -> c_int;
    CUBLAS cublasGemmEx(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, c_int, C, c_int, c_int, C, P, c_int, c_int, c_int, c_int) -> c_int;
    CUBLAS cublasSgemmStridedBatched(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, i64, C, c_int, i64, C, P, c_int, i64, c_int) -> c_int;
    CUBLAS cublasDgemmStridedBatched(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, i64, C, c_int, i64, C, P, c_int, i64, c_int) -> c_int;
    CUBLAS cublasGemmStridedBatchedEx(P, c_int, c_int, c_int, c_int, c_int, C, C, c_int, c_int, i64, C, c_int, c_int, i64, C, P, c_int, c_int, i64, c_int, c_int, c_int) -> c_int;

    // cuBLASLt: matmul descriptors and layouts, read back and made anew; the matmul.
    CUBLASLT cublasLtCreate(*mut P) -> c_int;
    CUBLASLT cublasLtMatmulDescCreate(*mut P, c_int, c_int) -> c_int;
    CUBLASLT cublasLtMatmulDescDestroy(P) -> c_int;
    CUBLASLT cublasLtMatmulDescSetAttribute(P, u32, C, usize) -> c_int;
    CUBLASLT cublasLtMatmulDescGetAttribute(C, u32, P, usize, *mut usize) -> c_int;
    CUBLASLT cublasLtMatrixLayoutCreate(*mut P, c_int, u64, u64, i64) -> c_int;
    CUBLASLT cublasLtMatrixLayoutDestroy(P) -> c_int;
    CUBLASLT cublasLtMatrixLayoutSetAttribute(P, u32, C, usize) -> c_int;
    CUBLASLT cublasLtMatrixLayoutGetAttribute(C, u32, P, usize, *mut usize) -> c_int;
    CUBLASLT cublasLtMatmul(P, P, C, C, P, C, P, C, C, P, P, P, C, P, usize, P) -> c_int;

    // NCCL: a communicator's size, which sizes its gathers and scatters.
    NCCL ncclCommCount(C, *mut c_int) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_of_no_loaded_library_is_none_and_its_call_says_so() {
        // No CUDA-family library is loaded in this test binary, and libc defines none of these.
        assert!(cudnnBackendExecute().is_none());
        let r: Result<(), c_int> = super::super::call!(cudnnBackendFinalize(std::ptr::null_mut()));
        assert_eq!(r, Err(1001));
        let why: Result<(), String> =
            super::super::call_why!(cublasLtMatmulDescDestroy(std::ptr::null_mut()));
        assert_eq!(why, Err("cuBLAS has no cublasLtMatmulDescDestroy".into()));
        assert_eq!(library::cuMemMap.who, "the driver");
    }
}
