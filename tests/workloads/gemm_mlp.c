/* gemm_mlp: a stack of transformer-style feed-forward blocks trained the way PyTorch's eager mode
 * drives cuBLAS, with the C ABI only. Each block is a[b+1] = a[b] + W2 gelu(W1 a[b] + b1): the
 * first linear layer as PyTorch's addmm runs it (cublasLtMatmul with the bias epilogue; or, by
 * LINEAR, cublasGemmEx or cublasSgemm_v2 with the bias trained but not applied), GELU out of
 * place as ATen's contiguous elementwise kernel (named and laid out as in torch's fatbins, output
 * first), the second linear layer with cublasGemmEx, the residual addition as ATen's out-of-place
 * add kernel. Its input and GELU's input are kept for the backward pass (GELU's backward, and
 * the weight gradients: GEMMs with the saved activations transposed), as autograd keeps them.
 * Every tensor is one cudaMallocAsync on the compute stream and one cudaFreeAsync after its last
 * use; the data loader prefetches the next batch. The loss is the mean square of the output;
 * SGD with momentum updates W1, b1 and W2 in place. Deterministic: it prints each iteration's
 * loss and a checksum of the weights.
 *
 * Usage: gemm_mlp [ITERATIONS] [BATCH] [DIM] [HIDDEN] [BLOCKS] [LINEAR]
 *        (defaults 6, 512, 64, 1024, 3, lt; LINEAR: lt, gemmex or sgemm)
 * Matrices are column-major as cuBLAS sees PyTorch's row-major tensors: an activation of DIM
 * features for BATCH samples is DIM x BATCH with leading dimension DIM. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_abi.h"
#include "cuda_abi.h"
#include "iteration_times.h"

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define BL(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> status %d\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

static simgpuKernelAccess_t access_fn;
static cudaStream_t st;
static cublasHandle_t blas;
static cublasLtHandle_t lt;
static int linear_mode; /* 0 lt, 1 gemmex, 2 sgemm */

static float *arg(simgpuKernelCtx *ctx, void *p, int n, int write) {
  return access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p, (size_t)n * 4, write);
}

static float gelu_of(float x) {
  const float c = 0.7978845608f, k = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(c * (x + k * x * x * x)));
}
static float gelu_grad(float x) {
  const float c = 0.7978845608f, k = 0.044715f;
  float t = tanhf(c * (x + k * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
}

/* ATen's vectorized_elementwise_kernel<4, F, std::array<char*, K>>(int n, functor, operands),
 * operands output first. */
static void gelu(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *out = arg(ctx, &data[0], n, 1);
  const float *x = arg(ctx, &data[1], n, 0);
  if (!out || !x) return;
  for (int i = 0; i < n; i++) out[i] = gelu_of(x[i]);
}
static void gelu_backward(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *dx = arg(ctx, &data[0], n, 1);
  const float *dy = arg(ctx, &data[1], n, 0), *x = arg(ctx, &data[2], n, 0);
  if (!dx || !dy || !x) return;
  for (int i = 0; i < n; i++) dx[i] = dy[i] * gelu_grad(x[i]);
}
static void aten_add(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *out = arg(ctx, &data[0], n, 1);
  const float *a = arg(ctx, &data[1], n, 0), *b = arg(ctx, &data[2], n, 0);
  if (!out || !a || !b) return;
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* mse(int n, int batch, const float *y, float *dy, float *loss): loss = sum(y^2) / (2 batch),
 * dy = y / batch */
static void mse(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0], batch = *(int *)p[1];
  const float *y = arg(ctx, p[2], n, 0);
  float *dy = arg(ctx, p[3], n, 1), *loss = arg(ctx, p[4], 1, 1);
  if (!y || !dy || !loss) return;
  double s = 0;
  for (int i = 0; i < n; i++) {
    s += (double)y[i] * y[i];
    dy[i] = y[i] / (float)batch;
  }
  *loss = (float)(s / (2.0 * batch));
}

/* bias_grad(int rows, int cols, const float *d, float *db): db[i] = sum_j d[i + j rows] */
static void bias_grad(simgpuKernelCtx *ctx, void **p) {
  int rows = *(int *)p[0], cols = *(int *)p[1];
  const float *d = arg(ctx, p[2], rows * cols, 0);
  float *db = arg(ctx, p[3], rows, 1);
  if (!d || !db) return;
  for (int i = 0; i < rows; i++) {
    float s = 0;
    for (int j = 0; j < cols; j++) s += d[i + (size_t)j * rows];
    db[i] = s;
  }
}

/* add_(int n, float *a, const float *b): a += b, in place */
static void add_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float *a = arg(ctx, p[1], n, 1);
  const float *b = arg(ctx, p[2], n, 0);
  if (!a || !b) return;
  for (int i = 0; i < n; i++) a[i] += b[i];
}

/* sgd_(int n, float lr, float mu, float *w, float *v, const float *g): v = mu v + g; w -= lr v */
static void sgd_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float lr = *(float *)p[1], mu = *(float *)p[2];
  float *w = arg(ctx, p[3], n, 1), *v = arg(ctx, p[4], n, 1);
  const float *g = arg(ctx, p[5], n, 0);
  if (!w || !v || !g) return;
  for (int i = 0; i < n; i++) {
    v[i] = mu * v[i] + g[i];
    w[i] -= lr * v[i];
  }
}

