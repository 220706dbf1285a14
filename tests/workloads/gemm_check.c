/* gemm_check: calls cuBLAS and cuBLASLt the way PyTorch does (handle, stream, workspace, math
 * mode, cublasSgemm_v2 / cublasGemmEx / the strided-batched GEMMs; Lt descriptors, layouts,
 * preference, heuristic and matmul with bias / ReLU / GELU / bias-gradient epilogues) on random
 * shapes (transposes, leading dimensions larger than the rows, alpha and beta not in {0, 1},
 * beta = 0 over a C full of NaN, host and device pointer modes), and compares every result with
 * an independent naive reference computed here in double precision. Then checks the status codes
 * of bad calls.
 *
 * Usage: gemm_check [SEED] [RANDOM_CASES]   prints one line per case and a summary line
 *                                           "gemm_check: N passed, M failed"; exits 1 on failure
 *        gemm_check timing                  prints simulated times of large and small GEMMs
 *                                           (run it in SIMGPU_MODE=shape) as key=value pairs */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_abi.h"
#include "cuda_abi.h"

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define CHECK_BLAS(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

static uint64_t rng_state = 88172645463325252ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
  return rng_state;
}
static int rnd(int lo, int hi) { return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1)); }
static float frand(void) { return (float)((next_u64() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }

static int passed, failed;
static cudaStream_t stream;

static void *dev_copy(const void *h, size_t bytes) {
  void *d;
  CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 4));
  if (bytes) CHECK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
static void host_copy(void *h, const void *d, size_t bytes) {
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static double gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* op(X)(i, j) of a column-major matrix with leading dimension ld. */
static double op_at(const float *x, int ld, int trans, int i, int j) {
  return trans ? x[j + (size_t)i * ld] : x[i + (size_t)j * ld];
}

/* alpha op(A) op(B) + beta C in double; beta == 0 never reads C. */
static void reference(int m, int n, int k, int ta, int tb, double alpha, const float *a, int lda,
                      const float *b, int ldb, double beta, const float *c, int ldc, double *out) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) s += op_at(a, lda, ta, i, l) * op_at(b, ldb, tb, l, j);
      out[i + (size_t)j * m] = alpha * s + (beta != 0.0 ? beta * c[i + (size_t)j * ldc] : 0.0);
    }
}

/* Compares an m x n result (leading dimension ld) with the reference; the gaps must keep `gap`. */
static int compare(const char *what, const float *got, int ld, int m, int n, const double *ref, float gap) {
  double maxref = 1.0, maxerr = 0.0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double r = ref[i + (size_t)j * m], g = got[i + (size_t)j * ld];
      if (fabs(r) > maxref) maxref = fabs(r);
      double e = fabs(g - r);
      if (!(e <= maxerr)) maxerr = isnan(e) ? INFINITY : e;
    }
  int gaps_ok = 1;
  for (int j = 0; j < n; j++)
    for (int i = m; i < ld; i++)
      if (got[i + (size_t)j * ld] != gap) gaps_ok = 0;
  int ok = maxerr / maxref < 1e-5 && gaps_ok;
  if (!ok) printf("  %s: max relative error %.3g%s\n", what, maxerr / maxref, gaps_ok ? "" : ", padding overwritten");
  return ok;
}

static const float GAP = 12345.0f;

