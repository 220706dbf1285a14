/* trainer: a small convolutional network trained the way a Caffe-style framework does it, with
 * the C ABI only: one cudaMalloc per blob, legacy cuDNN convolutions (algorithm from
 * cudnnGet*Algorithm_v7, one workspace per layer), bias add, ReLU, max pooling, softmax, a
 * cross-entropy kernel and SGD by kernel launches. Deterministic: it prints each iteration's loss,
 * a checksum of the weights, and its own count of each kind of API call.
 *
 * Usage: trainer [ITERATIONS] [BATCH] [WIDTH] [DEPTH]   (defaults 5, 8, 16, 0: input BATCH x 3 x WIDTH x WIDTH)
 * Network: conv(3->8, 3x3) relu, DEPTH x [conv(8->8, 3x3) relu], pool2, conv(8->16, 3x3) relu pool2,
 * fc(->10), softmax. DEPTH makes the network deeper at full resolution: more memory, the same
 * largest single operation (what memory virtualisation tests need). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"
#include "iteration_times.h"

/* Every API call goes through one of these, which counts it by kind. */
static long n_alloc, n_free, n_copy, n_memset, n_launch, n_cudnn, n_sync;
#define CU(kind, x) do { n_##kind++; cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define DNN(x) do { n_cudnn++; cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); exit(1); } } while (0)
/* Descriptor calls: not counted (the trace does not record them either). */
#define DESC(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); exit(1); } } while (0)

static simgpuKernelAccess_t access_fn;

/* xent(int n, int classes, const float *probs, const float *labels, float *dlogits, float *loss) */
static void xent(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0], k = *(int *)p[1];
  const float *probs = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[2], (size_t)n * k * 4, 0);
  const float *labels = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[3], (size_t)n * 4, 0);
  float *grad = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[4], (size_t)n * k * 4, 1);
  float *loss = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[5], 4, 1);
  if (!probs || !labels || !grad || !loss) return;
  float total = 0;
  for (int i = 0; i < n; i++) {
    int y = (int)labels[i];
    for (int c = 0; c < k; c++) grad[i * k + c] = (probs[i * k + c] - (c == y ? 1.0f : 0.0f)) / (float)n;
    total -= logf(probs[i * k + y] + 1e-12f);
  }
  *loss = total / (float)n;
}

/* sgd(int n, float lr, float *w, const float *dw): w -= lr * dw */
static void sgd(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0]; float lr = *(float *)p[1];
  float *w = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[2], (size_t)n * 4, 1);
  const float *dw = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[3], (size_t)n * 4, 0);
  if (!w || !dw) return;
  for (int i = 0; i < n; i++) w[i] -= lr * dw[i];
}

/* scale2(int n, float *x): x *= 2 in place (TRAINER_PLANT: a write to a recomputation's source) */
static void scale2(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float *x = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[1], (size_t)n * 4, 1);
  if (!x) return;
  for (int i = 0; i < n; i++) x[i] *= 2.0f;
}

static void *k_xent, *k_sgd, *k_scale2;

static void register_kernels(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  simgpuRegisterKernel_t reg = h ? (simgpuRegisterKernel_t)dlsym(h, "simgpuRegisterKernel") : NULL;
  access_fn = h ? (simgpuKernelAccess_t)dlsym(h, "simgpuKernelAccess") : NULL;
  if (!reg || !access_fn) { fprintf(stderr, "trainer: needs the simulated GPU's kernel registration\n"); exit(1); }
  size_t s1[] = {4, 4, 8, 8, 8, 8}, a1[] = {4, 4, 8, 8, 8, 8};
  if (reg("xent", xent, 6, s1, a1, &k_xent)) exit(1);
  size_t s2[] = {4, 4, 8, 8}, a2[] = {4, 4, 8, 8};
  if (reg("sgd", sgd, 4, s2, a2, &k_sgd)) exit(1);
  size_t s3[] = {4, 8}, a3[] = {4, 8};
  if (reg("scale2", scale2, 2, s3, a3, &k_scale2)) exit(1);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static cudnnHandle_t dnn;

static cudnnTensorDescriptor_t tdesc(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t d;
  int dims[4] = {n, c, h, w}, st[4] = {c * h * w, h * w, w, 1};
  DESC(cudnnCreateTensorDescriptor(&d));
  DESC(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, 4, dims, st)); /* as PyTorch sets them */
  return d;
}

