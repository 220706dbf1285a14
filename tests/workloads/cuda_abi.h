/* The CUDA runtime, driver and cuDNN 9 declarations our workloads use, written by hand from the
 * public API documentation (names, argument order, enum and status values). Workloads include
 * this instead of NVIDIA's headers so they build where no CUDA toolkit is installed; they link
 * against the real sonames (libcudart.so.13 or .12, libcudnn.so.9) and run unchanged on the
 * simulated GPU or a real one. */
#ifndef MARMOSET_CUDA_ABI_H
#define MARMOSET_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- CUDA runtime */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef void *cudaMemPool_t;
typedef struct { unsigned x, y, z; } dim3;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
       cudaErrorInvalidDeviceFunction = 98, cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700,
       cudaErrorLaunchFailure = 719, cudaErrorUnknown = 999 };
enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };

cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocHost(void **p, size_t size);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t n);
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaGetDeviceCount(int *n);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t __cudaGetKernel(void **kernel, const void *entry);
cudaError_t __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
typedef struct { dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; cudaStream_t stream;
                 void *attrs; unsigned numAttrs; } cudaLaunchConfig_t;
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags, int *status);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags, int *status);

/* ---- CUDA driver (reached through dlopen or entry points; the workloads link no driver) */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
       CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_ILLEGAL_ADDRESS = 700, CUDA_ERROR_LAUNCH_FAILED = 719 };
typedef struct {
  int type; int requestedHandleTypes; int locationType; int locationId;
  void *win32HandleMetaData; unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { int locationType; int locationId; int flags; } CUmemAccessDesc;
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1, CU_MEM_LOCATION_TYPE_DEVICE = 1,
       CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };

/* ---- cuDNN 9 */
typedef int cudnnStatus_t;
typedef void *cudnnHandle_t;
typedef void *cudnnTensorDescriptor_t;
typedef void *cudnnFilterDescriptor_t;
typedef void *cudnnConvolutionDescriptor_t;
typedef void *cudnnActivationDescriptor_t;
typedef void *cudnnPoolingDescriptor_t;
enum { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_BAD_PARAM = 2000, CUDNN_STATUS_NOT_SUPPORTED = 3000,
       CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER = 5001 };
enum { CUDNN_DATA_FLOAT = 0 };
enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 };
enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 };
enum { CUDNN_DEFAULT_MATH = 0, CUDNN_TENSOR_OP_MATH = 1 };
enum { CUDNN_ACTIVATION_RELU = 1 };
enum { CUDNN_POOLING_MAX = 0 };
enum { CUDNN_SOFTMAX_ACCURATE = 1, CUDNN_SOFTMAX_LOG = 2 };
enum { CUDNN_SOFTMAX_MODE_INSTANCE = 0, CUDNN_SOFTMAX_MODE_CHANNEL = 1 };
enum { CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6,
       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7 };
typedef struct { int algo; cudnnStatus_t status; float time; size_t memory; int determinism;
                 int mathType; int reserved[3]; } cudnnConvolutionFwdAlgoPerf_t;
typedef cudnnConvolutionFwdAlgoPerf_t cudnnConvolutionBwdDataAlgoPerf_t;
typedef cudnnConvolutionFwdAlgoPerf_t cudnnConvolutionBwdFilterAlgoPerf_t;

size_t cudnnGetVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t s);
cudnnStatus_t cudnnCreate(cudnnHandle_t *h);
cudnnStatus_t cudnnDestroy(cudnnHandle_t h);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, int format, int dtype, int n, int c, int h, int w);
cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, int dtype, int n, int c, int h, int w,
                                           int ns, int cs, int hs, int ws);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, int dtype, int nb, const int *dims, const int *strides);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, int dtype, int format, int k, int c, int h, int w);
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, int dtype, int format, int nb, const int *dims);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v,
                                              int dh, int dw, int mode, int compute);
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int len, const int *pad,
                                              const int *stride, const int *dil, int mode, int compute);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, int math);
cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int nb, int *out);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *ch, int *h, int *wo);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y, int algo, size_t *size);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, cudnnFilterDescriptor_t w,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dx, int algo, size_t *size);
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dw, int algo, size_t *size);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
    cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cd, int algo, void *ws, size_t ws_size,
    const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
    const void *w, cudnnTensorDescriptor_t dyd, const void *dy, cudnnConvolutionDescriptor_t cd, int algo, void *ws,
    size_t ws_size, const void *beta, cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
    const void *x, cudnnTensorDescriptor_t dyd, const void *dy, cudnnConvolutionDescriptor_t cd, int algo, void *ws,
    size_t ws_size, const void *beta, cudnnFilterDescriptor_t dwd, void *dw);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y, int requested,
    int *returned, cudnnConvolutionFwdAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dx, int requested,
    int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dw, int requested,
    int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void *x,
    cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, void *y,
    int requested, int *returned, cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t ws_size);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t y, int requested,
    int *returned, cudnnConvolutionFwdAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t dx, int requested,
    int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
    cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t dw, int requested,
    int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf);
cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *d);
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, int mode, int nan, double coef);
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d);
cudnnStatus_t cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t a, const void *alpha,
    cudnnTensorDescriptor_t xd, const void *x, const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnActivationBackward(cudnnHandle_t h, cudnnActivationDescriptor_t a, const void *alpha,
    cudnnTensorDescriptor_t yd, const void *y, cudnnTensorDescriptor_t dyd, const void *dy,
    cudnnTensorDescriptor_t xd, const void *x, const void *beta, cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *d);
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, int mode, int nan, int wh, int ww,
                                          int ph, int pw, int sh, int sw);
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d);
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, cudnnPoolingDescriptor_t p, const void *alpha,
    cudnnTensorDescriptor_t xd, const void *x, const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, cudnnPoolingDescriptor_t p, const void *alpha,
    cudnnTensorDescriptor_t yd, const void *y, cudnnTensorDescriptor_t dyd, const void *dy,
    cudnnTensorDescriptor_t xd, const void *x, const void *beta, cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t h, int algo, int mode, const void *alpha,
    cudnnTensorDescriptor_t xd, const void *x, const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t h, int algo, int mode, const void *alpha,
    cudnnTensorDescriptor_t yd, const void *y, cudnnTensorDescriptor_t dyd, const void *dy, const void *beta,
    cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t ad, const void *a,
    const void *beta, cudnnTensorDescriptor_t cd, void *c);
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t dyd,
    const void *dy, const void *beta, cudnnTensorDescriptor_t dbd, void *db);

/* batch normalisation */
enum { CUDNN_BATCHNORM_PER_ACTIVATION = 0, CUDNN_BATCHNORM_SPATIAL = 1, CUDNN_BATCHNORM_SPATIAL_PERSISTENT = 2,
       CUDNN_BATCHNORM_OPS_BN = 0, CUDNN_BATCHNORM_OPS_BN_ACTIVATION = 1 };
cudnnStatus_t cudnnGetTensorNdDescriptor(cudnnTensorDescriptor_t d, int requested, int *dtype, int *nb, int *dims,
                                         int *strides);
cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived, cudnnTensorDescriptor_t x, int mode);
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cudnnHandle_t h, int mode, int ops,
    cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t z, cudnnTensorDescriptor_t y, cudnnTensorDescriptor_t p,
    cudnnActivationDescriptor_t act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(cudnnHandle_t h, int mode, int ops,
    cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, cudnnTensorDescriptor_t dy, cudnnTensorDescriptor_t dz,
    cudnnTensorDescriptor_t dx, cudnnTensorDescriptor_t p, cudnnActivationDescriptor_t act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t h, int mode, int ops,
    cudnnActivationDescriptor_t act, cudnnTensorDescriptor_t x, size_t *size);
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(cudnnHandle_t h, int mode, int ops, const void *alpha,
    const void *beta, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t zd, const void *z,
    cudnnTensorDescriptor_t yd, void *y, cudnnTensorDescriptor_t pd, const void *scale, const void *bias,
    double factor, void *run_mean, void *run_var, double eps, void *save_mean, void *save_inv,
    cudnnActivationDescriptor_t act, void *ws, size_t ws_size, void *reserve, size_t reserve_size);
cudnnStatus_t cudnnBatchNormalizationBackwardEx(cudnnHandle_t h, int mode, int ops, const void *alpha_d,
    const void *beta_d, const void *alpha_p, const void *beta_p, cudnnTensorDescriptor_t xd, const void *x,
    cudnnTensorDescriptor_t yd, const void *y, cudnnTensorDescriptor_t dyd, const void *dy,
    cudnnTensorDescriptor_t dzd, void *dz, cudnnTensorDescriptor_t dxd, void *dx, cudnnTensorDescriptor_t pd,
    const void *scale, const void *bias, void *dscale, void *dbias, double eps, const void *save_mean,
    const void *save_inv, cudnnActivationDescriptor_t act, void *ws, size_t ws_size, void *reserve,
    size_t reserve_size);
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t h, int mode, const void *alpha,
    const void *beta, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t yd, void *y,
    cudnnTensorDescriptor_t pd, const void *scale, const void *bias, const void *mean, const void *var, double eps);

/* cuDNN backend (graph) API: what cuDNN's frontend uses for convolutions */
typedef void *cudnnBackendDescriptor_t;
enum { CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR = 1, CUDNN_BACKEND_ENGINE_DESCRIPTOR = 2,
       CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
       CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR = 7,
       CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR = 8,
       CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10,
       CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR = 11,
       CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR = 12,
       CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
       CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
       CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17 };
