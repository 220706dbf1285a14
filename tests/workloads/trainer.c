/* trainer: a small convolutional network trained the way a Caffe-style framework does it, with
 * the C ABI only: one cudaMalloc per blob, legacy cuDNN convolutions (algorithm from
 * cudnnGet*Algorithm_v7, one workspace per layer), bias add, ReLU, max pooling, softmax, a
 * cross-entropy kernel and SGD by kernel launches. Deterministic: it prints each iteration's loss,
 * a checksum of the weights, and its own count of each kind of API call.
 *
 * Usage: trainer [ITERATIONS] [BATCH] [WIDTH] [DEPTH]   (defaults 5, 8, 16, 0: input BATCH x 3 x WIDTH x WIDTH)
 * Network: conv(3->8, 3x3) relu, DEPTH x [conv(8->8, 3x3) relu], pool2, conv(8->16, 3x3) relu pool2,
 * fc(->10), softmax. DEPTH makes the network deeper at full resolution: more memory, the same
 * largest single operation (what memory virtualisation tests need).
 *
 * Loops that change (docs/loops.md); each is off unless its variable is set, and with none set
 * the program makes exactly the calls it always made:
 *   TRAINER_SHAPES=B1,B2,...  iteration i trains on a batch of B[i % count] images (the first of
 *       the data set), each in 1..BATCH: its blobs are allocated at the start of the iteration
 *       for that batch, the batch is copied in, and everything is freed at its end, as a framework
 *       that allocates each tensor per step does (one set of descriptors, algorithms and
 *       workspaces per distinct batch, made at set-up). "8,8,8,3" is an epoch of four batches
 *       whose last is smaller. The weights do not depend on the batch.
 *   TRAINER_SHAPES_SEED=S     each iteration's batch drawn from TRAINER_SHAPES by a generator
 *       seeded with S (S > 0) instead of in turn.
 *   TRAINER_EVAL_EVERY=N      after every N training iterations one evaluation pass (forward and
 *       loss only): iteration i evaluates when i % (N + 1) == N.
 *   TRAINER_ACCUM=K           gradient accumulation: each training iteration's weight gradients
 *       are added to those since the last update (cuDNN's beta 1; beta 0 at the first of each K),
 *       and SGD runs after every K-th training iteration with the rate divided by K.
 *   TRAINER_CHECKPOINT=N      after every N-th update every weight and bias is copied to the host
 *       and its hash printed ("checkpoint S HASH").
 *   TRAINER_KERNEL=K          the blocks' convolutions are K x K (odd; default 3): 1 keeps data
 *       mode's arithmetic small per byte of activation, for tests that need tensors of the
 *       allocator's 2 MiB pages and many iterations.
 *   TRAINER_UNFREEZE=T        the backbone (the first convolution and the blocks) is frozen for the
 *       first T training iterations: no gradient flows below the second convolution and the
 *       backbone is not updated; from training iteration T on it is trained.
 *
 * Data parallelism, as DDP does it: with TRAINER_RANKS=N (2..16), TRAINER_RANK=R and
 * TRAINER_NCCL_ID=PATH, the process works on device R, trains on its own data (the same weights,
 * a batch drawn for rank R) and averages every weight and bias gradient over the N ranks with
 * ncclAllReduce (NCCL reached through dlopen) before each update, so every rank ends with the
 * same weights. Rank 0 writes NCCL's unique id to PATH; the others wait for it. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_abi.h"
#include "iteration_times.h"

/* Data parallelism (the header): NCCL's calls, found with dlsym. */
typedef struct { char bytes[128]; } ncclUniqueId;
static int (*nccl_get_id)(ncclUniqueId *);
static int (*nccl_init)(void **, int, ncclUniqueId, int);
static int (*nccl_all_reduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
static int (*nccl_destroy)(void *);
static void *nccl_comm;

/* Joins the communicator of TRAINER_RANKS ranks as TRAINER_RANK: 0 when not data-parallel, the
   rank otherwise; exits with a message on a bad setting or a failed call. */
static int nccl_join(void) {
  const char *ranks_v = getenv("TRAINER_RANKS"), *rank_v = getenv("TRAINER_RANK"), *path = getenv("TRAINER_NCCL_ID");
  if (!ranks_v) return 0;
  int ranks = atoi(ranks_v), rank = rank_v ? atoi(rank_v) : -1;
  if (ranks < 2 || ranks > 16 || rank < 0 || rank >= ranks || !path) {
    fprintf(stderr, "trainer: TRAINER_RANKS=2..16, TRAINER_RANK=0..RANKS-1 and TRAINER_NCCL_ID=PATH go together\n");
    exit(2);
  }
  void *h = dlopen("libnccl.so.2", RTLD_NOW);
  if (!h) { fprintf(stderr, "trainer: cannot open libnccl.so.2\n"); exit(1); }
  *(void **)&nccl_get_id = dlsym(h, "ncclGetUniqueId");
  *(void **)&nccl_init = dlsym(h, "ncclCommInitRank");
  *(void **)&nccl_all_reduce = dlsym(h, "ncclAllReduce");
  *(void **)&nccl_destroy = dlsym(h, "ncclCommDestroy");
  if (!nccl_get_id || !nccl_init || !nccl_all_reduce || !nccl_destroy) { fprintf(stderr, "trainer: libnccl.so.2 lacks a call\n"); exit(1); }
  if (cudaSetDevice(rank)) { fprintf(stderr, "trainer: cudaSetDevice(%d) failed\n", rank); exit(1); }
  ncclUniqueId id;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (rank == 0) {
    FILE *f = fopen(tmp, "wb");
    if (nccl_get_id(&id) || !f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) || rename(tmp, path)) {
      fprintf(stderr, "trainer: cannot make NCCL's unique id at %s\n", path);
      exit(1);
    }
  } else {
    for (int tries = 0;; tries++) {
      FILE *f = fopen(path, "rb");
      if (f && fread(&id, sizeof id, 1, f) == 1) { fclose(f); break; }
      if (f) fclose(f);
      if (tries > 6000) { fprintf(stderr, "trainer: no NCCL unique id at %s\n", path); exit(1); }
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
  }
  if (nccl_init(&nccl_comm, ranks, id, rank)) { fprintf(stderr, "trainer: ncclCommInitRank failed\n"); exit(1); }
  return rank;
}

/* The gradient averaged over the ranks, in place (ncclFloat 7, ncclAvg 4), on the default
   stream. */
static void all_reduce(float *g, int n) {
  if (nccl_comm && nccl_all_reduce(g, g, (size_t)n, 7, 4, nccl_comm, NULL)) {
    fprintf(stderr, "trainer: ncclAllReduce failed\n");
    exit(1);
  }
}

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

/* The batch-dependent half of a layer: its input and output descriptors for a batch of n, the
   algorithms cuDNN picks for them, and a workspace as large as the three need. */
static void conv_shape(Conv *l, int n) {
  l->x = tdesc(n, l->cin, l->h, l->w); l->y = tdesc(n, l->cout, l->oh, l->ow);
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
}

static void conv_init(Conv *l, int n, int cin, int cout, int k, int pad, int h, int w) {
  l->cin = cin; l->cout = cout; l->k = k; l->pad = pad; l->h = h; l->w = w;
  l->oh = h + 2 * pad - k + 1; l->ow = w + 2 * pad - k + 1;
  l->bias = tdesc(1, cout, 1, 1);
  int fd[4] = {cout, cin, k, k}, pads[2] = {pad, pad}, one2[2] = {1, 1};
  DESC(cudnnCreateFilterDescriptor(&l->f));
  DESC(cudnnSetFilterNdDescriptor(l->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, fd));
  DESC(cudnnCreateConvolutionDescriptor(&l->conv));
  DESC(cudnnSetConvolutionNdDescriptor(l->conv, 2, pads, one2, one2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  conv_shape(l, n);
  size_t nw = (size_t)cout * cin * k * k;
  float *host = malloc(nw * 4), scale = 1.0f / sqrtf((float)(cin * k * k));
  for (size_t i = 0; i < nw; i++) host[i] = frand() * scale;
  l->W = dalloc(nw * 4); l->dW = dalloc(nw * 4); l->B = dalloc(cout * 4); l->dB = dalloc(cout * 4);
  CU(copy, cudaMemcpy(l->W, host, nw * 4, cudaMemcpyHostToDevice));
  CU(memset, cudaMemset(l->B, 0, cout * 4));
  free(host);
}

/* The layer `src` for a batch of n: the same weights and gradients, its own descriptors,
   algorithms and workspace. */
static void conv_like(Conv *l, const Conv *src, int n) {
  *l = *src;
  conv_shape(l, n);
}

static const float ONE = 1.0f, ZERO = 0.0f;

static void conv_fwd(Conv *l, const float *x, float *y) {
  DNN(cudnnConvolutionForward(dnn, &ONE, l->x, x, l->f, l->W, l->conv, l->fwd_algo, l->ws, l->ws_size, &ZERO, l->y, y));
  DNN(cudnnAddTensor(dnn, &ONE, l->bias, l->B, &ONE, l->y, y));
}

/* beta: 0 sets the weight gradients, 1 adds to them (accumulation). */
static void conv_bwd(Conv *l, const float *x, const float *dy, float *dx, const float *beta) {
  DNN(cudnnConvolutionBackwardBias(dnn, &ONE, l->y, dy, beta, l->bias, l->dB));
  DNN(cudnnConvolutionBackwardFilter(dnn, &ONE, l->x, x, l->y, dy, l->conv, l->bwd_filter_algo, l->ws, l->ws_size, beta,
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

/* The network for one batch size: its layers (the weights are shared by every batch size) and
   its pooling outputs' descriptors. */
typedef struct {
  int n;
  Conv c1, c2, fc, *blocks;
  cudnnTensorDescriptor_t p1, p2;
} Net;

/* Layer i in the order of the update and the checksum: the first convolution, the second, the
   classifier, then the blocks. */
static Conv *layer(Net *net, int i) {
  return i == 0 ? &net->c1 : i == 1 ? &net->c2 : i == 2 ? &net->fc : &net->blocks[i - 3];
}

/* Blobs: data and gradient, one cudaMalloc each. */
typedef struct {
  float *x, *conv1, *relu1, *pool1, *conv2, *relu2, *pool2, *logits, *probs, *labels, *loss;
  float *dlogits, *dpool2, *drelu2, *dconv2, *dpool1, *drelu1, *dconv1;
  /* Each block: its convolution and ReLU outputs and their gradients. */
  float **bconv, **brelu, **bdconv, **bdrelu;
} Blobs;

static int depth, classes = 10;

static void blobs_alloc(Blobs *b, int n, int hw) {
  size_t in = (size_t)n * 3 * hw * hw, a1 = (size_t)n * 8 * hw * hw, a2 = (size_t)n * 8 * (hw / 2) * (hw / 2);
  size_t a3 = (size_t)n * 16 * (hw / 2) * (hw / 2), a4 = (size_t)n * 16 * (hw / 4) * (hw / 4), out = (size_t)n * classes;
  b->x = dalloc(in * 4); b->conv1 = dalloc(a1 * 4); b->relu1 = dalloc(a1 * 4); b->pool1 = dalloc(a2 * 4);
  b->conv2 = dalloc(a3 * 4); b->relu2 = dalloc(a3 * 4); b->pool2 = dalloc(a4 * 4); b->logits = dalloc(out * 4);
  b->probs = dalloc(out * 4); b->labels = dalloc(n * 4); b->loss = dalloc(4);
  b->dlogits = dalloc(out * 4); b->dpool2 = dalloc(a4 * 4); b->drelu2 = dalloc(a3 * 4); b->dconv2 = dalloc(a3 * 4);
  b->dpool1 = dalloc(a2 * 4); b->drelu1 = dalloc(a1 * 4); b->dconv1 = dalloc(a1 * 4);
  b->bconv = calloc((size_t)depth + 1, sizeof *b->bconv); b->brelu = calloc((size_t)depth + 1, sizeof *b->brelu);
  b->bdconv = calloc((size_t)depth + 1, sizeof *b->bdconv); b->bdrelu = calloc((size_t)depth + 1, sizeof *b->bdrelu);
  for (int i = 0; i < depth; i++) {
    b->bconv[i] = dalloc(a1 * 4); b->brelu[i] = dalloc(a1 * 4); b->bdconv[i] = dalloc(a1 * 4); b->bdrelu[i] = dalloc(a1 * 4);
  }
}

/* The first n images of the data set and their labels, into the blobs. */
static void blobs_upload(Blobs *b, int n, int hw, const float *hx, const float *hl) {
  CU(copy, cudaMemcpy(b->x, hx, (size_t)n * 3 * hw * hw * 4, cudaMemcpyHostToDevice));
  CU(copy, cudaMemcpy(b->labels, hl, (size_t)n * 4, cudaMemcpyHostToDevice));
}

static void blobs_free(Blobs *b) {
  float *blobs[] = {b->x, b->conv1, b->relu1, b->pool1, b->conv2, b->relu2, b->pool2, b->logits, b->probs, b->labels,
                    b->loss, b->dlogits, b->dpool2, b->drelu2, b->dconv2, b->dpool1, b->drelu1, b->dconv1};
  for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++) CU(free, cudaFree(blobs[i]));
  for (int i = 0; i < depth; i++) {
    CU(free, cudaFree(b->bconv[i])); CU(free, cudaFree(b->brelu[i])); CU(free, cudaFree(b->bdconv[i]));
    CU(free, cudaFree(b->bdrelu[i]));
  }
  free(b->bconv); free(b->brelu); free(b->bdconv); free(b->bdrelu);
}

/* FNV-1a over every weight and bias, copied to the host layer by layer. */
static uint64_t weights_hash(Net *net) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 3 + depth; i++) {
    Conv *l = layer(net, i);
    size_t nw = (size_t)l->cout * l->cin * l->k * l->k;
    unsigned char *buf = malloc((nw + l->cout) * 4);
    CU(copy, cudaMemcpy(buf, l->W, nw * 4, cudaMemcpyDeviceToHost));
    CU(copy, cudaMemcpy(buf + nw * 4, l->B, l->cout * 4, cudaMemcpyDeviceToHost));
    for (size_t b = 0; b < (nw + l->cout) * 4; b++) { h ^= buf[b]; h *= 1099511628211ull; }
    free(buf);
  }
  return h;
}

/* A loop option: unset is `dflt`; set, an integer of at least `min`, else the usage. */
static int env_int(const char *name, int dflt, int min) {
  const char *v = getenv(name);
  if (!v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < min || x > 1000000) {
    fprintf(stderr, "trainer: %s=%s: an integer from %d expected\n", name, v, min);
    exit(2);
  }
  return (int)x;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5, n = argc > 2 ? atoi(argv[2]) : 8, hw = argc > 3 ? atoi(argv[3]) : 16;
  depth = argc > 4 ? atoi(argv[4]) : 0;
  if (iters < 1 || n < 1 || hw < 4 || hw % 4 || depth < 0 || depth > 64) {
    fprintf(stderr, "usage: trainer [ITERATIONS] [BATCH] [WIDTH, a multiple of 4] [DEPTH, 0..64]\n");
    return 2;
  }
  /* The loops that change (the header): none set, the calls are those the trainer always made. */
  int shapes[64], nshapes = 0;
  if (getenv("TRAINER_SHAPES")) {
    const char *v = getenv("TRAINER_SHAPES");
    for (const char *p = v; *p;) {
      char *end;
      long b = strtol(p, &end, 10);
      if (end == p || b < 1 || b > n || nshapes == 64 || (*end != ',' && *end != '\0')) {
        fprintf(stderr, "trainer: TRAINER_SHAPES=%s: up to 64 batch sizes from 1 to BATCH (%d), comma-separated\n", v, n);
        return 2;
      }
      shapes[nshapes++] = (int)b;
      p = *end ? end + 1 : end;
    }
    if (!nshapes) {
      fprintf(stderr, "trainer: TRAINER_SHAPES is empty\n");
      return 2;
    }
  }
  const int shapes_seed = env_int("TRAINER_SHAPES_SEED", 0, 1), eval_every = env_int("TRAINER_EVAL_EVERY", 0, 1);
  const int accum = env_int("TRAINER_ACCUM", 1, 1), ckpt = env_int("TRAINER_CHECKPOINT", 0, 1);
  const int unfreeze = env_int("TRAINER_UNFREEZE", 0, 1), kernel = env_int("TRAINER_KERNEL", 3, 1);
  if (kernel % 2 == 0 || kernel > hw) {
    fprintf(stderr, "trainer: TRAINER_KERNEL=%d: an odd size up to WIDTH expected\n", kernel);
    return 2;
  }
  const int rank = nccl_join();
  register_kernels();
  DESC(cudnnCreate(&dnn)); /* handles and descriptors are not counted */
  Net base = {.n = n};
  conv_init(&base.c1, n, 3, 8, 3, 1, hw, hw);
  base.blocks = calloc((size_t)depth + 1, sizeof *base.blocks);
  for (int i = 0; i < depth; i++) conv_init(&base.blocks[i], n, 8, 8, kernel, kernel / 2, hw, hw);
  conv_init(&base.c2, n, 8, 16, 3, 1, hw / 2, hw / 2);
  conv_init(&base.fc, n, 16, classes, hw / 4, 0, hw / 4, hw / 4);
  cudnnActivationDescriptor_t relu; cudnnPoolingDescriptor_t pool;
  DESC(cudnnCreateActivationDescriptor(&relu));
  DESC(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, 0, 0.0));
  DESC(cudnnCreatePoolingDescriptor(&pool));
  DESC(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, 0, 2, 2, 0, 0, 2, 2));
  base.p1 = tdesc(n, 8, hw / 2, hw / 2); base.p2 = tdesc(n, 16, hw / 4, hw / 4);
  /* One network per distinct batch of TRAINER_SHAPES (BATCH's is `base`). */
  Net nets[64];
  int nnets = 0;
  for (int s = 0; s < nshapes; s++) {
    int b = shapes[s], seen = b == n;
    for (int j = 0; j < nnets; j++) seen |= nets[j].n == b;
    if (seen) continue;
    Net *t = &nets[nnets++];
    t->n = b;
    conv_like(&t->c1, &base.c1, b);
    t->blocks = calloc((size_t)depth + 1, sizeof *t->blocks);
    for (int i = 0; i < depth; i++) conv_like(&t->blocks[i], &base.blocks[i], b);
    conv_like(&t->c2, &base.c2, b);
    conv_like(&t->fc, &base.fc, b);
    t->p1 = tdesc(b, 8, hw / 2, hw / 2); t->p2 = tdesc(b, 16, hw / 4, hw / 4);
  }

  /* Without TRAINER_SHAPES the blobs are allocated once, for BATCH, and the data copied in once. */
  Blobs bl;
  if (!nshapes) blobs_alloc(&bl, n, hw);
  size_t in = (size_t)n * 3 * hw * hw;
  float *hx = malloc(in * 4), *hl = malloc(n * 4);
  /* Each rank its own batch; rank 0 (and a run that is not data-parallel) the usual one. */
  rng ^= (uint64_t)rank * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < in; i++) hx[i] = frand();
  for (int i = 0; i < n; i++) hl[i] = (float)(i % classes);
  if (!nshapes) blobs_upload(&bl, n, hw, hx, hl);

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
  /* The batch sequence's own generator (xorshift64), apart from the data's. */
  uint64_t shape_rng = (uint64_t)shapes_seed * 0x9E3779B97F4A7C15ull;
  int trained = 0, updates = 0; /* training iterations and SGD updates so far */
  for (int it = 0; it < iters; it++) {
    cudaEventRecord(marks[it], NULL);
    if (it == vary) {
      void *scratch = dalloc((size_t)4 << 20);
      CU(memset, cudaMemset(scratch, 0, (size_t)4 << 20));
      CU(free, cudaFree(scratch));
    }
    Net *net = &base;
    if (nshapes) {
      int s = it % nshapes;
      if (shapes_seed) {
        shape_rng ^= shape_rng << 13; shape_rng ^= shape_rng >> 7; shape_rng ^= shape_rng << 17;
        s = (int)(shape_rng % (uint64_t)nshapes);
      }
      for (int j = 0; j < nnets; j++)
        if (nets[j].n == shapes[s]) net = &nets[j];
      blobs_alloc(&bl, net->n, hw);
      blobs_upload(&bl, net->n, hw, hx, hl);
    }
    Conv *c1 = &net->c1, *blocks = net->blocks, *c2 = &net->c2, *fc = &net->fc;
    const int nb = net->n;
    /* forward */
    conv_fwd(c1, bl.x, bl.conv1);
    DNN(cudnnActivationForward(dnn, relu, &ONE, c1->y, bl.conv1, &ZERO, c1->y, bl.relu1));
    float *top = bl.relu1;
    for (int i = 0; i < depth; i++) {
      conv_fwd(&blocks[i], top, bl.bconv[i]);
      DNN(cudnnActivationForward(dnn, relu, &ONE, c1->y, bl.bconv[i], &ZERO, c1->y, bl.brelu[i]));
      if (plant) {
        /* The ReLU's input doubled in place after it was read: its backward (which needs only
           the sign) is unchanged, but recomputing the ReLU's output from it would double it. */
        int nn = nb * 8 * hw * hw;
        void *sargs[] = {&nn, &bl.bconv[i]};
        dim3 g = {(unsigned)(nn + 255) / 256, 1, 1}, b = {256, 1, 1};
        CU(launch, cudaLaunchKernel(k_scale2, g, b, sargs, 0, NULL));
      }
      top = bl.brelu[i];
    }
    DNN(cudnnPoolingForward(dnn, pool, &ONE, c1->y, top, &ZERO, net->p1, bl.pool1));
    conv_fwd(c2, bl.pool1, bl.conv2);
    DNN(cudnnActivationForward(dnn, relu, &ONE, c2->y, bl.conv2, &ZERO, c2->y, bl.relu2));
    DNN(cudnnPoolingForward(dnn, pool, &ONE, c2->y, bl.relu2, &ZERO, net->p2, bl.pool2));
    conv_fwd(fc, bl.pool2, bl.logits);
    DNN(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &ONE, fc->y, bl.logits, &ZERO, fc->y,
                            bl.probs));
    CU(memset, cudaMemset(bl.loss, 0, 4));
    int nn = nb, k = classes;
    void *xargs[] = {&nn, &k, &bl.probs, &bl.labels, &bl.dlogits, &bl.loss};
    dim3 one = {1, 1, 1};
    CU(launch, cudaLaunchKernel(k_xent, one, one, xargs, 0, NULL));
    if ((eval > 0 && it >= eval && it < 2 * eval) || (eval_every && it % (eval_every + 1) == eval_every)) {
      float hloss;
      CU(copy, cudaMemcpy(&hloss, bl.loss, 4, cudaMemcpyDeviceToHost));
      CU(sync, cudaDeviceSynchronize());
      if (nshapes)
        printf("iter %d batch %d eval loss %.9g\n", it, nb, hloss);
      else
        printf("iter %d eval loss %.9g\n", it, hloss);
      if (nshapes) blobs_free(&bl);
      continue;
    }
    /* backward. Accumulating, the weight gradients are set (beta 0) at the first training
       iteration of each TRAINER_ACCUM and added to (beta 1) at the others; the backbone's are
       also set at the first iteration it is trained (TRAINER_UNFREEZE). */
    const int frozen = trained < unfreeze;
    const float *beta = trained % accum == 0 ? &ZERO : &ONE;
    const float *beta_backbone = trained % accum == 0 || trained == unfreeze ? &ZERO : &ONE;
    conv_bwd(fc, bl.pool2, bl.dlogits, bl.dpool2, beta);
    DNN(cudnnPoolingBackward(dnn, pool, &ONE, net->p2, bl.pool2, net->p2, bl.dpool2, c2->y, bl.relu2, &ZERO, c2->y,
                             bl.drelu2));
    DNN(cudnnActivationBackward(dnn, relu, &ONE, c2->y, bl.relu2, c2->y, bl.drelu2, c2->y, bl.conv2, &ZERO, c2->y,
                                bl.dconv2));
    conv_bwd(c2, bl.pool1, bl.dconv2, frozen ? NULL : bl.dpool1, beta);
    if (!frozen) {
      /* The gradient of the last full-resolution output, then back through the blocks. */
      float *dtop = depth ? bl.bdrelu[depth - 1] : bl.drelu1;
      DNN(cudnnPoolingBackward(dnn, pool, &ONE, net->p1, bl.pool1, net->p1, bl.dpool1, c1->y, top, &ZERO, c1->y, dtop));
      for (int i = depth - 1; i >= 0; i--) {
        DNN(cudnnActivationBackward(dnn, relu, &ONE, c1->y, bl.brelu[i], c1->y, bl.bdrelu[i], c1->y, bl.bconv[i], &ZERO,
                                    c1->y, bl.bdconv[i]));
        float *below = i ? bl.brelu[i - 1] : bl.relu1, *dbelow = i ? bl.bdrelu[i - 1] : bl.drelu1;
        conv_bwd(&blocks[i], below, bl.bdconv[i], dbelow, beta_backbone);
      }
      DNN(cudnnActivationBackward(dnn, relu, &ONE, c1->y, bl.relu1, c1->y, bl.drelu1, c1->y, bl.conv1, &ZERO, c1->y,
                                  bl.dconv1));
      conv_bwd(c1, bl.x, bl.dconv1, NULL, beta_backbone);
    }
    /* update, after every TRAINER_ACCUM-th training iteration, at the rate divided by it; the
       backbone only once it is trained */
    const int update = trained % accum == accum - 1;
    if (update) {
      for (int i = 0; i < 3 + depth; i++) {
        if (frozen && (i == 0 || i >= 3)) continue;
        Conv *l = layer(net, i);
        all_reduce(l->dW, l->cout * l->cin * l->k * l->k);
        all_reduce(l->dB, l->cout);
        sgd_step(l->W, l->dW, l->cout * l->cin * l->k * l->k, lr / (float)accum);
        sgd_step(l->B, l->dB, l->cout, lr / (float)accum);
      }
      updates++;
    }
    trained++;
    float hloss;
    CU(copy, cudaMemcpy(&hloss, bl.loss, 4, cudaMemcpyDeviceToHost));
    CU(sync, cudaDeviceSynchronize());
    if (nshapes)
      printf("iter %d batch %d loss %.9g\n", it, nb, hloss);
    else
      printf("iter %d loss %.9g\n", it, hloss);
    /* A checkpoint: every weight copied to the host, as torch.save of a state dict does. */
    if (update && ckpt && updates % ckpt == 0)
      printf("checkpoint %d %016llx\n", updates, (unsigned long long)weights_hash(net));
    if (nshapes) blobs_free(&bl);
  }
  cudaEventRecord(marks[iters], NULL);
  CU(sync, cudaDeviceSynchronize());
  print_iteration_times("trainer", marks, iters);
  for (int i = 0; i <= iters; i++) cudaEventDestroy(marks[i]);
  free(marks);

  printf("checksum %016llx\n", (unsigned long long)weights_hash(&base));

  if (!nshapes) blobs_free(&bl);
  for (int i = 0; i < 3 + depth; i++) {
    Conv *l = layer(&base, i);
    CU(free, cudaFree(l->W)); CU(free, cudaFree(l->dW)); CU(free, cudaFree(l->B)); CU(free, cudaFree(l->dB));
    if (l->ws) CU(free, cudaFree(l->ws));
  }
  for (int j = 0; j < nnets; j++)
    for (int i = 0; i < 3 + depth; i++)
      if (layer(&nets[j], i)->ws) CU(free, cudaFree(layer(&nets[j], i)->ws));
  cudnnDestroy(dnn);
  if (nccl_comm) nccl_destroy(nccl_comm);
  free(hx); free(hl);
  printf("calls alloc=%ld free=%ld copy=%ld memset=%ld launch=%ld cudnn=%ld sync=%ld\n", n_alloc, n_free, n_copy, n_memset,
         n_launch, n_cudnn, n_sync);
  return 0;
}