/* One random case through the four cuBLAS GEMM entry points. */
static int blas_case(cublasHandle_t h, int id) {
  int m = rnd(1, 40), n = rnd(1, 40), k = rnd(1, 40), ta = rnd(0, 1), tb = rnd(0, 1), batch = rnd(1, 3);
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = ar + rnd(0, 3), ldb = br + rnd(0, 3), ldc = m + rnd(0, 3);
  long long sa = (long long)lda * ac + rnd(0, 5), sb = (long long)ldb * bc + rnd(0, 5), sc = (long long)ldc * n + rnd(0, 5);
  /* Every third case has beta = 0 over a C of NaN; odd cases read alpha and beta on the device. */
  float alpha = 2.0f * frand(), beta = id % 3 == 0 ? 0.0f : frand();
  int device_scales = id & 1;
  size_t na = (size_t)sa * batch, nb = (size_t)sb * batch, nc = (size_t)sc * batch;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c0 = malloc(nc * 4), *c = malloc(nc * 4);
  double *ref = malloc((size_t)m * n * sizeof(double));
  for (size_t i = 0; i < na; i++) a[i] = frand();
  for (size_t i = 0; i < nb; i++) b[i] = frand();
  for (size_t i = 0; i < nc; i++) c0[i] = GAP;
  for (int bi = 0; bi < batch; bi++)
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) c0[bi * sc + i + (size_t)j * ldc] = beta == 0.0f ? NAN : frand();
  float *da = dev_copy(a, na * 4), *db = dev_copy(b, nb * 4), *dc = dev_copy(c0, nc * 4);
  float scales[2] = {alpha, beta};
  float *dscales = dev_copy(scales, sizeof scales);
  const float *pa = device_scales ? dscales : &alpha, *pb = device_scales ? dscales + 1 : &beta;
  CHECK_BLAS(cublasSetPointerMode_v2(h, device_scales ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
  int ok = 1;
  for (int path = 0; path < 4; path++) {
    CHECK_CUDA(cudaMemcpy(dc, c0, nc * 4, cudaMemcpyHostToDevice));
    int nbatch = path < 2 ? 1 : batch;
    switch (path) {
      case 0: CHECK_BLAS(cublasSgemm_v2(h, ta, tb, m, n, k, pa, da, lda, db, ldb, pb, dc, ldc)); break;
      case 1: CHECK_BLAS(cublasGemmEx(h, ta, tb, m, n, k, pa, da, CUDA_R_32F, lda, db, CUDA_R_32F, ldb, pb, dc,
                                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)); break;
      case 2: CHECK_BLAS(cublasSgemmStridedBatched(h, ta, tb, m, n, k, pa, da, lda, sa, db, ldb, sb, pb, dc, ldc, sc,
                                                   batch)); break;
      default: CHECK_BLAS(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, pa, da, CUDA_R_32F, lda, sa, db, CUDA_R_32F,
                                                     ldb, sb, pb, dc, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                                     CUBLAS_GEMM_DEFAULT)); break;
    }
    host_copy(c, dc, nc * 4);
    static const char *names[] = {"cublasSgemm_v2", "cublasGemmEx", "cublasSgemmStridedBatched",
                                  "cublasGemmStridedBatchedEx"};
    for (int bi = 0; bi < nbatch; bi++) {
      reference(m, n, k, ta, tb, alpha, a + bi * sa, lda, b + bi * sb, ldb, beta, c0 + bi * sc, ldc, ref);
      ok &= compare(names[path], c + bi * sc, ldc, m, n, ref, GAP);
    }
  }
  CHECK_BLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
  printf("blas case %d: m=%d n=%d k=%d op=%c%c ld=%d,%d,%d batch=%d beta=%s scales=%s: %s\n", id, m, n, k,
         ta ? 'T' : 'N', tb ? 'T' : 'N', lda, ldb, ldc, batch, beta == 0.0f ? "0" : "x",
         device_scales ? "device" : "host", ok ? "ok" : "FAIL");
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dc)); CHECK_CUDA(cudaFree(dscales));
  free(a); free(b); free(c0); free(c); free(ref);
  return ok;
}

