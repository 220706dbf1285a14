/* backend_conv: convolutions through the cuDNN backend (graph) API built the way cuDNN's frontend
 * builds them for PyTorch's default path (aten/src/ATen/native/cudnn/Conv_v8.cpp): tensors with a
 * byte alignment and unique ids 'x', 'w', 'y', a convolution descriptor with its compute type, one
 * operation, a graph; heuristics (INSTANT, and FALLBACK) give engine configurations, whose engine,
 * notes and knobs are read the frontend's way (into descriptors the caller created); a plan with
 * no handle, its workspace size (count pointer NULL) and JSON; a variant pack; execute. Each
 * descriptor is destroyed as soon as the frontend would drop it (cuDNN keeps copies). All three
 * directions, each compared bit for bit with the same algorithm through the legacy API (which
 * conv_check validates against a reference).
 *
 * Prints x=, w=, y=, ws= (the forward call's device pointers, for the tests' attribution checks),
 * workspace_bytes= and backend_matches_legacy= for the forward call, then per direction D in
 * fwd, bwd_data, bwd_filter: D_engines= (the graph's global engine count), D_results= (INSTANT),
 * D_fallback=, D_engine= (the chosen global index), D_knobs=, D_knob0=type:min:max:stride,
 * D_notes_<index>=<notes, comma-separated> for every result, D_json_ok=, D_matches_legacy=; and
 * the statuses of misuse: bad_type_status=, null_element_status=, unfinalized_status=.
 *
 *   backend_conv [implicit-gemm]
 *
 * implicit-gemm: engine 0's configuration in each direction (no workspace: a NULL workspace
 * pointer in the variant pack); also prints pack_ids_status=, what reading the forward pack's
 * unique ids back gives. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

enum { N = 2, C = 3, H = 10, W = 9, K = 4, R = 3 };
static cudnnHandle_t h;

static cudnnBackendDescriptor_t make(int type) {
  cudnnBackendDescriptor_t d;
  CHECK(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t dims[4]) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
  int dtype = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  CHECK(cudnnBackendFinalize(t));
  return t;
}

static cudnnBackendDescriptor_t conv_desc(void) {
  cudnnBackendDescriptor_t c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, pad[2] = {1, 1}, one2[2] = {1, 1};
  int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CHECK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
  CHECK(cudnnBackendFinalize(c));
  return c;
}

/* The engine configurations heuristics of `mode` give for `graph`, into caller-made descriptors. */
static int heuristics(cudnnBackendDescriptor_t graph, int mode, cudnnBackendDescriptor_t **out) {
  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CHECK(cudnnBackendFinalize(heur));
  int64_t n = -1;
  CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
  *out = calloc((size_t)n + 1, sizeof **out);
  for (int64_t i = 0; i < n; i++) (*out)[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = -1;
  CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, *out));
  if (got != n) { fprintf(stderr, "results %lld then %lld\n", (long long)n, (long long)got); exit(1); }
  /* Asking for fewer tells how many were written (the frontend sizes its list by it). */
  if (n > 1) {
    cudnnBackendDescriptor_t first = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &first));
    if (got != 1) { fprintf(stderr, "asked for 1 result, told %lld\n", (long long)got); exit(1); }
    CHECK(cudnnBackendDestroyDescriptor(first));
  }
  /* The heuristics descriptor may go: the configurations stand alone (PyTorch drops it). */
  CHECK(cudnnBackendDestroyDescriptor(heur));
  return (int)n;
}

static cudnnBackendDescriptor_t engine_of(cudnnBackendDescriptor_t cfg, int64_t *index) {
  cudnnBackendDescriptor_t e = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, index));
  return e;
}

static void print_notes(const char *dir, cudnnBackendDescriptor_t e, int64_t index) {
  int64_t n = -1;
  int notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  /* The frontend first asks for the count with a NULL array, then for the notes. */
  CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, NULL));
  CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
  int bnotes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t bn = -1;
  CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &bn, bnotes));
  printf("%s_notes_%lld=", dir, (long long)index);
  for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", notes[i]);
  printf("\n%s_behavior_notes_%lld=%lld\n", dir, (long long)index, (long long)bn);
}

struct dir {
  const char *name;
  int op, base; /* base: ALPHA; BETA, CONV_DESC, then the (w, x, y)-role tensors follow */
};

static int same(const float *a, const float *b, size_t n) {
  int nonzero = 0;
  for (size_t i = 0; i < n; i++) nonzero |= a[i] != 0.0f;
  return nonzero && !memcmp(a, b, n * 4);
}

