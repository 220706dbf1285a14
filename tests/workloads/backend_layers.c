/* backend_layers: a network's convolution layers through the cuDNN backend (graph) API, as
 * PyTorch's default path runs them: per layer and direction, a graph of one convolution, INSTANT
 * heuristics then FALLBACK, and the first configuration whose plan's workspace fits the cap (as
 * a framework's cap does: TensorFlow's TF_CUDNN_WORKSPACE_LIMIT_IN_MB, PyTorch's
 * CUDNN_CONV_WSCAP_DBG in builds that read it); that plan is executed once to warm up, then timed
 * with events.
 *
 * Usage: backend_layers LAYERS.csv [WORKSPACE_CAP_MIB] [BATCH] [PASSES]
 * PASSES (default 1) runs the whole network that many times, printing the last: from the second
 * on, every graph has been seen (a training step after the first). The CSV has the columns of
 * data/conv-layers. Prints, per layer and direction:
 * "LAYER DIR ms=MS engine=E workspace=BYTES" and a "total_ms=" line. Times are the device's: on
 * the simulated GPU they are simulated, and the lines say so. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static cudnnBackendDescriptor_t make(int type) {
  cudnnBackendDescriptor_t d;
  CHECK(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t d[4]) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t s[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}, align = 16;
  int dtype = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  CHECK(cudnnBackendFinalize(t));
  return t;
}

/* The first plan of heuristics `mode` whose workspace fits `cap`, or NULL. */
static cudnnBackendDescriptor_t plan_within(cudnnHandle_t h, cudnnBackendDescriptor_t graph, int mode, int64_t cap,
                                            int64_t *ws, int64_t *engine) {
  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CHECK(cudnnBackendFinalize(heur));
  int64_t n = 0, got = 0;
  CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
  cudnnBackendDescriptor_t *cfgs = calloc((size_t)n + 1, sizeof *cfgs), found = NULL;
  for (int64_t i = 0; i < n; i++) cfgs[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (n > 0) CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs));
  for (int64_t i = 0; i < got && !found; i++) {
    cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]));
    if (cudnnBackendFinalize(plan) != 0) { CHECK(cudnnBackendDestroyDescriptor(plan)); continue; }
    int64_t k = 0;
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, ws));
    if (*ws > cap) { CHECK(cudnnBackendDestroyDescriptor(plan)); continue; }
    cudnnBackendDescriptor_t e = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    CHECK(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &e));
    CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k, engine));
    CHECK(cudnnBackendDestroyDescriptor(e));
    found = plan;
  }
  for (int64_t i = 0; i < n; i++) CHECK(cudnnBackendDestroyDescriptor(cfgs[i]));
  free(cfgs);
  CHECK(cudnnBackendDestroyDescriptor(heur));
  return found;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: backend_layers LAYERS.csv [WORKSPACE_CAP_MIB] [BATCH] [PASSES]\n"); return 2; }
  FILE *f = fopen(argv[1], "r");
  if (!f) { perror(argv[1]); return 2; }
  int64_t cap = (int64_t)((argc > 2 ? atof(argv[2]) : 64.0) * 1048576);
  int batch = argc > 3 ? atoi(argv[3]) : 0;
  int passes = argc > 4 ? atoi(argv[4]) : 1;
  if (passes < 1) { fprintf(stderr, "PASSES must be at least 1\n"); return 2; }
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
  const char *dirs[3] = {"fwd", "bwd_data", "bwd_filter"};
  const int types[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  const int bases[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA};
  char line[512];
  double total = 0;
  for (int pass = 0; pass < passes; pass++) {
    int shown = pass == passes - 1;
    rewind(f);
    total = 0;
    while (fgets(line, sizeof line, f)) {
      char name[64]; int W, H, C, N, K, kw, kh, pw, ph, sw, sh;
      char *p = line;
      if ((unsigned char)p[0] == 0xEF) p += 3;
      if (sscanf(p, "%63[^,],%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", name, &W, &H, &C, &N, &K, &kw, &kh, &pw, &ph, &sw, &sh) != 12)
        continue;
      if (batch > 0) N = batch;
      int64_t ho = (H + 2 * ph - kh) / sh + 1, wo = (W + 2 * pw - kw) / sw + 1;
      int64_t xd[4] = {N, C, H, W}, wd[4] = {K, C, kh, kw}, yd[4] = {N, K, ho, wo};
      void *x, *w, *y;
      CHECK(cudaMalloc(&x, (size_t)(N * C * H * W) * 4)); CHECK(cudaMalloc(&w, (size_t)(K * C * kh * kw) * 4));
      CHECK(cudaMalloc(&y, (size_t)(N * K * ho * wo) * 4));
      for (int d = 0; d < 3; d++) {
        cudnnBackendDescriptor_t cd = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
        int64_t sd = 2, pads[2] = {ph, pw}, sts[2] = {sh, sw}, dil[2] = {1, 1};
        int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, sts));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
        CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
        CHECK(cudnnBackendFinalize(cd));
        cudnnBackendDescriptor_t tx = tensor('x', xd), tw = tensor('w', wd), ty = tensor('y', yd), op = make(types[d]);
        float alpha = 1.0f, beta = 0.0f;
        CHECK(cudnnBackendSetAttribute(op, bases[d] + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
        CHECK(cudnnBackendSetAttribute(op, bases[d] + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
        CHECK(cudnnBackendSetAttribute(op, bases[d] + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
        CHECK(cudnnBackendSetAttribute(op, bases[d] + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
        CHECK(cudnnBackendSetAttribute(op, bases[d], CUDNN_TYPE_FLOAT, 1, &alpha));
        CHECK(cudnnBackendSetAttribute(op, bases[d] + 1, CUDNN_TYPE_FLOAT, 1, &beta));
        CHECK(cudnnBackendFinalize(op));
        cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
        CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
        CHECK(cudnnBackendFinalize(graph));
        int64_t ws_size = 0, engine = -1;
        cudnnBackendDescriptor_t plan = plan_within(h, graph, CUDNN_HEUR_MODE_INSTANT, cap, &ws_size, &engine);
        if (!plan) plan = plan_within(h, graph, CUDNN_HEUR_MODE_FALLBACK, cap, &ws_size, &engine);
        if (!plan) { if (shown) printf("%s %s no engine fits\n", name, dirs[d]); continue; }
        void *ws = NULL;
        if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));
        void *ptrs[3] = {x, w, y};
        int64_t uids[3] = {'x', 'w', 'y'};
        cudnnBackendDescriptor_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
        CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
        CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
        CHECK(cudnnBackendFinalize(pack));
        CHECK(cudnnBackendExecute(h, plan, pack));
        float ms = 0;
        CHECK(cudaEventRecord(e0, NULL));
        CHECK(cudnnBackendExecute(h, plan, pack));
        CHECK(cudaEventRecord(e1, NULL));
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        total += ms;
        if (shown) printf("%s %s ms=%.4f engine=%lld workspace=%lld (simulated where the device is)\n", name, dirs[d], ms,
               (long long)engine, (long long)ws_size);
        if (ws) CHECK(cudaFree(ws));
        CHECK(cudnnBackendDestroyDescriptor(pack)); CHECK(cudnnBackendDestroyDescriptor(plan));
        CHECK(cudnnBackendDestroyDescriptor(graph)); CHECK(cudnnBackendDestroyDescriptor(op));
        CHECK(cudnnBackendDestroyDescriptor(tx)); CHECK(cudnnBackendDestroyDescriptor(tw));
        CHECK(cudnnBackendDestroyDescriptor(ty)); CHECK(cudnnBackendDestroyDescriptor(cd));
      }
      CHECK(cudaFree(x)); CHECK(cudaFree(w)); CHECK(cudaFree(y));
    }
  }
  printf("total_ms=%.4f\n", total);
  return 0;
}