/* One random case through cuBLASLt as torch's Linear does: C and D the same matrix. */
static int lt_case(cublasHandle_t h, void *ws, size_t ws_size, int epilogue, int id) {
  int m = rnd(1, 40), n = rnd(1, 40), k = rnd(1, 40), ta = rnd(0, 1), tb = rnd(0, 1);
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = ar + rnd(0, 3), ldb = br + rnd(0, 3), ldc = m + rnd(0, 3);
  int aux_ld = (m + 7) / 8 * 8;
  float alpha = 2.0f * frand(), beta = rnd(0, 1) ? 0.0f : frand();
  size_t na = (size_t)lda * ac, nb = (size_t)ldb * bc, nc = (size_t)ldc * n, naux = (size_t)aux_ld * n;
  int bias_len = epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c0 = malloc(nc * 4), *c = malloc(nc * 4);
  float *bias = malloc((size_t)bias_len * 4), *aux = malloc(naux * 4);
  double *ref = malloc((size_t)m * n * sizeof(double));
  for (size_t i = 0; i < na; i++) a[i] = frand();
  for (size_t i = 0; i < nb; i++) b[i] = frand();
  for (size_t i = 0; i < nc; i++) c0[i] = GAP;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) c0[i + (size_t)j * ldc] = beta == 0.0f ? NAN : frand();
  for (int i = 0; i < bias_len; i++) bias[i] = frand();
  float *da = dev_copy(a, na * 4), *db = dev_copy(b, nb * 4), *dc = dev_copy(c0, nc * 4);
  float *dbias = dev_copy(bias, (size_t)bias_len * 4), *daux = dev_copy(aux, naux * 4);

  cublasLtMatmulDesc_t desc;
  CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t opa = ta, opb = tb;
  uint32_t epi = (uint32_t)epilogue;
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_GELU) {
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
  }
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    int64_t ld = aux_ld;
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ar, ac, lda));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, br, bc, ldb));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
  cublasLtMatmulPreference_t pref;
  CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t max_ws = ws_size;
  uint32_t align = 16;
  CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
  for (int at = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; at <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; at++)
    CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, at, &align, sizeof align));
  cublasLtMatmulHeuristicResult_t res;
  int returned = 0;
  CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, la, lb, lc, lc, pref, 1, &res, &returned));
  int ok = returned == 1 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ws_size;
  CHECK_BLAS(cublasLtMatmul((cublasLtHandle_t)h, desc, &alpha, da, la, db, lb, &beta, dc, lc, dc, lc, &res.algo, ws,
                            ws_size, stream));
  host_copy(c, dc, nc * 4);
  reference(m, n, k, ta, tb, alpha, a, lda, b, ldb, beta, c0, ldc, ref);
  double *want_bias = calloc((size_t)bias_len, sizeof(double));
  double *want_aux = calloc((size_t)m * n, sizeof(double));
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double *t = &ref[i + (size_t)j * m];
      if (epilogue & CUBLASLT_EPILOGUE_BIAS) *t += bias[i];
      want_aux[i + (size_t)j * m] = *t;
      if (epilogue & CUBLASLT_EPILOGUE_RELU) *t = *t > 0 ? *t : 0;
      if (epilogue & CUBLASLT_EPILOGUE_GELU) *t = gelu(*t);
    }
  ok &= compare("cublasLtMatmul D", c, ldc, m, n, ref, GAP);
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    host_copy(aux, daux, naux * 4);
    /* Padding rows of the aux matrix are not the library's: compare only the m rows. */
    for (int j = 0; j < n; j++)
      for (int i = m; i < aux_ld; i++) aux[i + (size_t)j * aux_ld] = GAP;
    ok &= compare("cublasLtMatmul GELU input (aux)", aux, aux_ld, m, n, want_aux, GAP);
  }
  if (epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    float *got = malloc((size_t)n * 4);
    host_copy(got, dbias, (size_t)n * 4);
    for (int j = 0; j < n; j++)
      for (int l = 0; l < k; l++) want_bias[j] += op_at(b, ldb, tb, l, j);
    ok &= compare("cublasLtMatmul bias gradient", got, 1, 1, n, want_bias, GAP);
    free(got);
  }
  printf("lt case %d: epilogue=%d m=%d n=%d k=%d op=%c%c ld=%d,%d,%d beta=%s ws=%zu waves=%.3f: %s\n", id, epilogue,
         m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N', lda, ldb, ldc, beta == 0.0f ? "0" : "x", res.workspaceSize,
         res.wavesCount, ok ? "ok" : "FAIL");
  CHECK_BLAS(cublasLtMatmulPreferenceDestroy(pref));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(la));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lb));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lc));
  CHECK_BLAS(cublasLtMatmulDescDestroy(desc));
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dc));
  CHECK_CUDA(cudaFree(dbias)); CHECK_CUDA(cudaFree(daux));
  free(a); free(b); free(c0); free(c); free(bias); free(aux); free(ref); free(want_bias); free(want_aux);
  return ok;
}

/* D = epilogue(A B) with A m x k, B k x n, D m x n, all packed column-major, on the device. */
static void lt_plain(cublasHandle_t h, void *ws, size_t ws_size, int epilogue, int m, int n, int k, const float *a,
                     const float *b, float *d, float *bias, void *aux, int64_t aux_ld) {
  float one = 1.0f, zero = 0.0f;
  cublasLtMatmulDesc_t desc;
  CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  uint32_t epi = (uint32_t)epilogue;
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (aux) {
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
  CHECK_BLAS(cublasLtMatmul((cublasLtHandle_t)h, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, NULL, ws, ws_size,
                            stream));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(la));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lb));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(ld));
  CHECK_BLAS(cublasLtMatmulDescDestroy(desc));
}

