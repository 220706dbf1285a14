/* conv_check: runs every convolution algorithm of every direction on random shapes (padding,
 * stride, dilation, groups, both convolution modes, NCHW / NHWC / strided tensors, 2-d and 3-d,
 * alpha and beta not in {0, 1}) through the cuDNN C ABI, and compares each result with an
 * independent naive reference computed here in double precision.
 *
 * Usage: conv_check [SEED] [RANDOM_CASES]. Prints one line per case and a summary line
 * "conv_check: N passed, M failed"; exits 1 on any mismatch (max relative error >= 1e-5,
 * relative to the largest reference magnitude) or API failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define CHECK_DNN(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %s (%d)\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_), s_); exit(1); } } while (0)

static uint64_t rng_state = 88172645463325252ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
  return rng_state;
}
static int rnd(int lo, int hi) { return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1)); }
static float frand(void) { return (float)((next_u64() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }

/* A case: spatial arrays are (d, h, w); 2-d cases have d = 1, filter t = 1. */
typedef struct {
  int nd; /* spatial dims: 2 or 3 */
  int n, c, k, g;
  int in[3], f[3], pad[3], str[3], dil[3];
  int mode;   /* CUDNN_CONVOLUTION or CUDNN_CROSS_CORRELATION */
  int layout; /* 0 packed NCHW, 1 NHWC, 2 padded strides */
  int api_nd; /* use the Nd setters (as PyTorch does) */
} Case;

static int out_dim(const Case *cs, int i) {
  return (cs->in[i] + 2 * cs->pad[i] - cs->dil[i] * (cs->f[i] - 1) - 1) / cs->str[i] + 1;
}

/* Element strides for a (n, c, d, h, w) tensor in the case's layout; returns the extent. */
static size_t strides_for(const Case *cs, const int dims[5], int st[5]) {
  int n = dims[0], c = dims[1], d = dims[2], h = dims[3], w = dims[4];
  if (cs->layout == 1) { /* NHWC (NDHWC) */
    st[1] = 1; st[4] = c; st[3] = c * w; st[2] = c * w * h; st[0] = c * w * h * d;
  } else {
    int wp = cs->layout == 2 ? w + 3 : w; /* padded rows */
    st[4] = 1; st[3] = wp; st[2] = wp * h; st[1] = wp * h * d; st[0] = wp * h * d * c + (cs->layout == 2 ? 5 : 0);
  }
  size_t ext = 1;
  for (int i = 0; i < 5; i++) ext += (size_t)(dims[i] - 1) * st[i];
  (void)n;
  return ext;
}

/* Dense (logical) index <-> strided buffer. */
static void scatter(const double *dense, float *buf, const int dims[5], const int st[5]) {
  size_t i = 0;
  for (int a = 0; a < dims[0]; a++) for (int b = 0; b < dims[1]; b++) for (int c = 0; c < dims[2]; c++)
    for (int d = 0; d < dims[3]; d++) for (int e = 0; e < dims[4]; e++)
      buf[(size_t)a * st[0] + (size_t)b * st[1] + (size_t)c * st[2] + (size_t)d * st[3] + e * st[4]] = (float)dense[i++];
}
static void gather(const float *buf, double *dense, const int dims[5], const int st[5]) {
  size_t i = 0;
  for (int a = 0; a < dims[0]; a++) for (int b = 0; b < dims[1]; b++) for (int c = 0; c < dims[2]; c++)
    for (int d = 0; d < dims[3]; d++) for (int e = 0; e < dims[4]; e++)
      dense[i++] = buf[(size_t)a * st[0] + (size_t)b * st[1] + (size_t)c * st[2] + (size_t)d * st[3] + e * st[4]];
}

static size_t vol(const int dims[5]) { return (size_t)dims[0] * dims[1] * dims[2] * dims[3] * dims[4]; }

