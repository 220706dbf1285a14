/* conv_layers: benchmarks a network's convolution layers as a Caffe-style framework does with
 * cuDNN: for each layer, cudnnFind*Algorithm in all three directions, then the fastest algorithm
 * whose workspace fits the per-layer limit is run and timed with events.
 *
 * Usage: conv_layers LAYERS.csv [WORKSPACE_MIB] [BATCH]
 * The CSV has the columns of data/conv-layers (source,W,H,C_in,N,C_out,kernel_w,
 * kernel_h,pad_w,pad_h,stride_w,stride_h); BATCH overrides N. Times are the device's: on the
 * simulated GPU they are simulated, and every line says so. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define CHECK_DNN(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); exit(1); } } while (0)

static const char *fwd_names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
                                  "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *bwd_data_names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *bwd_filter_names[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                         "FFT_TILING"};

static const char *label = "";

static void device_label(char *name, size_t len) {
  typedef CUresult (*name_t)(char *, int, int);
  void *fn = NULL; int st;
  snprintf(name, len, "unknown device");
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetName", &fn, 12000, 0, &st) == cudaSuccess && fn)
    ((name_t)fn)(name, (int)len, 0);
  if (strstr(name, "simulated")) label = " (simulated)";
}

/* Picks the fastest successful result within the limit; returns its index or -1. */
static int pick(const cudnnConvolutionFwdAlgoPerf_t *p, int n, size_t limit) {
  for (int i = 0; i < n; i++) if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].memory <= limit) return i;
  return -1;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: conv_layers LAYERS.csv [WORKSPACE_MIB] [BATCH]\n"); return 2; }
  FILE *f = fopen(argv[1], "r");
  if (!f) { perror(argv[1]); return 2; }
  size_t limit = (size_t)(argc > 2 ? atof(argv[2]) : 64.0) * 1048576;
  int batch = argc > 3 ? atoi(argv[3]) : 0;
  char devname[256];
  device_label(devname, sizeof devname);
  printf("device: %s; cuDNN %zu; per-layer workspace limit %.0f MiB\n", devname, cudnnGetVersion(), limit / 1048576.0);

  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  cudnnTensorDescriptor_t xd, yd; cudnnFilterDescriptor_t wd; cudnnConvolutionDescriptor_t cd;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd)); CHECK_DNN(cudnnCreateTensorDescriptor(&yd));
  CHECK_DNN(cudnnCreateFilterDescriptor(&wd)); CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0)); CHECK_CUDA(cudaEventCreate(&e1));

  char line[512];
  double total_ms = 0, fastest_ms = 0;
  int layers = 0;
  printf("%-20s %-9s %-22s %10s %12s | %-22s %10s %12s\n", "layer", "direction", "chosen (fits limit)", "ms", "workspace",
         "fastest overall", "ms", "workspace");
  while (fgets(line, sizeof line, f)) {
    char name[64]; int W, H, C, N, K, kw, kh, pw, ph, sw, sh;
    char *p = line;
    if ((unsigned char)p[0] == 0xEF) p += 3; /* UTF-8 byte order mark */
    if (sscanf(p, "%63[^,],%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", name, &W, &H, &C, &N, &K, &kw, &kh, &pw, &ph, &sw, &sh) != 12)
      continue; /* the header */
    if (batch > 0) N = batch;
    CHECK_DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    CHECK_DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, kh, kw));
    CHECK_DNN(cudnnSetConvolution2dDescriptor(cd, ph, pw, sh, sw, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    int n, c, oh, ow;
    CHECK_DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &oh, &ow));
    CHECK_DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, oh, ow));
    void *x, *w, *y, *dx, *dw, *dy;
    size_t xb = (size_t)N * C * H * W * 4, wb = (size_t)K * C * kh * kw * 4, yb = (size_t)n * c * oh * ow * 4;
    CHECK_CUDA(cudaMalloc(&x, xb)); CHECK_CUDA(cudaMalloc(&dx, xb)); CHECK_CUDA(cudaMalloc(&w, wb));
    CHECK_CUDA(cudaMalloc(&dw, wb)); CHECK_CUDA(cudaMalloc(&y, yb)); CHECK_CUDA(cudaMalloc(&dy, yb));
    for (int dir = 0; dir < 3; dir++) {
      cudnnConvolutionFwdAlgoPerf_t perf[8];
      int got = 0;
      const char **names = dir == 0 ? fwd_names : dir == 1 ? bwd_data_names : bwd_filter_names;
      if (dir == 0) CHECK_DNN(cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, 8, &got, perf));
      else if (dir == 1) CHECK_DNN(cudnnFindConvolutionBackwardDataAlgorithm(h, wd, yd, cd, xd, 8, &got, perf));
      else CHECK_DNN(cudnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, cd, wd, 8, &got, perf));
      int best = pick(perf, got, (size_t)-1), fit = pick(perf, got, limit);
      if (fit < 0) { printf("%-20s %-9s no algorithm fits\n", name, dir == 0 ? "fwd" : dir == 1 ? "bwd-data" : "bwd-filt"); continue; }
      void *ws = NULL;
      if (perf[fit].memory) CHECK_CUDA(cudaMalloc(&ws, perf[fit].memory));
      float one = 1, zero = 0, ms = 0;
      CHECK_CUDA(cudaEventRecord(e0, NULL));
      if (dir == 0) CHECK_DNN(cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, perf[fit].algo, ws, perf[fit].memory, &zero, yd, y));
      else if (dir == 1) CHECK_DNN(cudnnConvolutionBackwardData(h, &one, wd, w, yd, dy, cd, perf[fit].algo, ws, perf[fit].memory, &zero, xd, dx));
      else CHECK_DNN(cudnnConvolutionBackwardFilter(h, &one, xd, x, yd, dy, cd, perf[fit].algo, ws, perf[fit].memory, &zero, wd, dw));
      CHECK_CUDA(cudaEventRecord(e1, NULL));
      CHECK_CUDA(cudaEventSynchronize(e1));
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (ws) CHECK_CUDA(cudaFree(ws));
      total_ms += ms;
      fastest_ms += perf[best].time;
      printf("%-20s %-9s %-22s %10.3f %9.2f MiB | %-22s %10.3f %9.2f MiB%s\n", name,
             dir == 0 ? "fwd" : dir == 1 ? "bwd-data" : "bwd-filt", names[perf[fit].algo], ms,
             perf[fit].memory / 1048576.0, names[perf[best].algo], perf[best].time, perf[best].memory / 1048576.0, label);
    }
    cudaFree(x); cudaFree(dx); cudaFree(w); cudaFree(dw); cudaFree(y); cudaFree(dy);
    layers++;
  }
  fclose(f);
  printf("%d layers: %.3f ms with algorithms that fit %.0f MiB, %.3f ms if workspace were unlimited%s\n", layers,
         total_ms, limit / 1048576.0, fastest_ms, label);
  CHECK_DNN(cudnnDestroy(h));
  return layers > 0 ? 0 : 1;
}