static double gelu_grad(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

/* Training through Lt epilogues: a forward GEMM saves the activation's input (GELU) or its
 * bit-mask (ReLU) in the aux buffer; the backward GEMM multiplies its product by the activation's
 * derivative read back from it and reduces the bias gradient over the columns. BGRADA reduces
 * op(A) over k. Each checked against the reference. */
static int lt_backward(cublasHandle_t h, void *ws, size_t ws_size, int relu, int id) {
  int m = rnd(1, 40), n = rnd(1, 40), k = rnd(1, 40), k2 = rnd(1, 40);
  int64_t aux_ld = relu ? (m + 127) / 128 * 128 : (m + 7) / 8 * 8;
  size_t aux_bytes = relu ? (size_t)(aux_ld * n + 7) / 8 : (size_t)aux_ld * n * 4;
  float *a = malloc(m * k * 4), *b = malloc(k * n * 4), *g1 = malloc(m * k2 * 4), *g2 = malloc(k2 * n * 4);
  float *bias = malloc(m * 4), *d = malloc(m * n * 4), *grad = malloc(m * 4);
  double *z = malloc((size_t)m * n * sizeof(double)), *dref = malloc((size_t)m * n * sizeof(double));
  double *bref = calloc(m, sizeof(double));
  for (int i = 0; i < m * k; i++) a[i] = frand();
  for (int i = 0; i < k * n; i++) b[i] = frand();
  for (int i = 0; i < m * k2; i++) g1[i] = frand();
  for (int i = 0; i < k2 * n; i++) g2[i] = frand();
  for (int i = 0; i < m; i++) bias[i] = frand();
  float *da = dev_copy(a, m * k * 4), *db = dev_copy(b, k * n * 4), *dg1 = dev_copy(g1, m * k2 * 4);
  float *dg2 = dev_copy(g2, k2 * n * 4), *dbias = dev_copy(bias, m * 4), *dd = dev_copy(d, m * n * 4);
  void *daux;
  CHECK_CUDA(cudaMalloc(&daux, aux_bytes));
  lt_plain(h, ws, ws_size, relu ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS, m, n, k, da, db,
           dd, dbias, daux, aux_ld);
  reference(m, n, k, 0, 0, 1.0, a, m, b, k, 0.0, NULL, m, z);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) z[i + j * m] += bias[i];
  lt_plain(h, ws, ws_size, relu ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DGELU_BGRAD, m, n, k2, dg1, dg2,
           dd, dbias, daux, aux_ld);
  host_copy(d, dd, m * n * 4);
  host_copy(grad, dbias, m * 4);
  reference(m, n, k2, 0, 0, 1.0, g1, m, g2, k2, 0.0, NULL, m, dref);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double zz = z[i + j * m];
      dref[i + j * m] *= relu ? (zz > 0 ? 1.0 : 0.0) : gelu_grad(zz);
      bref[i] += dref[i + j * m];
    }
  int ok = compare("backward D", d, m, m, n, dref, GAP);
  ok &= compare("bias gradient", grad, 1, 1, m, bref, GAP);
  /* BGRADA: the bias gradient is op(A) summed over k, one per row of D. */
  lt_plain(h, ws, ws_size, CUBLASLT_EPILOGUE_BGRADA, m, n, k, da, db, dd, dbias, NULL, 0);
  host_copy(grad, dbias, m * 4);
  for (int i = 0; i < m; i++) {
    bref[i] = 0;
    for (int l = 0; l < k; l++) bref[i] += a[i + l * m];
  }
  ok &= compare("BGRADA bias gradient", grad, 1, 1, m, bref, GAP);
  printf("lt backward case %d: %s m=%d n=%d k=%d,%d aux_ld=%lld: %s\n", id, relu ? "relu" : "gelu", m, n, k, k2,
         (long long)aux_ld, ok ? "ok" : "FAIL");
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dg1)); CHECK_CUDA(cudaFree(dg2));
  CHECK_CUDA(cudaFree(dbias)); CHECK_CUDA(cudaFree(dd)); CHECK_CUDA(cudaFree(daux));
  free(a); free(b); free(g1); free(g2); free(bias); free(d); free(grad); free(z); free(dref); free(bref);
  return ok;
}

/* A strided batch through Lt layouts (BATCH_COUNT, STRIDED_BATCH_OFFSET) with a bias per
 * batch (BIAS_BATCH_STRIDE), as a batched linear layer would. */