static void *k_gelu, *k_gelu_bwd, *k_aten_add, *k_mse, *k_bias_grad, *k_add_, *k_sgd;

#define GELU_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11GeluFunctorIfEESt5arrayIPcLm2EELb0EEEviT0_T1_"
#define GELU_BWD_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_19GeluBackwardFunctorIfEESt5arrayIPcLm3EELb0EEEviT0_T1_"
#define ADD_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EELb0EEEviT0_T1_"

static void register_kernels(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  simgpuRegisterKernel_t reg = h ? (simgpuRegisterKernel_t)dlsym(h, "simgpuRegisterKernel") : NULL;
  access_fn = h ? (simgpuKernelAccess_t)dlsym(h, "simgpuKernelAccess") : NULL;
  if (!reg || !access_fn) { fprintf(stderr, "gemm_mlp: needs the simulated GPU's kernel registration\n"); exit(1); }
  size_t s3[] = {4, 8, 8}, s4[] = {4, 4, 8, 8}, s5[] = {4, 4, 8, 8, 8}, g6[] = {4, 4, 4, 8, 8, 8};
  if (reg("mse", mse, 5, s5, s5, &k_mse) || reg("bias_grad", bias_grad, 4, s4, s4, &k_bias_grad) ||
      reg("add_", add_, 3, s3, s3, &k_add_) || reg("sgd_", sgd_, 6, g6, g6, &k_sgd))
    exit(1);
  /* (int N, an empty functor, K operand pointers): offsets 0, 4, 8 as torch's fatbins give. */
  size_t gs[] = {4, 1, 16}, ga[] = {4, 1, 8}, bs[] = {4, 1, 24}, ba[] = {4, 1, 8};
  if (reg(GELU_NAME, gelu, 3, gs, ga, &k_gelu) || reg(GELU_BWD_NAME, gelu_backward, 3, bs, ba, &k_gelu_bwd) ||
      reg(ADD_NAME, aten_add, 3, bs, ba, &k_aten_add))
    exit(1);
}

static void launch(void *k, int n, void **args) {
  dim3 grid = {(unsigned)(n + 255) / 256, 1, 1}, block = {256, 1, 1};
  CU(cudaLaunchKernel(k, grid, block, args, 0, st));
}
static void aten(void *k, int n, float **data, int count) {
  unsigned char functor = 0;
  float *d[3] = {data[0], data[1], count > 2 ? data[2] : NULL};
  void *v[] = {&n, &functor, d};
  launch(k, n, v);
}

static void *talloc(size_t bytes) { void *p; CU(cudaMallocAsync(&p, bytes, st)); return p; }
static void tfree(void *p) { CU(cudaFreeAsync(p, st)); }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static const float ONE = 1.0f, ZERO = 0.0f;

/* C (m x n) = op(A) op(B) with cublasGemmEx, beta 0: a new tensor. */
static float *gemm(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b, int ldb) {
  float *c = talloc((size_t)m * n * 4);
  BL(cublasGemmEx(blas, ta, tb, m, n, k, &ONE, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &ZERO, c, CUDA_R_32F, m,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return c;
}

/* The first linear layer's output, H x N = W1 (H x D) a (D x N) [+ b1], by LINEAR. */
static float *linear1(const float *w, const float *bias, const float *a, int h, int n, int d, void *ws,
                      size_t ws_bytes) {
  if (linear_mode == 1) return gemm(CUBLAS_OP_N, CUBLAS_OP_N, h, n, d, w, h, a, d);
  float *y = talloc((size_t)h * n * 4);
  if (linear_mode == 2) {
    BL(cublasSgemm_v2(blas, CUBLAS_OP_N, CUBLAS_OP_N, h, n, d, &ONE, w, h, a, d, &ZERO, y, h));
    return y;
  }
  /* As PyTorch's addmm with a bias (at::cuda::blas::gemm_and_bias): descriptors made and
   * destroyed around the call, the first algorithm the heuristic gives. */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  BL(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int op_n = CUBLAS_OP_N, epi = CUBLASLT_EPILOGUE_BIAS;
  BL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_n, sizeof op_n));
  BL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
  BL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  BL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  BL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, h, d, h));
  BL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, d, n, d));
  BL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, h, n, h));
  cublasLtMatmulPreference_t pref;
  BL(cublasLtMatmulPreferenceCreate(&pref));
  BL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t heur;
  int got = 0;
  BL(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &got));
  if (got < 1) { fprintf(stderr, "gemm_mlp: no cuBLASLt algorithm\n"); exit(1); }
  BL(cublasLtMatmul(lt, desc, &ONE, w, la, a, lb, &ZERO, y, lc, y, lc, &heur.algo, ws, ws_bytes, st));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return y;
}