int main(int argc, char **argv) {
  /* implicit-gemm: each direction runs the configuration of engine 0 (implicit GEMM, which needs
   * no workspace), so that its variant pack's workspace pointer is NULL, as PyTorch's is for a
   * plan without workspace. */
  int implicit = argc > 1 && strcmp(argv[1], "implicit-gemm") == 0;
  int64_t xd[4] = {N, C, H, W}, wd[4] = {K, C, R, R}, yd[4] = {N, K, H, W};
  size_t xn = N * C * H * W, wn = K * C * R * R, yn = N * K * H * W;
  float *hx = malloc(xn * 4), *hw = malloc(wn * 4), *hy = malloc(yn * 4);
  for (size_t i = 0; i < xn; i++) hx[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < wn; i++) hw[i] = (float)((i * 104729) % 89) / 89.0f - 0.5f;
  for (size_t i = 0; i < yn; i++) hy[i] = (float)((i * 31) % 83) / 83.0f - 0.5f;
  CHECK(cudnnCreate(&h));
  cudnnTensorDescriptor_t lx, ly; cudnnFilterDescriptor_t lw; cudnnConvolutionDescriptor_t lc;
  CHECK(cudnnCreateTensorDescriptor(&lx)); CHECK(cudnnCreateTensorDescriptor(&ly));
  CHECK(cudnnCreateFilterDescriptor(&lw)); CHECK(cudnnCreateConvolutionDescriptor(&lc));
  CHECK(cudnnSetTensor4dDescriptor(lx, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CHECK(cudnnSetTensor4dDescriptor(ly, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));
  CHECK(cudnnSetFilter4dDescriptor(lw, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, R));
  CHECK(cudnnSetConvolution2dDescriptor(lc, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));

  const struct dir dirs[3] = {
    {"fwd", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA},
    {"bwd_data", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA},
    {"bwd_filter", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA},
  };
  for (int d = 0; d < 3; d++) {
    const char *dn = dirs[d].name;
    /* Fresh buffers: the inputs of the direction hold data, its output is written twice. */
    void *x, *w, *y, *out2;
    CHECK(cudaMalloc(&x, xn * 4)); CHECK(cudaMalloc(&w, wn * 4)); CHECK(cudaMalloc(&y, yn * 4));
    CHECK(cudaMemcpy(x, hx, xn * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, hw, wn * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, yn * 4, cudaMemcpyHostToDevice));
    size_t on = d == 0 ? yn : d == 1 ? xn : wn;
    CHECK(cudaMalloc(&out2, on * 4));

    cudnnBackendDescriptor_t tx = tensor('x', xd), tw = tensor('w', wd), ty = tensor('y', yd), conv = conv_desc();
    cudnnBackendDescriptor_t op = make(dirs[d].op), graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    float alpha = 1.5f, beta = 0.0f;
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base, CUDNN_TYPE_FLOAT, 1, &alpha));
    CHECK(cudnnBackendSetAttribute(op, dirs[d].base + 1, CUDNN_TYPE_FLOAT, 1, &beta));
    CHECK(cudnnBackendFinalize(op));
    /* The frontend drops the tensors and the convolution once the operation is built: cuDNN
     * holds copies. */
    CHECK(cudnnBackendDestroyDescriptor(tx)); CHECK(cudnnBackendDestroyDescriptor(tw));
    CHECK(cudnnBackendDestroyDescriptor(ty)); CHECK(cudnnBackendDestroyDescriptor(conv));
    CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    CHECK(cudnnBackendFinalize(graph));
    int64_t engines = -1, n = 0;
    CHECK(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &engines));
    printf("%s_engines=%lld\n", dn, (long long)engines);

    cudnnBackendDescriptor_t *cfgs, *fallback;
    int results = heuristics(graph, CUDNN_HEUR_MODE_INSTANT, &cfgs);
    int fallbacks = heuristics(graph, CUDNN_HEUR_MODE_FALLBACK, &fallback);
    printf("%s_results=%d\n%s_fallback=%d\n", dn, results, dn, fallbacks);
    if (results == 0) { fprintf(stderr, "%s: no engine\n", dn); return 1; }
    for (int i = 0; i < results; i++) {
      int64_t index = -1;
      cudnnBackendDescriptor_t e = engine_of(cfgs[i], &index);
      print_notes(dn, e, index);
      CHECK(cudnnBackendDestroyDescriptor(e));
    }

    /* The first configuration, as the frontend takes it: engine, knobs, then the plan. */
    int pick = 0;
    for (int i = 0; implicit && i < results; i++) {
      int64_t at = -1;
      CHECK(cudnnBackendDestroyDescriptor(engine_of(cfgs[i], &at)));
      if (at == 0) { pick = i; break; }
    }
    int64_t index = -1;
    cudnnBackendDescriptor_t e = engine_of(cfgs[pick], &index);
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++) knobs[i] = make(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR);
    int64_t nknobs = -1;
    CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &nknobs, knobs));
    printf("%s_engine=%lld\n%s_knobs=%lld\n", dn, (long long)index, dn, (long long)nknobs);
    if (nknobs > 0) {
      int type = -1;
      int64_t mx = -1, mn = -1, st = -1;
      CHECK(cudnnBackendGetAttribute(knobs[0], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
      CHECK(cudnnBackendGetAttribute(knobs[0], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &mx));
      CHECK(cudnnBackendGetAttribute(knobs[0], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &mn));
      CHECK(cudnnBackendGetAttribute(knobs[0], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &n, &st));
      printf("%s_knob0=%d:%lld:%lld:%lld\n", dn, type, (long long)mn, (long long)mx, (long long)st);
    }
    cudnnBackendDescriptor_t choices[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++) choices[i] = make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    int64_t nchoices = -1;
    CHECK(cudnnBackendGetAttribute(cfgs[pick], CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &nchoices, choices));
    printf("%s_choices=%lld\n", dn, (long long)nchoices);

    cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), pack;
    CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[pick]));
    CHECK(cudnnBackendFinalize(plan));
    int64_t ws_size = -1;
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, NULL, &ws_size));
    int64_t json_len = -1;
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &json_len, NULL));
    char *json = calloc((size_t)json_len + 1, 1);
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, json_len, &json_len, json));
    char want[64];
    snprintf(want, sizeof want, "\"engineId\":%lld", (long long)index);
    printf("%s_json_ok=%d\n", dn, json_len > 0 && strstr(json, want) != NULL);
    /* The graph and its parts may go once the plan exists: plans are self-contained. */
    CHECK(cudnnBackendDestroyDescriptor(graph));
    CHECK(cudnnBackendDestroyDescriptor(op));

    void *ws = NULL;
    if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));
    void *ptrs[3] = {x, w, y};
    int64_t uids[3] = {'x', 'w', 'y'};
    pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    CHECK(cudnnBackendFinalize(pack));
    CHECK(cudnnBackendExecute(h, plan, pack));
    if (d == 0 && implicit) {
      int64_t got = 0, back[3];
      printf("pack_ids_status=%d\n",
             (int)cudnnBackendGetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, &got, back));
    }

    /* The same algorithm through the legacy API, into out2. */
    int algo = (int)index;
    if (d == 0) CHECK(cudnnConvolutionForward(h, &alpha, lx, x, lw, w, lc, algo, ws, (size_t)ws_size, &beta, ly, out2));
    if (d == 1) CHECK(cudnnConvolutionBackwardData(h, &alpha, lw, w, ly, y, lc, algo, ws, (size_t)ws_size, &beta, lx, out2));
    if (d == 2) CHECK(cudnnConvolutionBackwardFilter(h, &alpha, lx, x, ly, y, lc, algo, ws, (size_t)ws_size, &beta, lw, out2));
    float *a = malloc(on * 4), *b = malloc(on * 4);
    CHECK(cudaMemcpy(a, d == 0 ? y : d == 1 ? x : w, on * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(b, out2, on * 4, cudaMemcpyDeviceToHost));
    int match = same(a, b, on);
    printf("%s_matches_legacy=%s\n", dn, match ? "ok" : "wrong");
    if (d == 0) {
      printf("x=%p w=%p y=%p ws=%p\n", x, w, y, ws);
      printf("workspace_bytes=%lld\n", (long long)ws_size);
      printf("backend_matches_legacy=%s\n", match ? "ok" : "wrong");

      /* Misuse answers as the real library does. */
      int32_t dims32[4] = {1, 1, 1, 1};
      cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      printf("bad_type_status=%d\n",
             (int)cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 4, dims32));
      cudnnBackendDescriptor_t none[1] = {NULL};
      printf("null_element_status=%d\n",
             (int)cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, none));
      printf("unfinalized_status=%d\n",
             (int)cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, dims32));
    }
  }
  return 0;
}