enum { CUDNN_TYPE_HANDLE = 0, CUDNN_TYPE_DATA_TYPE = 1, CUDNN_TYPE_BOOLEAN = 2, CUDNN_TYPE_INT64 = 3,
       CUDNN_TYPE_FLOAT = 4, CUDNN_TYPE_DOUBLE = 5, CUDNN_TYPE_VOID_PTR = 6, CUDNN_TYPE_CONVOLUTION_MODE = 7,
       CUDNN_TYPE_HEUR_MODE = 8, CUDNN_TYPE_POINTWISE_MODE = 14, CUDNN_TYPE_KNOB_TYPE = 9, CUDNN_TYPE_NUMERICAL_NOTE = 11,
       CUDNN_TYPE_BACKEND_DESCRIPTOR = 15, CUDNN_TYPE_BEHAVIOR_NOTE = 19, CUDNN_TYPE_INT32 = 23,
       CUDNN_TYPE_CHAR = 24 };
enum { CUDNN_HEUR_MODE_INSTANT = 0, CUDNN_HEUR_MODE_B = 1, CUDNN_HEUR_MODE_FALLBACK = 2, CUDNN_HEUR_MODE_A = 3 };
enum { CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0, CUDNN_NUMERICAL_NOTE_FFT = 3,
       CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC = 4, CUDNN_NUMERICAL_NOTE_WINOGRAD = 5,
       CUDNN_NUMERICAL_NOTE_TYPE_COUNT = 10, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT = 5, CUDNN_KNOB_TYPE_COUNTS = 44 };
enum { CUDNN_POINTWISE_ADD = 0, CUDNN_POINTWISE_RELU_FWD = 100 };
enum { CUDNN_ATTR_POINTWISE_MODE = 0, CUDNN_ATTR_POINTWISE_MATH_PREC = 1,
       CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750, CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
       CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752, CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
       CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 = 754, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2 = 755,
       CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907 };
enum { CUDNN_ATTR_CONVOLUTION_COMP_TYPE = 100, CUDNN_ATTR_CONVOLUTION_CONV_MODE = 101,
       CUDNN_ATTR_CONVOLUTION_DILATIONS = 102, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES = 103,
       CUDNN_ATTR_CONVOLUTION_POST_PADDINGS = 104, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS = 105,
       CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS = 106,
       CUDNN_ATTR_ENGINEHEUR_MODE = 200, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
       CUDNN_ATTR_ENGINEHEUR_RESULTS = 202, CUDNN_ATTR_ENGINECFG_ENGINE = 300,
       CUDNN_ATTR_ENGINECFG_KNOB_CHOICES = 302, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE = 303,
       CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
       CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION = 405,
       CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE = 600, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE = 601,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA = 706, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA = 707,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC = 708, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W = 709,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX = 710, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY = 711,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA = 712, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA = 713,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC = 714, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW = 715,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X = 716, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY = 717,
       CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800, CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
       CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT = 802,
       CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900, CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
       CUDNN_ATTR_TENSOR_DIMENSIONS = 902, CUDNN_ATTR_TENSOR_STRIDES = 903, CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
       CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
       CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
       CUDNN_ATTR_KNOB_INFO_TYPE = 1200, CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE = 1201,
       CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE = 1202, CUDNN_ATTR_KNOB_INFO_STRIDE = 1203,
       CUDNN_ATTR_ENGINE_OPERATION_GRAPH = 1300, CUDNN_ATTR_ENGINE_GLOBAL_INDEX = 1301,
       CUDNN_ATTR_ENGINE_KNOB_INFO = 1302, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE = 1303,
       CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE = 1305 };
cudnnStatus_t cudnnBackendCreateDescriptor(int type, cudnnBackendDescriptor_t *d);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, int name, int type, int64_t count, const void *values);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t d, int name, int type, int64_t requested,
                                       int64_t *count, void *values);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack);

/* ---- the simulated GPU's own calls (libcuda.so.1 of simgpu only), found with dlsym */
typedef struct simgpuKernelCtx simgpuKernelCtx;
typedef void (*simgpuKernelFn)(simgpuKernelCtx *ctx, void **params);
typedef CUresult (*simgpuRegisterKernel_t)(const char *name, simgpuKernelFn fn, unsigned nparams,
                                           const size_t *sizes, const size_t *aligns, void **handle);
typedef void *(*simgpuKernelAccess_t)(simgpuKernelCtx *ctx, CUdeviceptr p, size_t bytes, int write);
typedef void (*simgpuKernelWork_t)(simgpuKernelCtx *ctx, double flops, double bytes);

#endif
