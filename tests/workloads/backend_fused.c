/* backend_fused: a forward convolution followed by a bias add and a ReLU in one backend graph,
 * as TensorFlow builds for fused conv + bias + activation: the convolution's output and the sum
 * are virtual tensors (no device memory, no variant-pack entry). Heuristics -> configuration ->
 * plan -> execute; compared with the legacy convolution plus bias and ReLU computed here on the
 * host.
 *
 * Prints engines=, results=, workspace_bytes=, max_err=, nonzero= (outputs the ReLU kept),
 * zeros= (outputs it clamped). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

enum { N = 2, C = 3, H = 8, W = 7, K = 5, R = 3 };

static cudnnBackendDescriptor_t make(int type) {
  cudnnBackendDescriptor_t d;
  CHECK(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t dims[4], int is_virtual) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
  int dtype = CUDNN_DATA_FLOAT;
  _Bool v = is_virtual != 0;
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  CHECK(cudnnBackendFinalize(t));
  return t;
}

static cudnnBackendDescriptor_t pointwise2(int mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                           cudnnBackendDescriptor_t y, float alpha2);
static cudnnBackendDescriptor_t pointwise(int mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                          cudnnBackendDescriptor_t y) {
  return pointwise2(mode, x, b, y, 1.0f);
}

/* A pointwise operation whose second operand is scaled by alpha2. */
static cudnnBackendDescriptor_t pointwise2(int mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                           cudnnBackendDescriptor_t y, float alpha2) {
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;
  int prec = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  CHECK(cudnnBackendFinalize(pw));
  op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b) CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  if (alpha2 != 1.0f)
    CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CHECK(cudnnBackendFinalize(op));
  return op;
}

/* With `side_input`: TensorFlow's form, act(conv + 0 * z + bias), its absent side input z
 * given as NULL in the variant pack. */
int main(int argc, char **argv) {
  int side = argc > 1 && !strcmp(argv[1], "side_input");
  int64_t xd[4] = {N, C, H, W}, wd[4] = {K, C, R, R}, yd[4] = {N, K, H, W}, bd[4] = {1, K, 1, 1};
  size_t xn = N * C * H * W, wn = K * C * R * R, yn = N * K * H * W;
  float *hx = malloc(xn * 4), *hw = malloc(wn * 4), hb[K], *got = malloc(yn * 4), *conv = malloc(yn * 4);
  for (size_t i = 0; i < xn; i++) hx[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < wn; i++) hw[i] = (float)((i * 104729) % 89) / 89.0f - 0.5f;
  for (int k = 0; k < K; k++) hb[k] = 0.2f * (float)k - 0.4f;
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  void *x, *w, *b, *y, *yl;
  CHECK(cudaMalloc(&x, xn * 4)); CHECK(cudaMalloc(&w, wn * 4)); CHECK(cudaMalloc(&b, K * 4));
  CHECK(cudaMalloc(&y, yn * 4)); CHECK(cudaMalloc(&yl, yn * 4));
  CHECK(cudaMemcpy(x, hx, xn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw, wn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb, K * 4, cudaMemcpyHostToDevice));

  cudnnBackendDescriptor_t tx = tensor('x', xd, 0), tw = tensor('w', wd, 0), tc = tensor('C', yd, 1);
  cudnnBackendDescriptor_t tb = tensor('b', bd, 0), tsum = tensor('B', yd, 1), ty = tensor('y', yd, 0);
  cudnnBackendDescriptor_t cd = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, pad[2] = {1, 1}, one2[2] = {1, 1};
  int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendFinalize(cd));
  cudnnBackendDescriptor_t cop = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float alpha = 1.0f, beta = 0.0f;
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tc));
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
  CHECK(cudnnBackendSetAttribute(cop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
  CHECK(cudnnBackendFinalize(cop));
  /* Listed out of data-flow order on purpose: cuDNN follows the tensors. */
  cudnnBackendDescriptor_t ops[4] = {pointwise(CUDNN_POINTWISE_RELU_FWD, tsum, NULL, ty), cop,
                                     pointwise(CUDNN_POINTWISE_ADD, tc, tb, tsum), NULL};
  int64_t nops = 3;
  if (side) {
    cudnnBackendDescriptor_t tz = tensor('z', yd, 0), tadd = tensor('A', yd, 1);
    ops[2] = pointwise2(CUDNN_POINTWISE_ADD, tc, tz, tadd, 0.0f);
    ops[3] = pointwise(CUDNN_POINTWISE_ADD, tadd, tb, tsum);
    nops = 4;
  }
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
  CHECK(cudnnBackendFinalize(graph));
  int64_t engines = -1, n = 0;
  CHECK(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &engines));

  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), cfg = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int hm = CUDNN_HEUR_MODE_INSTANT;
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
  CHECK(cudnnBackendFinalize(heur));
  int64_t results = -1;
  CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &results, NULL));
  CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg));
  cudnnBackendDescriptor_t engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t index = -1;
  CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
  cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
  CHECK(cudnnBackendFinalize(plan));
  int64_t ws_size = -1;
  CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws_size));
  void *ws = NULL;
  if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));
  void *ptrs[5] = {x, w, b, y, NULL};
  int64_t uids[5] = {'x', 'w', 'b', 'y', 'z'};
  int64_t nptrs = side ? 5 : 4;
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nptrs, ptrs));
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nptrs, uids));
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  CHECK(cudnnBackendFinalize(pack));
  CHECK(cudnnBackendExecute(h, plan, pack));

  /* The reference: the legacy convolution (validated by conv_check), then bias and ReLU here. */
  cudnnTensorDescriptor_t lx, ly; cudnnFilterDescriptor_t lw; cudnnConvolutionDescriptor_t lc;
  CHECK(cudnnCreateTensorDescriptor(&lx)); CHECK(cudnnCreateTensorDescriptor(&ly));
  CHECK(cudnnCreateFilterDescriptor(&lw)); CHECK(cudnnCreateConvolutionDescriptor(&lc));
  CHECK(cudnnSetTensor4dDescriptor(lx, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CHECK(cudnnSetTensor4dDescriptor(ly, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));
  CHECK(cudnnSetFilter4dDescriptor(lw, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, R));
  CHECK(cudnnSetConvolution2dDescriptor(lc, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CHECK(cudnnConvolutionForward(h, &alpha, lx, x, lw, w, lc, (int)index, ws, (size_t)ws_size, &beta, ly, yl));
  CHECK(cudaMemcpy(got, y, yn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(conv, yl, yn * 4, cudaMemcpyDeviceToHost));
  double max_err = 0;
  int nonzero = 0, zeros = 0;
  for (size_t i = 0; i < yn; i++) {
    int k = (int)((i / (H * W)) % K);
    double want = conv[i] + hb[k];
    if (want < 0) want = 0;
    double e = fabs(got[i] - want);
    if (!(e <= max_err)) max_err = e;
    if (want > 0) nonzero++; else zeros++;
  }
  printf("engines=%lld\nresults=%lld\nengine=%lld\nworkspace_bytes=%lld\n", (long long)engines, (long long)results,
         (long long)index, (long long)ws_size);
  printf("max_err=%g\nnonzero=%d\nzeros=%d\nside_input=%d\n", max_err, nonzero, zeros, side);
  return 0;
}