/* The reference: for every (y index, x index, w index) tap of the convolution, call back. */
typedef void (*tap_fn)(size_t yi, size_t xi, size_t wi, void *ctx);
static void for_each_tap(const Case *cs, tap_fn f, void *ctx) {
  int o[3] = {out_dim(cs, 0), out_dim(cs, 1), out_dim(cs, 2)};
  int cg = cs->c / cs->g, kg = cs->k / cs->g;
  for (int b = 0; b < cs->n; b++) for (int k = 0; k < cs->k; k++)
    for (int od = 0; od < o[0]; od++) for (int oh = 0; oh < o[1]; oh++) for (int ow = 0; ow < o[2]; ow++) {
      size_t yi = ((((size_t)b * cs->k + k) * o[0] + od) * o[1] + oh) * o[2] + ow;
      for (int ci = 0; ci < cg; ci++) {
        int cx = (k / kg) * cg + ci;
        for (int t = 0; t < cs->f[0]; t++) for (int r = 0; r < cs->f[1]; r++) for (int s = 0; s < cs->f[2]; s++) {
          int id = od * cs->str[0] - cs->pad[0] + t * cs->dil[0];
          int ih = oh * cs->str[1] - cs->pad[1] + r * cs->dil[1];
          int iw = ow * cs->str[2] - cs->pad[2] + s * cs->dil[2];
          if (id < 0 || ih < 0 || iw < 0 || id >= cs->in[0] || ih >= cs->in[1] || iw >= cs->in[2]) continue;
          int ft = t, fr = r, fs = s;
          if (cs->mode == CUDNN_CONVOLUTION) { ft = cs->f[0] - 1 - t; fr = cs->f[1] - 1 - r; fs = cs->f[2] - 1 - s; }
          size_t xi = ((((size_t)b * cs->c + cx) * cs->in[0] + id) * cs->in[1] + ih) * cs->in[2] + iw;
          size_t wi = ((((size_t)k * cg + ci) * cs->f[0] + ft) * cs->f[1] + fr) * cs->f[2] + fs;
          f(yi, xi, wi, ctx);
        }
      }
    }
}
typedef struct { const double *a, *b; double *acc; } TapCtx;
static void tap_fwd(size_t yi, size_t xi, size_t wi, void *p) { TapCtx *c = p; c->acc[yi] += c->a[xi] * c->b[wi]; }
static void tap_bwd_data(size_t yi, size_t xi, size_t wi, void *p) { TapCtx *c = p; c->acc[xi] += c->a[yi] * c->b[wi]; }
static void tap_bwd_filter(size_t yi, size_t xi, size_t wi, void *p) { TapCtx *c = p; c->acc[wi] += c->a[xi] * c->b[yi]; }

static void set_tensor(cudnnTensorDescriptor_t d, const Case *cs, const int dims5[5], const int st5[5]) {
  if (cs->nd == 3) {
    CHECK_DNN(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, 5, dims5, st5));
  } else {
    int dims[4] = {dims5[0], dims5[1], dims5[3], dims5[4]}, st[4] = {st5[0], st5[1], st5[3], st5[4]};
    if (cs->api_nd) CHECK_DNN(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, 4, dims, st));
    else CHECK_DNN(cudnnSetTensor4dDescriptorEx(d, CUDNN_DATA_FLOAT, dims[0], dims[1], dims[2], dims[3],
                                                st[0], st[1], st[2], st[3]));
  }
}

static double max_rel_err(const double *got, const double *ref, size_t n) {
  double scale = 1e-30, err = 0;
  for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  for (size_t i = 0; i < n; i++) if (fabs(got[i] - ref[i]) > err) err = fabs(got[i] - ref[i]);
  if (isnan(err)) return INFINITY;
  return err / scale;
}

static int passed = 0, failed = 0;

