/* The cuBLAS and cuBLASLt (CUDA 13) declarations gemm_check uses, written by hand from the public
 * API documentation (names, argument order, enum and status values), so that it builds where no
 * CUDA toolkit is installed. It links against libcublas.so.13 / libcublasLt.so.13 and runs
 * unchanged on the simulated GPU or a real one. */
#ifndef MARMOSET_CUBLAS_ABI_H
#define MARMOSET_CUBLAS_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int cublasStatus_t;
typedef void *cublasHandle_t;
typedef void *cublasLtHandle_t;
typedef void *cublasLtMatmulDesc_t;
typedef void *cublasLtMatrixLayout_t;
typedef void *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7,
       CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_64F = 70 };
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };
enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum { CUBLAS_GEMM_DEFAULT = -1 };
enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
       CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
       CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
       CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12 };
enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 };
enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 };
enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_BIAS = 4,
       CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_BIAS = 36,
       CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_BGRADB = 512,
       CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134, CUBLASLT_EPILOGUE_DRELU_BGRAD = 152, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
       CUBLASLT_EPILOGUE_BGRADA = 256 };

cublasStatus_t cublasCreate_v2(cublasHandle_t *h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, void *stream);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, int mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t h, int *mode);
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, int mode);
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                              const float *a, int lda, const float *b, int ldb, const float *beta, float *c,
                              int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void *alpha,
                            const void *a, int atype, int lda, const void *b, int btype, int ldb,
                            const void *beta, void *c, int ctype, int ldc, int compute, int algo);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                         const float *alpha, const float *a, int lda, long long sa,
                                         const float *b, int ldb, long long sb, const float *beta, float *c,
                                         int ldc, long long sc, int batch);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                          const void *alpha, const void *a, int atype, int lda, long long sa,
                                          const void *b, int btype, int ldb, long long sb, const void *beta,
                                          void *c, int ctype, int ldc, long long sc, int batch, int compute,
                                          int algo);
cublasStatus_t cublasSgemv_v2(cublasHandle_t h, int op, int m, int n, const float *alpha, const float *a,
                              int lda, const float *x, int incx, const float *beta, float *y, int incy);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int compute, int scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int attr, const void *buf, size_t n);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, int attr, void *buf, size_t n,
                                              size_t *written);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, int type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr, const void *buf, size_t n);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, int attr, const void *buf,
                                                    size_t n);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd,
                              const void *beta, const void *c, cublasLtMatrixLayout_t cd, void *dd,
                              cublasLtMatrixLayout_t ddd, const cublasLtMatmulAlgo_t *algo, void *ws,
                              size_t ws_size, void *stream);
size_t cublasLtGetVersion(void);
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);

#endif
