/* backend_conv: a forward convolution through the cuDNN backend (graph) API, the way PyTorch's
 * default path and TensorFlow run convolutions, compared bit for bit with the same convolution
 * through the legacy API (which conv_check validates against a reference).
 *
 * Prints x=, w=, y=, ws= (the device pointers, for the tests' attribution checks),
 * workspace_bytes=, backend_matches_legacy=ok|wrong. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t dims[4]) {
  cudnnBackendDescriptor_t t;
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
  int dtype = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CHECK(cudnnBackendFinalize(t));
  return t;
}

int main(void) {
  enum { N = 2, C = 3, H = 10, W = 9, K = 4, R = 3 };
  int64_t xd[4] = {N, C, H, W}, wd[4] = {K, C, R, R}, yd[4] = {N, K, H, W};
  size_t xn = N * C * H * W, wn = K * C * R * R, yn = N * K * H * W;
  float *hx = malloc(xn * 4), *hw = malloc(wn * 4), *y1 = malloc(yn * 4), *y2 = malloc(yn * 4);
  for (size_t i = 0; i < xn; i++) hx[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < wn; i++) hw[i] = (float)((i * 104729) % 89) / 89.0f - 0.5f;
  void *x, *w, *y, *yl;
  CHECK(cudaMalloc(&x, xn * 4)); CHECK(cudaMalloc(&w, wn * 4));
  CHECK(cudaMalloc(&y, yn * 4)); CHECK(cudaMalloc(&yl, yn * 4));
  CHECK(cudaMemcpy(x, hx, xn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw, wn * 4, cudaMemcpyHostToDevice));
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));

  /* The graph: one forward convolution, pad 1, stride 1. */
  cudnnBackendDescriptor_t tx = tensor('x', xd), tw = tensor('w', wd), ty = tensor('y', yd), conv, op, graph, engine, cfg, plan, pack;
  int64_t sd = 2, pad[2] = {1, 1}, one2[2] = {1, 1};
  int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendFinalize(conv));
  double alpha = 1.5, beta = 0.0;
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_DOUBLE, 1, &beta));
  CHECK(cudnnBackendFinalize(op));
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK(cudnnBackendFinalize(graph));
  int64_t algo = 1; /* implicit precomputed GEMM */
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
  CHECK(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &algo));
  CHECK(cudnnBackendFinalize(engine));
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
  CHECK(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine));
  CHECK(cudnnBackendFinalize(cfg));
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
  CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
  CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK(cudnnBackendFinalize(plan));
  int64_t ws_size = -1, got = 0;
  CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws_size));
  void *ws = NULL;
  CHECK(cudaMalloc(&ws, (size_t)ws_size));
  void *ptrs[3] = {x, w, y};
  int64_t uids[3] = {'x', 'w', 'y'};
  CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
  CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  CHECK(cudnnBackendFinalize(pack));
  CHECK(cudnnBackendExecute(h, plan, pack));

  /* The same through the legacy API. */
  cudnnTensorDescriptor_t lx, ly; cudnnFilterDescriptor_t lw; cudnnConvolutionDescriptor_t lc;
  CHECK(cudnnCreateTensorDescriptor(&lx)); CHECK(cudnnCreateTensorDescriptor(&ly));
  CHECK(cudnnCreateFilterDescriptor(&lw)); CHECK(cudnnCreateConvolutionDescriptor(&lc));
  CHECK(cudnnSetTensor4dDescriptor(lx, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CHECK(cudnnSetTensor4dDescriptor(ly, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));
  CHECK(cudnnSetFilter4dDescriptor(lw, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, R));
  CHECK(cudnnSetConvolution2dDescriptor(lc, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  float fa = 1.5f, fb = 0.0f;
  CHECK(cudnnConvolutionForward(h, &fa, lx, x, lw, w, lc, (int)algo, ws, (size_t)ws_size, &fb, ly, yl));
  CHECK(cudaMemcpy(y1, y, yn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(y2, yl, yn * 4, cudaMemcpyDeviceToHost));
  int nonzero = 0;
  for (size_t i = 0; i < yn; i++) nonzero |= y1[i] != 0.0f;
  printf("x=%p w=%p y=%p ws=%p\n", x, w, y, ws);
  printf("workspace_bytes=%lld\n", (long long)ws_size);
  printf("backend_matches_legacy=%s\n", nonzero && !memcmp(y1, y2, yn * 4) ? "ok" : "wrong");
  return 0;
}