static int lt_batched(cublasHandle_t h, void *ws, size_t ws_size, int id) {
  int m = rnd(1, 30), n = rnd(1, 30), k = rnd(1, 30);
  int32_t batch = rnd(2, 4);
  int64_t sa = (int64_t)m * k + rnd(0, 4), sb = (int64_t)k * n + rnd(0, 4), sd = (int64_t)m * n + rnd(0, 4);
  int64_t sbias = m + rnd(0, 3);
  float *a = malloc(sa * batch * 4), *b = malloc(sb * batch * 4), *d = malloc(sd * batch * 4);
  float *bias = malloc(sbias * batch * 4);
  double *ref = malloc((size_t)m * n * sizeof(double));
  for (int64_t i = 0; i < sa * batch; i++) a[i] = frand();
  for (int64_t i = 0; i < sb * batch; i++) b[i] = frand();
  for (int64_t i = 0; i < sd * batch; i++) d[i] = GAP;
  for (int64_t i = 0; i < sbias * batch; i++) bias[i] = frand();
  float *da = dev_copy(a, sa * batch * 4), *db = dev_copy(b, sb * batch * 4), *dd = dev_copy(d, sd * batch * 4);
  float *dbias = dev_copy(bias, sbias * batch * 4);
  cublasLtMatmulDesc_t desc;
  CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &sbias, sizeof sbias));
  cublasLtMatrixLayout_t l[3];
  int rows[3] = {m, k, m}, cols[3] = {k, n, n};
  int64_t strides[3] = {sa, sb, sd};
  for (int i = 0; i < 3; i++) {
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&l[i], CUDA_R_32F, rows[i], cols[i], rows[i]));
    CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                sizeof strides[i]));
  }
  float alpha = frand(), beta = 0.0f;
  CHECK_BLAS(cublasLtMatmul((cublasLtHandle_t)h, desc, &alpha, da, l[0], db, l[1], &beta, dd, l[2], dd, l[2], NULL, ws,
                            ws_size, stream));
  host_copy(d, dd, sd * batch * 4);
  int ok = 1;
  for (int bi = 0; bi < batch; bi++) {
    reference(m, n, k, 0, 0, alpha, a + bi * sa, m, b + bi * sb, k, 0.0, NULL, m, ref);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) ref[i + j * m] += bias[bi * sbias + i];
    ok &= compare("batched cublasLtMatmul", d + bi * sd, m, m, n, ref, GAP);
  }
  /* Between the matrices of the batch, nothing is written. */
  for (int bi = 0; bi < batch; bi++)
    for (int64_t i = (int64_t)m * n; i < sd; i++) ok &= d[bi * sd + i] == GAP;
  printf("lt batched case %d: m=%d n=%d k=%d batch=%d: %s\n", id, m, n, k, batch, ok ? "ok" : "FAIL");
  for (int i = 0; i < 3; i++) CHECK_BLAS(cublasLtMatrixLayoutDestroy(l[i]));
  CHECK_BLAS(cublasLtMatmulDescDestroy(desc));
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dd)); CHECK_CUDA(cudaFree(dbias));
  free(a); free(b); free(d); free(bias); free(ref);
  return ok;
}

static void expect(const char *what, int got, int want) {
  int ok = got == want;
  printf("status %s: %d (want %d): %s\n", what, got, want, ok ? "ok" : "FAIL");
  if (ok) passed++; else failed++;
}