typedef struct {
  float *w1, *b1, *w2;    /* H x D, H, D x H */
  float *v1, *vb1, *v2;   /* momentum, allocated at the first step */
} Block;

static void sgd(float *w, float **v, const float *g, int n, float lr, float mu) {
  if (!*v) {
    *v = talloc((size_t)n * 4);
    CU(cudaMemsetAsync(*v, 0, (size_t)n * 4, st));
  }
  void *a[] = {&n, &lr, &mu, &w, v, &g};
  launch(k_sgd, n, a);
}

static float *weights(size_t n, float scale) {
  float *host = malloc(n * 4), *w = talloc(n * 4);
  for (size_t i = 0; i < n; i++) host[i] = frand() * scale;
  CU(cudaMemcpyAsync(w, host, n * 4, cudaMemcpyHostToDevice, st));
  CU(cudaStreamSynchronize(st));
  free(host);
  return w;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 6, n = argc > 2 ? atoi(argv[2]) : 512;
  int d = argc > 3 ? atoi(argv[3]) : 64, h = argc > 4 ? atoi(argv[4]) : 1024;
  int nblocks = argc > 5 ? atoi(argv[5]) : 3;
  const char *mode = argc > 6 ? argv[6] : "lt";
  linear_mode = !strcmp(mode, "lt") ? 0 : !strcmp(mode, "gemmex") ? 1 : !strcmp(mode, "sgemm") ? 2 : -1;
  if (iters < 1 || n < 1 || d < 1 || h < 1 || nblocks < 1 || nblocks > 64 || linear_mode < 0) {
    fprintf(stderr, "usage: gemm_mlp [ITERATIONS] [BATCH] [DIM] [HIDDEN] [BLOCKS, 1..64] [lt|gemmex|sgemm]\n");
    return 2;
  }
  register_kernels();
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  BL(cublasCreate_v2(&blas));
  BL(cublasSetStream_v2(blas, st));
  BL(cublasLtCreate(&lt));
  Block *blocks = calloc((size_t)nblocks, sizeof *blocks);
  for (int b = 0; b < nblocks; b++) {
    blocks[b].w1 = weights((size_t)h * d, 1.0f / sqrtf((float)d));
    blocks[b].b1 = weights((size_t)h, 0.1f);
    blocks[b].w2 = weights((size_t)d * h, 1.0f / sqrtf((float)h));
  }
  size_t in = (size_t)d * n, hid = (size_t)h * n;
  int nin = (int)in, nhid = (int)hid;
  float *hx = malloc(in * 4);
  for (size_t i = 0; i < in; i++) hx[i] = frand();
  float *x = talloc(in * 4);
  CU(cudaMemcpyAsync(x, hx, in * 4, cudaMemcpyHostToDevice, st));
  float **a = calloc((size_t)nblocks + 1, sizeof *a), **h1 = calloc((size_t)nblocks, sizeof *h1);
  float **g1 = calloc((size_t)nblocks, sizeof *g1);
  const float lr = 0.01f, mu = 0.9f;
  const size_t ws_bytes = 1 << 20;
  cudaEvent_t *marks = malloc((iters + 1) * sizeof *marks);
  for (int i = 0; i <= iters; i++) cudaEventCreate(&marks[i]);
  for (int it = 0; it < iters; it++) {
    cudaEventRecord(marks[it], st);
    a[0] = x;
    for (int b = 0; b < nblocks; b++) {
      Block *l = &blocks[b];
      void *ws = linear_mode == 0 ? talloc(ws_bytes) : NULL; /* PyTorch's cuBLASLt workspace */
      h1[b] = linear1(l->w1, l->b1, a[b], h, n, d, ws, ws_bytes);
      if (ws) tfree(ws);
      g1[b] = talloc(hid * 4);
      aten(k_gelu, nhid, (float *[]){g1[b], h1[b]}, 2);
      float *h2 = gemm(CUBLAS_OP_N, CUBLAS_OP_N, d, n, h, l->w2, d, g1[b], h);
      a[b + 1] = talloc(in * 4);
      aten(k_aten_add, nin, (float *[]){a[b + 1], a[b], h2}, 3);
      tfree(h2); /* an addition's backward needs neither input */
    }
    float *loss = talloc(4), *g = talloc(in * 4);
    int batch = n;
    void *ma[] = {&nin, &batch, &a[nblocks], &g, &loss};
    dim3 one = {1, 1, 1};
    CU(cudaLaunchKernel(k_mse, one, one, ma, 0, st));
    tfree(a[nblocks]);
    /* the next batch, prefetched while this one trains */
    float *x_next = talloc(in * 4);
    CU(cudaMemcpyAsync(x_next, hx, in * 4, cudaMemcpyHostToDevice, st));
    for (int b = nblocks - 1; b >= 0; b--) {
      Block *l = &blocks[b];
      /* g: the gradient of a[b+1], which is also h2's */
      float *dw2 = gemm(CUBLAS_OP_N, CUBLAS_OP_T, d, h, n, g, d, g1[b], h);
      float *dg = gemm(CUBLAS_OP_T, CUBLAS_OP_N, h, n, d, l->w2, d, g, d);
      tfree(g1[b]);
      float *dh1 = talloc(hid * 4);
      aten(k_gelu_bwd, nhid, (float *[]){dh1, dg, h1[b]}, 3);
      tfree(dg);
      tfree(h1[b]);
      float *dw1 = gemm(CUBLAS_OP_N, CUBLAS_OP_T, h, d, n, dh1, h, a[b], d);
      float *db1 = talloc((size_t)h * 4);
      void *ba[] = {&h, &n, &dh1, &db1};
      launch(k_bias_grad, h, ba);
      float *da = gemm(CUBLAS_OP_T, CUBLAS_OP_N, d, n, h, l->w1, h, dh1, h);
      tfree(dh1);
      void *aa[] = {&nin, &da, &g};
      launch(k_add_, nin, aa); /* the skip connection's gradient accumulates */
      tfree(g);
      if (b > 0) tfree(a[b]);
      g = da;
      sgd(l->w1, &l->v1, dw1, h * d, lr, mu);
      sgd(l->b1, &l->vb1, db1, h, lr, mu);
      sgd(l->w2, &l->v2, dw2, d * h, lr, mu);
      tfree(dw1); tfree(db1); tfree(dw2);
    }
    tfree(g);
    tfree(x);
    x = x_next;
    float hloss;
    CU(cudaMemcpyAsync(&hloss, loss, 4, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    tfree(loss);
    printf("iter %d loss %.9g\n", it, hloss);
  }
  cudaEventRecord(marks[iters], st);
  CU(cudaStreamSynchronize(st));
  print_iteration_times("gemm_mlp", marks, iters);
  for (int i = 0; i <= iters; i++) cudaEventDestroy(marks[i]);
  free(marks);
  tfree(x);

  /* FNV-1a over every weight and bias. */
  uint64_t hsum = 1469598103934665603ull;
  for (int b = 0; b < nblocks; b++) {
    Block *l = &blocks[b];
    float *parts[3] = {l->w1, l->b1, l->w2};
    size_t sizes[3] = {(size_t)h * d, (size_t)h, (size_t)d * h};
    for (int p = 0; p < 3; p++) {
      unsigned char *buf = malloc(sizes[p] * 4);
      CU(cudaMemcpyAsync(buf, parts[p], sizes[p] * 4, cudaMemcpyDeviceToHost, st));
      CU(cudaStreamSynchronize(st));
      for (size_t i = 0; i < sizes[p] * 4; i++) { hsum ^= buf[i]; hsum *= 1099511628211ull; }
      free(buf);
      tfree(parts[p]);
    }
    if (l->v1) { tfree(l->v1); tfree(l->vb1); tfree(l->v2); }
  }
  CU(cudaStreamSynchronize(st));
  printf("checksum %016llx\n", (unsigned long long)hsum);
  cublasLtDestroy(lt);
  cublasDestroy_v2(blas);
  CU(cudaStreamDestroy(st));
  free(hx); free(a); free(h1); free(g1); free(blocks);
  return 0;
}