static void run_case(cudnnHandle_t h, const Case *cs, int index) {
  int o[3] = {out_dim(cs, 0), out_dim(cs, 1), out_dim(cs, 2)};
  int xdims[5] = {cs->n, cs->c, cs->in[0], cs->in[1], cs->in[2]};
  int ydims[5] = {cs->n, cs->k, o[0], o[1], o[2]};
  int wdims[5] = {cs->k, cs->c / cs->g, cs->f[0], cs->f[1], cs->f[2]};
  int xst[5], yst[5];
  size_t xext = strides_for(cs, xdims, xst), yext = strides_for(cs, ydims, yst);
  size_t xn = vol(xdims), yn = vol(ydims), wn = vol(wdims);

  cudnnTensorDescriptor_t xd, yd; cudnnFilterDescriptor_t wd; cudnnConvolutionDescriptor_t cd;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd)); CHECK_DNN(cudnnCreateTensorDescriptor(&yd));
  CHECK_DNN(cudnnCreateFilterDescriptor(&wd)); CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  set_tensor(xd, cs, xdims, xst);
  set_tensor(yd, cs, ydims, yst);
  if (cs->nd == 3) {
    CHECK_DNN(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, wdims));
    CHECK_DNN(cudnnSetConvolutionNdDescriptor(cd, 3, cs->pad, cs->str, cs->dil, cs->mode, CUDNN_DATA_FLOAT));
  } else if (cs->api_nd) {
    int fd[4] = {wdims[0], wdims[1], wdims[3], wdims[4]};
    CHECK_DNN(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, fd));
    CHECK_DNN(cudnnSetConvolutionNdDescriptor(cd, 2, cs->pad + 1, cs->str + 1, cs->dil + 1, cs->mode, CUDNN_DATA_FLOAT));
  } else {
    CHECK_DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, wdims[0], wdims[1], wdims[3], wdims[4]));
    CHECK_DNN(cudnnSetConvolution2dDescriptor(cd, cs->pad[1], cs->pad[2], cs->str[1], cs->str[2], cs->dil[1],
                                              cs->dil[2], cs->mode, CUDNN_DATA_FLOAT));
  }
  CHECK_DNN(cudnnSetConvolutionGroupCount(cd, cs->g));
  /* Float arithmetic, which the tolerance assumes: at cuDNN's default math, Ampere and later GPUs
     may run float convolutions in TF32 (a 10-bit mantissa). */
  CHECK_DNN(cudnnSetConvolutionMathType(cd, 3 /* CUDNN_FMA_MATH */));
  int nb = cs->nd + 2, od[5];
  CHECK_DNN(cudnnGetConvolutionNdForwardOutputDim(cd, xd, wd, nb, od));
  for (int i = 0; i < nb; i++) {
    int want = cs->nd == 3 ? ydims[i] : (i < 2 ? ydims[i] : ydims[i + 1]);
    if (od[i] != want) { printf("case %d: output dim %d is %d, expected %d\n", index, i, od[i], want); failed++; return; }
  }

  double *x = malloc(xn * sizeof *x), *w = malloc(wn * sizeof *w), *y0 = malloc(yn * sizeof *y0);
  double *dy = malloc(yn * sizeof *dy), *dx0 = malloc(xn * sizeof *dx0), *dw0 = malloc(wn * sizeof *dw0);
  for (size_t i = 0; i < xn; i++) { x[i] = frand(); dx0[i] = frand(); }
  for (size_t i = 0; i < wn; i++) { w[i] = frand(); dw0[i] = frand(); }
  for (size_t i = 0; i < yn; i++) { y0[i] = frand(); dy[i] = frand(); }
  float alpha = 0.75f + 0.5f * (float)(index % 3);
  float beta = index % 4 == 0 ? 0.0f : index % 4 == 2 ? 1.0f : -0.35f; /* 0, 1 and other values */

  /* References. */
  double *ref_y = calloc(yn, sizeof *ref_y), *ref_dx = calloc(xn, sizeof *ref_dx), *ref_dw = calloc(wn, sizeof *ref_dw);
  TapCtx t1 = {x, w, ref_y}; for_each_tap(cs, tap_fwd, &t1);
  TapCtx t2 = {dy, w, ref_dx}; for_each_tap(cs, tap_bwd_data, &t2);
  TapCtx t3 = {x, dy, ref_dw}; for_each_tap(cs, tap_bwd_filter, &t3);
  for (size_t i = 0; i < yn; i++) ref_y[i] = alpha * ref_y[i] + beta * y0[i];
  for (size_t i = 0; i < xn; i++) ref_dx[i] = alpha * ref_dx[i] + beta * dx0[i];
  for (size_t i = 0; i < wn; i++) ref_dw[i] = alpha * ref_dw[i] + beta * dw0[i];

  /* Device buffers: inputs once, outputs reset before every run. */
  float *hx = calloc(xext, 4), *hy = calloc(yext, 4), *hw = calloc(wn, 4), *hbuf = calloc(xext > yext ? (xext > wn ? xext : wn) : (yext > wn ? yext : wn), 4);
  int wst[5] = {wdims[1] * wdims[2] * wdims[3] * wdims[4], wdims[2] * wdims[3] * wdims[4], wdims[3] * wdims[4], wdims[4], 1};
  void *gx, *gw, *gy, *gdy, *gdx, *gdw;
  CHECK_CUDA(cudaMalloc(&gx, xext * 4)); CHECK_CUDA(cudaMalloc(&gdx, xext * 4));
  CHECK_CUDA(cudaMalloc(&gy, yext * 4)); CHECK_CUDA(cudaMalloc(&gdy, yext * 4));
  CHECK_CUDA(cudaMalloc(&gw, wn * 4)); CHECK_CUDA(cudaMalloc(&gdw, wn * 4));
  scatter(x, hx, xdims, xst); CHECK_CUDA(cudaMemcpy(gx, hx, xext * 4, cudaMemcpyHostToDevice));
  scatter(dy, hy, ydims, yst); CHECK_CUDA(cudaMemcpy(gdy, hy, yext * 4, cudaMemcpyHostToDevice));
  scatter(w, hw, wdims, wst); CHECK_CUDA(cudaMemcpy(gw, hw, wn * 4, cudaMemcpyHostToDevice));

  const char *dir_names[3] = {"fwd", "bwd-data", "bwd-filter"};
  int counts[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
  double worst = 0; int ran = 0, unsupported = 0, case_failed = 0;
  char ran_list[3][64] = {{0}};
  for (int dir = 0; dir < 3; dir++) {
    for (int algo = 0; algo < counts[dir]; algo++) {
      size_t ws_size = 0; cudnnStatus_t st;
      if (dir == 0) st = cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_size);
      else if (dir == 1) st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, algo, &ws_size);
      else st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, algo, &ws_size);
      if (st == CUDNN_STATUS_NOT_SUPPORTED) { unsupported++; continue; }
      CHECK_DNN(st);
      void *ws = NULL;
      if (ws_size) CHECK_CUDA(cudaMalloc(&ws, ws_size));
      double *got; const double *ref; size_t n;
      if (dir == 0) {
        scatter(y0, hy, ydims, yst); CHECK_CUDA(cudaMemcpy(gy, hy, yext * 4, cudaMemcpyHostToDevice));
        st = cudnnConvolutionForward(h, &alpha, xd, gx, wd, gw, cd, algo, ws, ws_size, &beta, yd, gy);
        CHECK_CUDA(cudaMemcpy(hy, gy, yext * 4, cudaMemcpyDeviceToHost));
        got = malloc(yn * sizeof *got); gather(hy, got, ydims, yst); ref = ref_y; n = yn;
      } else if (dir == 1) {
        scatter(dx0, hx, xdims, xst); CHECK_CUDA(cudaMemcpy(gdx, hx, xext * 4, cudaMemcpyHostToDevice));
        st = cudnnConvolutionBackwardData(h, &alpha, wd, gw, yd, gdy, cd, algo, ws, ws_size, &beta, xd, gdx);
        CHECK_CUDA(cudaMemcpy(hbuf, gdx, xext * 4, cudaMemcpyDeviceToHost));
        got = malloc(xn * sizeof *got); gather(hbuf, got, xdims, xst); ref = ref_dx; n = xn;
      } else {
        scatter(dw0, hw, wdims, wst); CHECK_CUDA(cudaMemcpy(gdw, hw, wn * 4, cudaMemcpyHostToDevice));
        st = cudnnConvolutionBackwardFilter(h, &alpha, xd, gx, yd, gdy, cd, algo, ws, ws_size, &beta, wd, gdw);
        CHECK_CUDA(cudaMemcpy(hbuf, gdw, wn * 4, cudaMemcpyDeviceToHost));
        got = malloc(wn * sizeof *got); gather(hbuf, got, wdims, wst); ref = ref_dw; n = wn;
      }
      if (st >= 3000 && st < 4000) {
        /* A real cuDNN may refuse at run time what its size query accepted. */
        unsupported++;
        free(got);
        if (ws) CHECK_CUDA(cudaFree(ws));
        continue;
      }
      CHECK_DNN(st);
      double e = max_rel_err(got, ref, n);
      if (e > worst) worst = e;
      if (!(e < 1e-5)) {
        printf("case %d: %s algo %d: max relative error %.3g\n", index, dir_names[dir], algo, e);
        case_failed = 1;
      }
      char tmp[16]; snprintf(tmp, sizeof tmp, "%d", algo);
      strcat(ran_list[dir], tmp);
      ran++;
      free(got);
      if (ws) CHECK_CUDA(cudaFree(ws));
    }
  }
  printf("case %2d: %dd N=%d C=%d K=%d g=%d in=%dx%dx%d f=%dx%dx%d pad=%d,%d,%d str=%d,%d,%d dil=%d,%d,%d %s %s%s "
         "alpha=%.2f beta=%.2f | algos fwd[%s] bwd-data[%s] bwd-filter[%s], %d not supported | max rel err %.2e %s\n",
         index, cs->nd, cs->n, cs->c, cs->k, cs->g, cs->in[0], cs->in[1], cs->in[2], cs->f[0], cs->f[1], cs->f[2],
         cs->pad[0], cs->pad[1], cs->pad[2], cs->str[0], cs->str[1], cs->str[2], cs->dil[0], cs->dil[1], cs->dil[2],
         cs->mode == CUDNN_CONVOLUTION ? "conv" : "xcorr", cs->layout == 0 ? "NCHW" : cs->layout == 1 ? "NHWC" : "strided",
         cs->api_nd ? " Nd-api" : "", alpha, beta, ran_list[0], ran_list[1], ran_list[2], unsupported, worst,
         case_failed ? "FAIL" : "ok");
  if (ran == 0) { printf("case %d: no algorithm ran\n", index); case_failed = 1; }
  if (case_failed) failed++; else passed++;

  cudaFree(gx); cudaFree(gw); cudaFree(gy); cudaFree(gdy); cudaFree(gdx); cudaFree(gdw);
  free(x); free(w); free(y0); free(dy); free(dx0); free(dw0); free(ref_y); free(ref_dx); free(ref_dw);
  free(hx); free(hy); free(hw); free(hbuf);
  cudnnDestroyTensorDescriptor(xd); cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd); cudnnDestroyConvolutionDescriptor(cd);
}