/* Bad calls: the statuses the real library returns. */
static void statuses(cublasHandle_t h, void *ws, size_t ws_size) {
  float one = 1.0f, zero = 0.0f;
  float *d;
  CHECK_CUDA(cudaMalloc((void **)&d, 64 * 64 * 4));
  expect("sgemm m<0", cublasSgemm_v2(h, 0, 0, -1, 4, 4, &one, d, 4, d, 4, &zero, d, 4), CUBLAS_STATUS_INVALID_VALUE);
  expect("sgemm lda<m", cublasSgemm_v2(h, 0, 0, 8, 4, 4, &one, d, 4, d, 4, &zero, d, 8), CUBLAS_STATUS_INVALID_VALUE);
  expect("sgemm ldb<k (op T)", cublasSgemm_v2(h, 0, 1, 4, 8, 4, &one, d, 4, d, 4, &zero, d, 4),
         CUBLAS_STATUS_INVALID_VALUE);
  expect("sgemm transa=7", cublasSgemm_v2(h, 7, 0, 4, 4, 4, &one, d, 4, d, 4, &zero, d, 4), CUBLAS_STATUS_INVALID_VALUE);
  expect("sgemm m=0 (quick return)", cublasSgemm_v2(h, 0, 0, 0, 4, 4, &one, d, 1, d, 4, &zero, d, 1),
         CUBLAS_STATUS_SUCCESS);
  expect("gemmex fp32 inputs into fp16 C", cublasGemmEx(h, 0, 0, 4, 4, 4, &one, d, CUDA_R_32F, 4, d, CUDA_R_32F, 4,
                                                        &zero, d, CUDA_R_16F, 4, CUBLAS_COMPUTE_32F, -1),
         CUBLAS_STATUS_NOT_SUPPORTED);
  expect("gemmex A fp16, B fp32", cublasGemmEx(h, 0, 0, 4, 4, 4, &one, d, CUDA_R_16F, 4, d, CUDA_R_32F, 4, &zero, d,
                                               CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, -1),
         CUBLAS_STATUS_NOT_SUPPORTED);
  expect("math mode 5", cublasSetMathMode(h, 5), CUBLAS_STATUS_INVALID_VALUE);
  expect("pointer mode 2", cublasSetPointerMode_v2(h, 2), CUBLAS_STATUS_INVALID_VALUE);
  expect("workspace not 256-aligned", cublasSetWorkspace_v2(h, (char *)ws + 4, 1024), CUBLAS_STATUS_INVALID_VALUE);

  /* A destroyed handle is not initialised. */
  cublasHandle_t dead;
  CHECK_BLAS(cublasCreate_v2(&dead));
  CHECK_BLAS(cublasDestroy_v2(dead));
  expect("sgemm on a destroyed handle", cublasSgemm_v2(dead, 0, 0, 4, 4, 4, &one, d, 4, d, 4, &zero, d, 4),
         CUBLAS_STATUS_NOT_INITIALIZED);
  expect("set stream on a destroyed handle", cublasSetStream_v2(dead, stream), CUBLAS_STATUS_NOT_INITIALIZED);

  /* Lt: attribute sizes, mismatched layouts, workspace the algorithm needs. */
  cublasLtMatmulDesc_t desc;
  CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int64_t wide = 1;
  expect("desc attribute of the wrong size", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide,
                                                                            sizeof wide), CUBLAS_STATUS_INVALID_VALUE);
  size_t need = 0;
  expect("desc attribute size query", cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, NULL, 0,
                                                                     &need), CUBLAS_STATUS_SUCCESS);
  expect("bias pointer is 8 bytes", (int)need, 8);
  cublasLtMatrixLayout_t la, lb, lc, lbad;
  int M = 64, N = 64, K = 16384;
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lbad, CUDA_R_32F, K + 1, N, K + 1));
  cublasLtMatmulPreference_t pref;
  CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t max_ws = ws_size;
  CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
  cublasLtMatmulHeuristicResult_t res[4];
  int returned = 0;
  expect("heuristic k mismatch", cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, la, lbad, lc, lc, pref, 4,
                                                                res, &returned), CUBLAS_STATUS_INVALID_VALUE);
  expect("heuristic asks for 0", cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, la, lb, lc, lc, pref, 0,
                                                                res, &returned), CUBLAS_STATUS_INVALID_VALUE);
  CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, la, lb, lc, lc, pref, 4, res, &returned));
  int within = returned >= 1;
  for (int i = 0; i < returned; i++) within &= res[i].workspaceSize <= ws_size;
  expect("heuristic algos within the max workspace", within, 1);
  /* A thin, deep GEMM: the best algo splits k and needs workspace; given less, the call fails. */
  expect("best algo of a thin deep GEMM uses workspace", res[0].workspaceSize > 0, 1);
  float *big;
  CHECK_CUDA(cudaMalloc((void **)&big, (size_t)K * (M + N) * 4 + (size_t)M * N * 4));
  float *A = big, *B = big + (size_t)M * K, *C = B + (size_t)K * N;
  expect("matmul with less workspace than its algo needs",
         cublasLtMatmul((cublasLtHandle_t)h, desc, &one, A, la, B, lb, &zero, C, lc, C, lc, &res[0].algo, ws,
                        res[0].workspaceSize - 256, stream), CUBLAS_STATUS_INVALID_VALUE);
  expect("matmul with the heuristic's algo", cublasLtMatmul((cublasLtHandle_t)h, desc, &one, A, la, B, lb, &zero, C,
                                                            lc, C, lc, &res[0].algo, ws, ws_size, stream),
         CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t junk;
  memset(&junk, 0x5a, sizeof junk);
  expect("matmul with an algo it never made", cublasLtMatmul((cublasLtHandle_t)h, desc, &one, A, la, B, lb, &zero, C,
                                                             lc, C, lc, &junk, ws, ws_size, stream),
         CUBLAS_STATUS_INVALID_VALUE);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_BLAS(cublasLtMatmulPreferenceDestroy(pref));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(la));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lb));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lc));
  CHECK_BLAS(cublasLtMatrixLayoutDestroy(lbad));
  CHECK_BLAS(cublasLtMatmulDescDestroy(desc));
  CHECK_CUDA(cudaFree(big));
  CHECK_CUDA(cudaFree(d));
}

