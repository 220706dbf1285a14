/* backend_check: random convolutions through the cuDNN backend (graph) API, built as cuDNN's
 * frontend builds them (tensors with unique ids and alignment, one operation or a forward
 * convolution with a bias add and a ReLU on virtual intermediates, a graph with its handle,
 * INSTANT heuristics, a plan of the first configuration, a variant pack, execute). Shapes vary
 * stride, padding, dilation, groups, NCHW / NHWC and beta (0, 1, -0.35); directions cycle through
 * forward, backward-data, backward-filter and the fused forward.
 *
 * Usage: backend_check CASES SEED OUT. Writes every case's output tensor (float32, as the device
 * holds it) to OUT one after another, and prints one line per case: case=i dir=D n=N engine=E
 * workspace=W (what the plan told the program to provide) elems=K. Run it undivided and under
 * Marmoset's micro-batching: the files must agree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static uint64_t rng;
static int pick(int lo, int hi) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return lo + (int)(rng % (uint64_t)(hi - lo + 1));
}

static cudnnBackendDescriptor_t make(int type) {
  cudnnBackendDescriptor_t d;
  CHECK(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

/* dims in NCHW order; nhwc: channels innermost. */
static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t d[4], int nhwc, int is_virtual) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t s[4], align = 16;
  if (nhwc) { s[1] = 1; s[3] = d[1]; s[2] = d[3] * d[1]; s[0] = d[2] * d[3] * d[1]; }
  else { s[3] = 1; s[2] = d[3]; s[1] = d[2] * d[3]; s[0] = d[1] * d[2] * d[3]; }
  int dtype = CUDNN_DATA_FLOAT;
  _Bool v = is_virtual != 0;
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  if (is_virtual) CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  CHECK(cudnnBackendFinalize(t));
  return t;
}

static cudnnBackendDescriptor_t pointwise(int mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                          cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;
  int prec = CUDNN_DATA_FLOAT;
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  CHECK(cudnnBackendFinalize(pw));
  op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b) CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CHECK(cudnnBackendFinalize(op));
  CHECK(cudnnBackendDestroyDescriptor(pw));
  return op;
}

static void *filled(size_t n, int salt) {
  float *h = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)((i * 7919 + (size_t)salt * 131) % 101) / 101.0f - 0.5f;
  void *d;
  CHECK(cudaMalloc(&d, n * 4 + 64));
  CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