static void *dalloc(size_t bytes) { void *p; CU(alloc, cudaMalloc(&p, bytes)); return p; }

/* A convolution layer with its bias, algorithms and workspaces. */
typedef struct {
  int cin, cout, k, pad, h, w, oh, ow;
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t conv;
  float *W, *dW, *B, *dB, *ws;
  int fwd_algo, bwd_data_algo, bwd_filter_algo;
  size_t ws_size;
} Conv;

static void conv_init(Conv *l, int n, int cin, int cout, int k, int pad, int h, int w) {
  l->cin = cin; l->cout = cout; l->k = k; l->pad = pad; l->h = h; l->w = w;
  l->oh = h + 2 * pad - k + 1; l->ow = w + 2 * pad - k + 1;
  l->x = tdesc(n, cin, h, w); l->y = tdesc(n, cout, l->oh, l->ow); l->bias = tdesc(1, cout, 1, 1);
  int fd[4] = {cout, cin, k, k}, pads[2] = {pad, pad}, one2[2] = {1, 1};
  DESC(cudnnCreateFilterDescriptor(&l->f));
  DESC(cudnnSetFilterNdDescriptor(l->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, fd));
  DESC(cudnnCreateConvolutionDescriptor(&l->conv));
  DESC(cudnnSetConvolutionNdDescriptor(l->conv, 2, pads, one2, one2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  cudnnConvolutionFwdAlgoPerf_t perf[8]; int got;
  DNN(cudnnGetConvolutionForwardAlgorithm_v7(dnn, l->x, l->f, l->conv, l->y, 8, &got, perf));
  l->fwd_algo = perf[0].algo;
  DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, l->f, l->y, l->conv, l->x, 8, &got, perf));
  l->bwd_data_algo = perf[0].algo;
  DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, l->x, l->y, l->conv, l->f, 8, &got, perf));
  l->bwd_filter_algo = perf[0].algo;
  size_t a, b, c;
  DNN(cudnnGetConvolutionForwardWorkspaceSize(dnn, l->x, l->f, l->conv, l->y, l->fwd_algo, &a));
  DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, l->f, l->y, l->conv, l->x, l->bwd_data_algo, &b));
  DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, l->x, l->y, l->conv, l->f, l->bwd_filter_algo, &c));
  l->ws_size = a > b ? (a > c ? a : c) : (b > c ? b : c);
  l->ws = l->ws_size ? dalloc(l->ws_size) : NULL;
  size_t nw = (size_t)cout * cin * k * k;
  float *host = malloc(nw * 4), scale = 1.0f / sqrtf((float)(cin * k * k));
  for (size_t i = 0; i < nw; i++) host[i] = frand() * scale;
  l->W = dalloc(nw * 4); l->dW = dalloc(nw * 4); l->B = dalloc(cout * 4); l->dB = dalloc(cout * 4);
  CU(copy, cudaMemcpy(l->W, host, nw * 4, cudaMemcpyHostToDevice));
  CU(memset, cudaMemset(l->B, 0, cout * 4));
  free(host);
}

static const float ONE = 1.0f, ZERO = 0.0f;

static void conv_fwd(Conv *l, const float *x, float *y) {
  DNN(cudnnConvolutionForward(dnn, &ONE, l->x, x, l->f, l->W, l->conv, l->fwd_algo, l->ws, l->ws_size, &ZERO, l->y, y));
  DNN(cudnnAddTensor(dnn, &ONE, l->bias, l->B, &ONE, l->y, y));
}

static void conv_bwd(Conv *l, const float *x, const float *dy, float *dx) {
  DNN(cudnnConvolutionBackwardBias(dnn, &ONE, l->y, dy, &ZERO, l->bias, l->dB));
  DNN(cudnnConvolutionBackwardFilter(dnn, &ONE, l->x, x, l->y, dy, l->conv, l->bwd_filter_algo, l->ws, l->ws_size, &ZERO,
                                     l->f, l->dW));
  if (dx)
    DNN(cudnnConvolutionBackwardData(dnn, &ONE, l->f, l->W, l->y, dy, l->conv, l->bwd_data_algo, l->ws, l->ws_size, &ZERO,
                                     l->x, dx));
}