/* Max relative error of an m x n FP32 result against the reference. */
static double rel_error(const float *got, const double *ref, int m, int n) {
  double maxref = 1.0, maxerr = 0.0;
  for (int i = 0; i < m * n; i++) {
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    double e = fabs(got[i] - ref[i]);
    if (!(e <= maxerr)) maxerr = isnan(e) ? INFINITY : e;
  }
  return maxerr / maxref;
}

/* Reduced precisions: BF16 inputs (the upper half of an FP32), and TF32 tensor-core math, which
 * rounds FP32 inputs to 10 mantissa bits: exact on values that fit, visibly rounded on others. */
static void precisions(cublasHandle_t h) {
  int m = 24, n = 20, k = 48;
  float one = 1.0f, zero = 0.0f;
  float *a = malloc(m * k * 4), *b = malloc(k * n * 4), *c = malloc(m * n * 4);
  uint16_t *a16 = malloc(m * k * 2), *b16 = malloc(k * n * 2);
  double *ref = malloc((size_t)m * n * sizeof(double));
  /* Multiples of 1/64 in [-1, 1]: exact in BF16 and TF32. */
  for (int i = 0; i < m * k; i++) a[i] = (float)rnd(-64, 64) / 64.0f;
  for (int i = 0; i < k * n; i++) b[i] = (float)rnd(-64, 64) / 64.0f;
  for (int i = 0; i < m * k; i++) { uint32_t u; memcpy(&u, &a[i], 4); a16[i] = (uint16_t)(u >> 16); }
  for (int i = 0; i < k * n; i++) { uint32_t u; memcpy(&u, &b[i], 4); b16[i] = (uint16_t)(u >> 16); }
  reference(m, n, k, 0, 0, 1.0, a, m, b, k, 0.0, NULL, m, ref);
  void *da = dev_copy(a16, m * k * 2), *db = dev_copy(b16, k * n * 2), *dc = dev_copy(c, m * n * 4);
  CHECK_BLAS(cublasGemmEx(h, 0, 0, m, n, k, &one, da, CUDA_R_16BF, m, db, CUDA_R_16BF, k, &zero, dc, CUDA_R_32F, m,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  host_copy(c, dc, m * n * 4);
  expect("bf16 inputs, fp32 output: exact", rel_error(c, ref, m, n) < 1e-6, 1);
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db));
  da = dev_copy(a, m * k * 4); db = dev_copy(b, k * n * 4);
  CHECK_BLAS(cublasGemmEx(h, 0, 0, m, n, k, &one, da, CUDA_R_32F, m, db, CUDA_R_32F, k, &zero, dc, CUDA_R_32F, m,
                          CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
  host_copy(c, dc, m * n * 4);
  expect("tf32 on values that fit in tf32: exact", rel_error(c, ref, m, n) < 1e-6, 1);
  /* Full FP32 mantissas: FP32 math stays within FP32 rounding, TF32 math does not (on a device
   * with tensor cores; on one without, TF32 runs as FP32). */
  for (int i = 0; i < m * k; i++) a[i] = frand();
  for (int i = 0; i < k * n; i++) b[i] = frand();
  reference(m, n, k, 0, 0, 1.0, a, m, b, k, 0.0, NULL, m, ref);
  CHECK_CUDA(cudaMemcpy(da, a, m * k * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(db, b, k * n * 4, cudaMemcpyHostToDevice));
  CHECK_BLAS(cublasGemmEx(h, 0, 0, m, n, k, &one, da, CUDA_R_32F, m, db, CUDA_R_32F, k, &zero, dc, CUDA_R_32F, m,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  host_copy(c, dc, m * n * 4);
  double fp32 = rel_error(c, ref, m, n);
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  CHECK_BLAS(cublasSgemm_v2(h, 0, 0, m, n, k, &one, da, m, db, k, &zero, dc, m));
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  host_copy(c, dc, m * n * 4);
  double tf32 = rel_error(c, ref, m, n);
  printf("fp32_error=%.3g tf32_error=%.3g\n", fp32, tf32);
  expect("fp32 math within fp32 rounding", fp32 < 1e-5, 1);
  expect("tf32 math mode within tf32 rounding", tf32 < 5e-3, 1);
  CHECK_CUDA(cudaFree(da)); CHECK_CUDA(cudaFree(db)); CHECK_CUDA(cudaFree(dc));
  free(a); free(b); free(c); free(a16); free(b16); free(ref);
}

/* Simulated milliseconds of one GEMM, from events around it on the handle's stream. */
static double time_gemm(cublasHandle_t h, int m, int n, int k, int type, int compute, void *buf) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  float one = 1.0f, zero = 0.0f;
  CHECK_CUDA(cudaEventRecord(e0, stream));
  CHECK_BLAS(cublasGemmEx(h, 0, 0, m, n, k, &one, buf, type, m, buf, type, k, &zero, buf, type, m, compute,
                          CUBLAS_GEMM_DEFAULT));
  CHECK_CUDA(cudaEventRecord(e1, stream));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return ms;
}

static void timing(cublasHandle_t h) {
  void *buf;
  int big = 8192;
  CHECK_CUDA(cudaMalloc(&buf, (size_t)big * big * 4));
  printf("fp32_ms=%.6f ", time_gemm(h, big, big, big, CUDA_R_32F, CUBLAS_COMPUTE_32F, buf));
  printf("tf32_ms=%.6f ", time_gemm(h, big, big, big, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, buf));
  printf("fp16_ms=%.6f ", time_gemm(h, big, big, big, CUDA_R_16F, CUBLAS_COMPUTE_32F, buf));
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  printf("tf32_math_mode_ms=%.6f ", time_gemm(h, big, big, big, CUDA_R_32F, CUBLAS_COMPUTE_32F, buf));
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  printf("small_ms=%.6f ", time_gemm(h, 64, 64, 64, CUDA_R_32F, CUBLAS_COMPUTE_32F, buf));
  printf("bert_qkv_ms=%.6f\n", time_gemm(h, 2304, 4096, 768, CUDA_R_32F, CUBLAS_COMPUTE_32F, buf));
  CHECK_CUDA(cudaFree(buf));
}

int main(int argc, char **argv) {
  int timing_mode = argc > 1 && strcmp(argv[1], "timing") == 0;
  if (argc > 1 && !timing_mode) rng_state ^= strtoull(argv[1], NULL, 10) * 0x9E3779B97F4A7C15ull;
  int cases = argc > 2 ? atoi(argv[2]) : 6;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  /* As torch: a handle, its stream, a workspace of its own, the default math mode. */
  cublasHandle_t h;
  CHECK_BLAS(cublasCreate_v2(&h));
  CHECK_BLAS(cublasSetStream_v2(h, stream));
  size_t ws_size = 4 << 20;
  void *ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_size));
  CHECK_BLAS(cublasSetWorkspace_v2(h, ws, ws_size));
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  int mode = -1;
  CHECK_BLAS(cublasGetMathMode(h, &mode));
  if (mode != CUBLAS_DEFAULT_MATH) { fprintf(stderr, "math mode %d\n", mode); return 1; }
  if (timing_mode) {
    timing(h);
    return 0;
  }
  printf("cublasLt version %zu\n", cublasLtGetVersion());
  for (int i = 0; i < cases; i++) {
    if (blas_case(h, i)) passed++; else failed++;
  }
  static const int epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                                  CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                  CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_GELU};
  for (int i = 0; i < cases; i++) {
    for (size_t e = 0; e < sizeof epilogues / sizeof *epilogues; e++) {
      if (lt_case(h, ws, ws_size, epilogues[e], i)) passed++; else failed++;
    }
  }
  for (int i = 0; i < cases; i++) {
    if (lt_backward(h, ws, ws_size, i & 1, i)) passed++; else failed++;
    if (lt_batched(h, ws, ws_size, i)) passed++; else failed++;
  }
  statuses(h, ws, ws_size);
  precisions(h);
  CHECK_BLAS(cublasDestroy_v2(h));
  CHECK_CUDA(cudaFree(ws));
  CHECK_CUDA(cudaStreamDestroy(stream));
  printf("gemm_check: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