static Case fixed_2d(int n, int c, int k, int g, int h, int w, int r, int s, int p, int st, int dl, int mode, int layout) {
  Case cs = {2, n, c, k, g, {1, h, w}, {1, r, s}, {0, p, p}, {1, st, st}, {1, dl, dl}, mode, layout, 0};
  return cs;
}

int main(int argc, char **argv) {
  uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
  int random_cases = argc > 2 ? atoi(argv[2]) : 12;
  rng_state ^= seed * 0x9E3779B97F4A7C15ull;
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  printf("conv_check: cuDNN %zu, seed %llu\n", cudnnGetVersion(), (unsigned long long)seed);

  /* Fixed cases that reach every algorithm family. */
  Case fixed[] = {
    fixed_2d(2, 4, 6, 1, 8, 8, 3, 3, 1, 1, 1, CUDNN_CROSS_CORRELATION, 0), /* Winograd, FFT, all GEMMs */
    fixed_2d(2, 3, 4, 1, 9, 7, 5, 5, 2, 1, 1, CUDNN_CONVOLUTION, 1),       /* 5x5: Winograd non-fused */
    fixed_2d(3, 6, 4, 2, 7, 9, 3, 3, 1, 2, 1, CUDNN_CROSS_CORRELATION, 2), /* groups, stride 2 */
    fixed_2d(2, 4, 4, 4, 9, 9, 3, 3, 2, 1, 2, CUDNN_CONVOLUTION, 0),       /* depthwise, dilation 2 */
  };
  int idx = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) { fixed[i].api_nd = (int)(i % 2); run_case(h, &fixed[i], idx++); }
  Case three_d = {3, 2, 3, 4, 1, {5, 6, 5}, {3, 2, 3}, {1, 0, 1}, {1, 2, 1}, {1, 1, 2}, CUDNN_CROSS_CORRELATION, 0, 1};
  run_case(h, &three_d, idx++);

  for (int i = 0; i < random_cases; i++) {
    Case cs;
    memset(&cs, 0, sizeof cs);
    cs.nd = 2;
    cs.g = rnd(1, 3);
    cs.n = rnd(1, 3); cs.c = cs.g * rnd(1, 3); cs.k = cs.g * rnd(1, 3);
    cs.in[0] = 1; cs.f[0] = 1; cs.str[0] = 1; cs.dil[0] = 1;
    for (int d = 1; d < 3; d++) {
      cs.f[d] = rnd(1, 5); cs.pad[d] = rnd(0, 2); cs.str[d] = rnd(1, 3); cs.dil[d] = rnd(1, 2);
      int span = cs.dil[d] * (cs.f[d] - 1) + 1;
      cs.in[d] = rnd(span > 3 ? span : 3, 12);
    }
    if (i % 3 == 0) { cs.f[2] = cs.f[1]; cs.str[1] = cs.str[2] = 1; cs.dil[1] = cs.dil[2] = 1; } /* FFT/Winograd */
    cs.mode = rnd(0, 1); cs.layout = rnd(0, 2); cs.api_nd = rnd(0, 1);
    run_case(h, &cs, idx++);
  }
  CHECK_DNN(cudnnDestroy(h));
  printf("conv_check: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