static void sgd_step(float *w, float *dw, int n, float lr) {
  void *args[] = {&n, &lr, &w, &dw};
  dim3 grid = {(unsigned)(n + 255) / 256, 1, 1}, block = {256, 1, 1};
  CU(launch, cudaLaunchKernel(k_sgd, grid, block, args, 0, NULL));
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5, n = argc > 2 ? atoi(argv[2]) : 8, hw = argc > 3 ? atoi(argv[3]) : 16;
  int depth = argc > 4 ? atoi(argv[4]) : 0;
  const int classes = 10;
  if (iters < 1 || n < 1 || hw < 4 || hw % 4 || depth < 0 || depth > 64) {
    fprintf(stderr, "usage: trainer [ITERATIONS] [BATCH] [WIDTH, a multiple of 4] [DEPTH, 0..64]\n");
    return 2;
  }
  register_kernels();
  DESC(cudnnCreate(&dnn)); /* handles and descriptors are not counted */
  Conv c1, c2, fc;
  conv_init(&c1, n, 3, 8, 3, 1, hw, hw);
  Conv *blocks = calloc((size_t)depth + 1, sizeof *blocks);
  for (int i = 0; i < depth; i++) conv_init(&blocks[i], n, 8, 8, 3, 1, hw, hw);
  conv_init(&c2, n, 8, 16, 3, 1, hw / 2, hw / 2);
  conv_init(&fc, n, 16, classes, hw / 4, 0, hw / 4, hw / 4);
  cudnnActivationDescriptor_t relu; cudnnPoolingDescriptor_t pool;
  DESC(cudnnCreateActivationDescriptor(&relu));
  DESC(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, 0, 0.0));
  DESC(cudnnCreatePoolingDescriptor(&pool));
  DESC(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, 0, 2, 2, 0, 0, 2, 2));
  cudnnTensorDescriptor_t p1 = tdesc(n, 8, hw / 2, hw / 2), p2 = tdesc(n, 16, hw / 4, hw / 4);

  /* Blobs: data and gradient, one cudaMalloc each. */
  size_t in = (size_t)n * 3 * hw * hw, a1 = (size_t)n * 8 * hw * hw, a2 = (size_t)n * 8 * (hw / 2) * (hw / 2);
  size_t a3 = (size_t)n * 16 * (hw / 2) * (hw / 2), a4 = (size_t)n * 16 * (hw / 4) * (hw / 4), out = (size_t)n * classes;
  float *x = dalloc(in * 4), *conv1 = dalloc(a1 * 4), *relu1 = dalloc(a1 * 4), *pool1 = dalloc(a2 * 4);
  float *conv2 = dalloc(a3 * 4), *relu2 = dalloc(a3 * 4), *pool2 = dalloc(a4 * 4), *logits = dalloc(out * 4);
  float *probs = dalloc(out * 4), *labels = dalloc(n * 4), *loss = dalloc(4);
  float *dlogits = dalloc(out * 4), *dpool2 = dalloc(a4 * 4), *drelu2 = dalloc(a3 * 4), *dconv2 = dalloc(a3 * 4);
  float *dpool1 = dalloc(a2 * 4), *drelu1 = dalloc(a1 * 4), *dconv1 = dalloc(a1 * 4);
  /* Each block: its convolution and ReLU outputs and their gradients. */
  float **bconv = calloc((size_t)depth + 1, sizeof *bconv), **brelu = calloc((size_t)depth + 1, sizeof *brelu);
  float **bdconv = calloc((size_t)depth + 1, sizeof *bdconv), **bdrelu = calloc((size_t)depth + 1, sizeof *bdrelu);
  for (int i = 0; i < depth; i++) {
    bconv[i] = dalloc(a1 * 4); brelu[i] = dalloc(a1 * 4); bdconv[i] = dalloc(a1 * 4); bdrelu[i] = dalloc(a1 * 4);
  }

  float *hx = malloc(in * 4), *hl = malloc(n * 4);
  for (size_t i = 0; i < in; i++) hx[i] = frand();
  for (int i = 0; i < n; i++) hl[i] = (float)(i % classes);
  CU(copy, cudaMemcpy(x, hx, in * 4, cudaMemcpyHostToDevice));
  CU(copy, cudaMemcpy(labels, hl, n * 4, cudaMemcpyHostToDevice));

  const float lr = 0.05f;
  /* Each iteration's time on the device's clock (on stderr at the end with TRAINER_TIMES set:
     stdout stays comparable between runs). */
  cudaEvent_t *marks = malloc((iters + 1) * sizeof *marks);
  for (int i = 0; i <= iters; i++) cudaEventCreate(&marks[i]);
  /* TRAINER_PLANT: a planted in-place write (above); TRAINER_VARY=K: iteration K makes calls
     the others do not (a scratch allocation, a memset, its free), leaving the results alone;
     TRAINER_EVAL=K: iterations K to 2K - 1 are an evaluation pass (the forward pass and the
     loss only), so the program runs one kind of iteration, another, then the first again. */
  const int plant = getenv("TRAINER_PLANT") != NULL;
  const int vary = getenv("TRAINER_VARY") ? atoi(getenv("TRAINER_VARY")) : -1;
  const int eval = getenv("TRAINER_EVAL") ? atoi(getenv("TRAINER_EVAL")) : 0;
  for (int it = 0; it < iters; it++) {
    cudaEventRecord(marks[it], NULL);
    if (it == vary) {
      void *scratch = dalloc((size_t)4 << 20);
      CU(memset, cudaMemset(scratch, 0, (size_t)4 << 20));
      CU(free, cudaFree(scratch));
    }
    /* forward */
    conv_fwd(&c1, x, conv1);
    DNN(cudnnActivationForward(dnn, relu, &ONE, c1.y, conv1, &ZERO, c1.y, relu1));
    float *top = relu1;
    for (int i = 0; i < depth; i++) {
      conv_fwd(&blocks[i], top, bconv[i]);
      DNN(cudnnActivationForward(dnn, relu, &ONE, c1.y, bconv[i], &ZERO, c1.y, brelu[i]));
      if (plant) {
        /* The ReLU's input doubled in place after it was read: its backward (which needs only
           the sign) is unchanged, but recomputing the ReLU's output from it would double it. */
        int nn = (int)a1;
        void *sargs[] = {&nn, &bconv[i]};
        dim3 g = {(unsigned)(nn + 255) / 256, 1, 1}, b = {256, 1, 1};
        CU(launch, cudaLaunchKernel(k_scale2, g, b, sargs, 0, NULL));
      }
      top = brelu[i];
    }
    DNN(cudnnPoolingForward(dnn, pool, &ONE, c1.y, top, &ZERO, p1, pool1));
    conv_fwd(&c2, pool1, conv2);
    DNN(cudnnActivationForward(dnn, relu, &ONE, c2.y, conv2, &ZERO, c2.y, relu2));
    DNN(cudnnPoolingForward(dnn, pool, &ONE, c2.y, relu2, &ZERO, p2, pool2));
    conv_fwd(&fc, pool2, logits);
    DNN(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &ONE, fc.y, logits, &ZERO, fc.y, probs));
    CU(memset, cudaMemset(loss, 0, 4));
    int nn = n, k = classes;
    void *xargs[] = {&nn, &k, &probs, &labels, &dlogits, &loss};
    dim3 one = {1, 1, 1};
    CU(launch, cudaLaunchKernel(k_xent, one, one, xargs, 0, NULL));
    if (eval > 0 && it >= eval && it < 2 * eval) {
      float hloss;
      CU(copy, cudaMemcpy(&hloss, loss, 4, cudaMemcpyDeviceToHost));
      CU(sync, cudaDeviceSynchronize());
      printf("iter %d eval loss %.9g\n", it, hloss);
      continue;
    }
    /* backward */
    conv_bwd(&fc, pool2, dlogits, dpool2);
    DNN(cudnnPoolingBackward(dnn, pool, &ONE, p2, pool2, p2, dpool2, c2.y, relu2, &ZERO, c2.y, drelu2));
    DNN(cudnnActivationBackward(dnn, relu, &ONE, c2.y, relu2, c2.y, drelu2, c2.y, conv2, &ZERO, c2.y, dconv2));
    conv_bwd(&c2, pool1, dconv2, dpool1);
    /* The gradient of the last full-resolution output, then back through the blocks. */
    float *dtop = depth ? bdrelu[depth - 1] : drelu1;
    DNN(cudnnPoolingBackward(dnn, pool, &ONE, p1, pool1, p1, dpool1, c1.y, top, &ZERO, c1.y, dtop));
    for (int i = depth - 1; i >= 0; i--) {
      DNN(cudnnActivationBackward(dnn, relu, &ONE, c1.y, brelu[i], c1.y, bdrelu[i], c1.y, bconv[i], &ZERO, c1.y, bdconv[i]));
      float *below = i ? brelu[i - 1] : relu1, *dbelow = i ? bdrelu[i - 1] : drelu1;
      conv_bwd(&blocks[i], below, bdconv[i], dbelow);
    }
    DNN(cudnnActivationBackward(dnn, relu, &ONE, c1.y, relu1, c1.y, drelu1, c1.y, conv1, &ZERO, c1.y, dconv1));
    conv_bwd(&c1, x, dconv1, NULL);
    /* update */
    Conv *layers[3] = {&c1, &c2, &fc};
    for (int i = 0; i < 3 + depth; i++) {
      Conv *l = i < 3 ? layers[i] : &blocks[i - 3];
      sgd_step(l->W, l->dW, l->cout * l->cin * l->k * l->k, lr);
      sgd_step(l->B, l->dB, l->cout, lr);
    }
    float hloss;
    CU(copy, cudaMemcpy(&hloss, loss, 4, cudaMemcpyDeviceToHost));
    CU(sync, cudaDeviceSynchronize());
    printf("iter %d loss %.9g\n", it, hloss);
  }
  cudaEventRecord(marks[iters], NULL);
  CU(sync, cudaDeviceSynchronize());
  print_iteration_times("trainer", marks, iters);
  for (int i = 0; i <= iters; i++) cudaEventDestroy(marks[i]);
  free(marks);

  /* FNV-1a over every weight and bias. */
  uint64_t h = 1469598103934665603ull;
  Conv *layers[3] = {&c1, &c2, &fc};
  for (int i = 0; i < 3 + depth; i++) {
    Conv *l = i < 3 ? layers[i] : &blocks[i - 3];
    size_t nw = (size_t)l->cout * l->cin * l->k * l->k;
    unsigned char *buf = malloc((nw + l->cout) * 4);
    CU(copy, cudaMemcpy(buf, l->W, nw * 4, cudaMemcpyDeviceToHost));
    CU(copy, cudaMemcpy(buf + nw * 4, l->B, l->cout * 4, cudaMemcpyDeviceToHost));
    for (size_t b = 0; b < (nw + l->cout) * 4; b++) { h ^= buf[b]; h *= 1099511628211ull; }
    free(buf);
  }
  printf("checksum %016llx\n", (unsigned long long)h);

  float *blobs[] = {x, conv1, relu1, pool1, conv2, relu2, pool2, logits, probs, labels, loss, dlogits, dpool2, drelu2,
                    dconv2, dpool1, drelu1, dconv1};
  for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++) CU(free, cudaFree(blobs[i]));
  for (int i = 0; i < depth; i++) {
    CU(free, cudaFree(bconv[i])); CU(free, cudaFree(brelu[i])); CU(free, cudaFree(bdconv[i])); CU(free, cudaFree(bdrelu[i]));
  }
  for (int i = 0; i < 3 + depth; i++) {
    Conv *l = i < 3 ? layers[i] : &blocks[i - 3];
    CU(free, cudaFree(l->W)); CU(free, cudaFree(l->dW)); CU(free, cudaFree(l->B)); CU(free, cudaFree(l->dB));
    if (l->ws) CU(free, cudaFree(l->ws));
  }
  cudnnDestroy(dnn);
  free(hx); free(hl);
  printf("calls alloc=%ld free=%ld copy=%ld memset=%ld launch=%ld cudnn=%ld sync=%ld\n", n_alloc, n_free, n_copy, n_memset,
         n_launch, n_cudnn, n_sync);
  return 0;
}