int main(int argc, char **argv) {
  if (argc != 4) { fprintf(stderr, "usage: backend_check CASES SEED OUT\n"); return 2; }
  int cases = atoi(argv[1]);
  rng = (uint64_t)atoll(argv[2]) * 2654435761u + 88172645463325252ull;
  FILE *out = fopen(argv[3], "wb");
  if (!out) { perror(argv[3]); return 1; }
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  const char *names[4] = {"fwd", "bwd_data", "bwd_filter", "fused"};
  const int types[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  const int bases[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA};
  const float betas[3] = {0.0f, 1.0f, -0.35f};
  for (int c = 0; c < cases; c++) {
    int dir = c % 4, conv_dir = dir == 3 ? 0 : dir;
    int n = pick(2, 5), g = pick(1, 2), cg = pick(1, 3), kg = pick(1, 3), hh = pick(5, 10), ww = pick(5, 10);
    int r = pick(1, 3), s = pick(1, 3), pad = pick(0, 1), st = pick(1, 2), dil = pick(1, 2), nhwc = pick(0, 1);
    float alpha = 1.25f, beta = dir == 3 ? 0.0f : betas[pick(0, 2)];
    int64_t ho = (hh + 2 * pad - dil * (r - 1) - 1) / st + 1, wo = (ww + 2 * pad - dil * (s - 1) - 1) / st + 1;
    if (ho < 1 || wo < 1) { c--; continue; }
    int64_t xd[4] = {n, g * cg, hh, ww}, wd[4] = {g * kg, cg, r, s}, yd[4] = {n, g * kg, ho, wo};
    int64_t bd[4] = {1, g * kg, 1, 1};
    size_t xn = (size_t)(n * g * cg * hh * ww), wn = (size_t)(g * kg * cg * r * s), yn = (size_t)(n * g * kg * ho * wo);
    void *x = filled(xn, c), *w = filled(wn, c + 1), *y = filled(yn, c + 2), *bias = filled((size_t)(g * kg), c + 3);

    cudnnBackendDescriptor_t cd = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    int64_t sd = 2, pads[2] = {pad, pad}, sts[2] = {st, st}, dils[2] = {dil, dil};
    int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, sts));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    CHECK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dils));
    CHECK(cudnnBackendFinalize(cd));

    cudnnBackendDescriptor_t tx = tensor('x', xd, nhwc, 0), tw = tensor('w', wd, nhwc, 0);
    cudnnBackendDescriptor_t ty = tensor(dir == 3 ? 'c' : 'y', yd, nhwc, dir == 3);
    int base = bases[conv_dir];
    cudnnBackendDescriptor_t op = make(types[conv_dir]);
    /* (w, x, y) roles: forward W X Y, data W DX DY, filter DW X DY. */
    CHECK(cudnnBackendSetAttribute(op, base + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
    CHECK(cudnnBackendSetAttribute(op, base + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
    CHECK(cudnnBackendSetAttribute(op, base + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
    CHECK(cudnnBackendSetAttribute(op, base + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
    CHECK(cudnnBackendSetAttribute(op, base, CUDNN_TYPE_FLOAT, 1, &alpha));
    CHECK(cudnnBackendSetAttribute(op, base + 1, CUDNN_TYPE_FLOAT, 1, &beta));
    CHECK(cudnnBackendFinalize(op));
    cudnnBackendDescriptor_t ops[3] = {op, NULL, NULL};
    int nops = 1;
    if (dir == 3) {
      cudnnBackendDescriptor_t tb = tensor('b', bd, nhwc, 0), ta = tensor('a', yd, nhwc, 1), tout = tensor('y', yd, nhwc, 0);
      ops[1] = pointwise(CUDNN_POINTWISE_ADD, ty, tb, ta);
      ops[2] = pointwise(CUDNN_POINTWISE_RELU_FWD, ta, NULL, tout);
      nops = 3;
      CHECK(cudnnBackendDestroyDescriptor(tb)); CHECK(cudnnBackendDestroyDescriptor(ta));
      CHECK(cudnnBackendDestroyDescriptor(tout));
    }
    CHECK(cudnnBackendDestroyDescriptor(tx)); CHECK(cudnnBackendDestroyDescriptor(tw));
    CHECK(cudnnBackendDestroyDescriptor(ty)); CHECK(cudnnBackendDestroyDescriptor(cd));
    cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
    CHECK(cudnnBackendFinalize(graph));

    cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    int hm = CUDNN_HEUR_MODE_INSTANT;
    CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
    CHECK(cudnnBackendFinalize(heur));
    cudnnBackendDescriptor_t cfg = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), e = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t got = 0, engine = -1;
    CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &cfg));
    CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &e));
    CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &engine));
    cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    CHECK(cudnnBackendFinalize(plan));
    /* The frontend drops everything but the plan. */
    CHECK(cudnnBackendDestroyDescriptor(heur)); CHECK(cudnnBackendDestroyDescriptor(cfg));
    CHECK(cudnnBackendDestroyDescriptor(e)); CHECK(cudnnBackendDestroyDescriptor(graph));
    for (int i = 0; i < nops; i++) CHECK(cudnnBackendDestroyDescriptor(ops[i]));
    int64_t ws_size = 0;
    CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws_size));
    void *ws = NULL;
    if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));
    void *ptrs[4] = {x, w, y, bias};
    int64_t uids[4] = {'x', 'w', 'y', 'b'};
    cudnnBackendDescriptor_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    int np = dir == 3 ? 4 : 3;
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, np, ptrs));
    CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, np, uids));
    CHECK(cudnnBackendFinalize(pack));
    CHECK(cudnnBackendExecute(h, plan, pack));

    void *res = conv_dir == 0 ? y : conv_dir == 1 ? x : w;
    size_t rn = conv_dir == 0 ? yn : conv_dir == 1 ? xn : wn;
    float *hr = malloc(rn * 4);
    CHECK(cudaMemcpy(hr, res, rn * 4, cudaMemcpyDeviceToHost));
    if (fwrite(hr, 4, rn, out) != rn) { perror("write"); return 1; }
    printf("case=%d dir=%s n=%d groups=%d nhwc=%d beta=%g engine=%lld workspace=%lld elems=%zu\n", c, names[dir], n,
           g, nhwc, (double)beta, (long long)engine, (long long)ws_size, rn);
    free(hr);
    CHECK(cudnnBackendDestroyDescriptor(pack)); CHECK(cudnnBackendDestroyDescriptor(plan));
    CHECK(cudaFree(x)); CHECK(cudaFree(w)); CHECK(cudaFree(y)); CHECK(cudaFree(bias));
    if (ws) CHECK(cudaFree(ws));
  }
  fclose(out);
  printf("cases=%d\n", cases);
  return 0;
}
