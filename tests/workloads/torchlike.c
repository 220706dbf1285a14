/* torchlike: a small residual network trained the way PyTorch's eager mode drives the GPU, with
 * the C ABI only. Every tensor is one cudaMallocAsync on the compute stream and one cudaFreeAsync
 * when its last use is done (saved activations die during backward, gradients after the
 * optimizer step: zero_grad(set_to_none=True)); convolution workspaces are allocated around each
 * call; the data loader prefetches the next batch while the current one trains, so addresses
 * differ from one iteration to the next. Convolutions, bias, softmax are legacy cuDNN; ReLU (in
 * place), its backward (in place), the residual addition, gradient accumulation, cross-entropy
 * and SGD with momentum (in place, state allocated lazily at the first step) are kernels.
 * Deterministic: it prints each iteration's loss and a checksum of the weights.
 *
 * Usage: torchlike [ITERATIONS] [BATCH] [WIDTH] [CHANNELS] [BLOCKS] [KERNEL] [ACT] [CONV] [NORM] [DROP]
 *        (defaults 4, 4, 16, 8, 2, 3, relu, legacy, none, none)
 * Network: conv(3->C, KxK) relu_, BLOCKS x [conv ACT conv (KxK), + skip, relu_], conv(C->10, WxW)
 * (the classifier), softmax. A KERNEL of 1 keeps data mode's arithmetic small per byte of
 * activation (tests that need tensors of the allocator's 2 MiB granularity). ACT relu: relu_ in
 * place; gelu: GELU (tanh form) out of place, as a transformer's feed-forward layer runs it: its
 * input is kept for its backward and its output for the next convolution's, and both kernels
 * are named and laid out as ATen's contiguous elementwise kernels are in torch's fatbins
 * (vectorized_elementwise_kernel<4, functor, std::array<char*, K>>(int N, functor, operands),
 * the output first), so that Marmoset can tell their roles and replay them; softsign: the same
 * place in the network, with kernels written for the tests whose names say nothing of their
 * output's role (see softsign_forward). CONV legacy: each
 * forward convolution is cudnnConvolutionForward then its bias added in place (cudnnAddTensor,
 * beta 1); nobias: the convolution alone, as ResNet's convolutions before batch normalisation
 * (the bias is still trained, never applied); backend: the convolution alone through the cuDNN
 * backend API as PyTorch's default path runs it: one execution plan per layer, built at its
 * first use and kept (PyTorch's benchmark cache), a variant pack per call (unique ids 'x', 'w',
 * 'y'); backend-rebuild: the same, every plan destroyed after each iteration's optimizer step and
 * built again at its next use (a framework whose plan cache lets them go). Other than legacy,
 * the residual addition is ATen's out-of-place add kernel (named and laid out as in torch's
 * fatbins, output first), whose roles Marmoset reads exactly: the block's input stays as it
 * was, so its first convolution's output can be recomputed from it. NORM bn (ACT relu, CONV
 * other than legacy): ResNet's batch normalisation as PyTorch runs it through cuDNN: every
 * convolution but the classifier is followed by cudnnBatchNormalizationForwardTrainingEx
 * (OPS_BN, running statistics updated, statistics saved for the backward pass, scale 1 and
 * bias 0, not trained) into a new tensor, then ReLU in place as ATen's in-place kernel (named
 * and laid out as ATen's contiguous elementwise kernels, output first: {y, y}); a block's
 * second batch norm gets the skip added in place first (ATen's add kernel, {y, y, skip}), as
 * torchvision's `out += identity`. The backward pass is cudnnBatchNormalizationBackwardEx from
 * the convolution's output and the saved statistics. NORM bnsum: the same, but the skip is added
 * out of place into a new tensor (ATen's add kernel, {out, y, skip}; y freed right after), then
 * ReLU in place on it, as `relu(bn(...) + skip)` runs (examples/resnet50.py). NORM bncopy: as
 * bn, but each block's first batch norm output is copied aside (cudaMemcpyAsync device to
 * device) before its in-place ReLU, and the ReLU's backward reads the copy, as autograd runs an
 * in-place activation whose backward needs its input (SiLU, hardswish); the results are bn's,
 * bit for bit (the copy is positive where the ReLU's output is). NORM bnlate: as bn, with
 * another operation between each batch norm and the first in-place kernel on its output (a
 * scratch tensor of its size set and freed), as TensorFlow's executor interleaves ops: the
 * in-place kernels do not follow the call that wrote their tensor. DROP drop (NORM
 * none): dropout (keep 0.9) on the activation between a block's convolutions, as a
 * transformer's feed-forward layer runs it, through a kernel named and laid out as ATen's
 * fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>: three TensorInfos (input,
 * output, bool mask; the sizes and strides slots past the used dimension hold stale bytes, among
 * them the next convolution's bias address as two adjacent 4-byte words, as torch's stack leaves
 * them), the element count, the keep probability and a PhiloxCudaState by value; the mask is a
 * counter-based draw from the seed, the offset and the element index. The generator's offset
 * advances at every launch, as torch's does; drop-seeded: it starts again at each iteration (as
 * after torch.manual_seed at every step), so each iteration draws the same masks. The backward
 * pass scales the gradient by the mask (a plain kernel). drop-res: dropout instead on the
 * block's second convolution's output, added out of place to the skip and freed at once, as
 * BERT's `LayerNorm(dropout(dense(h)) + h)` runs: only the mask is kept for the backward pass. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"
#include "iteration_times.h"

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define DNN(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); exit(1); } } while (0)

static simgpuKernelAccess_t access_fn;
static cudaStream_t st;
static cudnnHandle_t dnn;

/* A kernel's view of n floats at the device pointer held in parameter slot p. */
static float *arg(simgpuKernelCtx *ctx, void *p, int n, int write) {
  return access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p, (size_t)n * 4, write);
}

/* relu_(int n, float *x): x = max(x, 0), in place */
static void relu_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float *x = arg(ctx, p[1], n, 1);
  if (!x) return;
  for (int i = 0; i < n; i++) if (x[i] < 0) x[i] = 0;
}

/* relu_backward_(int n, float *g, const float *y): g = y > 0 ? g : 0, in place */
static void relu_backward_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float *g = arg(ctx, p[1], n, 1);
  const float *y = arg(ctx, p[2], n, 0);
  if (!g || !y) return;
  for (int i = 0; i < n; i++) if (!(y[i] > 0)) g[i] = 0;
}

/* add(int n, const float *a, const float *b, float *out): out = a + b */
static void add(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  const float *a = arg(ctx, p[1], n, 0), *b = arg(ctx, p[2], n, 0);
  float *out = arg(ctx, p[3], n, 1);
  if (!a || !b || !out) return;
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* add_(int n, float *a, const float *b): a += b, in place */
static void add_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float *a = arg(ctx, p[1], n, 1);
  const float *b = arg(ctx, p[2], n, 0);
  if (!a || !b) return;
  for (int i = 0; i < n; i++) a[i] += b[i];
}

/* The tanh form of GELU and its derivative. */
static float gelu_of(float x) {
  const float c = 0.7978845608f, k = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(c * (x + k * x * x * x)));
}
static float gelu_grad(float x) {
  const float c = 0.7978845608f, k = 0.044715f;
  float t = tanhf(c * (x + k * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
}

/* A unary vectorized_elementwise_kernel<4, F, std::array<char*, 2>>(int n, functor, {out, x}):
 * out[i] = f(x[i]). */
static void unary(simgpuKernelCtx *ctx, void **p, float (*f)(float)) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *out = arg(ctx, &data[0], n, 1);
  const float *x = arg(ctx, &data[1], n, 0);
  if (!out || !x) return;
  for (int i = 0; i < n; i++) out[i] = f(x[i]);
}

/* GeluFunctor<float>: out = gelu(x) */
static void gelu(simgpuKernelCtx *ctx, void **p) { unary(ctx, p, gelu_of); }

/* vectorized_elementwise_kernel<4, GeluBackwardFunctor<float>, std::array<char*, 3>>(int n,
 * functor, {dx, dy, x}): dx = dy * gelu'(x) */
static void gelu_backward(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *dx = arg(ctx, &data[0], n, 1);
  const float *dy = arg(ctx, &data[1], n, 0), *x = arg(ctx, &data[2], n, 0);
  if (!dx || !dy || !x) return;
  for (int i = 0; i < n; i++) dx[i] = dy[i] * gelu_grad(x[i]);
}

/* ACT softsign: a kernel family written for the tests and named nowhere in Marmoset, a plain
 * function of a namespace with its parameters typed (c++filt: mm_test::softsign_forward(int,
 * float const*, float*)): out = x / (1 + |x|). Its output parameter is not const, so Marmoset
 * cannot tell from the name whether the kernel reads it too. */
static void softsign_forward(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  const float *x = arg(ctx, p[1], n, 0);
  float *out = arg(ctx, p[2], n, 1);
  if (!out || !x) return;
  for (int i = 0; i < n; i++) out[i] = x[i] / (1.0f + fabsf(x[i]));
}

/* mm_test::softsign_backward(int, float const* dy, float const* x, float* dx):
 * dx = dy / (1 + |x|)^2 */
static void softsign_backward(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  const float *dy = arg(ctx, p[1], n, 0), *x = arg(ctx, p[2], n, 0);
  float *dx = arg(ctx, p[3], n, 1);
  if (!dx || !dy || !x) return;
  for (int i = 0; i < n; i++) {
    float d = 1.0f + fabsf(x[i]);
    dx[i] = dy[i] / (d * d);
  }
}

/* vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, std::array<char*, 3>>(int n, functor,
 * {out, a, b}): out = a + b (CONV other than legacy: the residual addition, roles exact) */
static void aten_add(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  char **data = (char **)p[2];
  float *out = arg(ctx, &data[0], n, 1);
  const float *a = arg(ctx, &data[1], n, 0), *b = arg(ctx, &data[2], n, 0);
  if (!out || !a || !b) return;
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* xent(int n, int k, const float *probs, const float *labels, float *dlogits, float *loss) */
static void xent(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0], k = *(int *)p[1];
  const float *probs = arg(ctx, p[2], n * k, 0), *labels = arg(ctx, p[3], n, 0);
  float *grad = arg(ctx, p[4], n * k, 1), *loss = arg(ctx, p[5], 1, 1);
  if (!probs || !labels || !grad || !loss) return;
  float total = 0;
  for (int i = 0; i < n; i++) {
    int y = (int)labels[i];
    for (int c = 0; c < k; c++) grad[i * k + c] = (probs[i * k + c] - (c == y ? 1.0f : 0.0f)) / (float)n;
    total -= logf(probs[i * k + y] + 1e-12f);
  }
  *loss = total / (float)n;
}

/* sgd_(int n, float lr, float mu, float *w, float *v, const float *g): v = mu v + g; w -= lr v */
static void sgd_(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float lr = *(float *)p[1], mu = *(float *)p[2];
  float *w = arg(ctx, p[3], n, 1), *v = arg(ctx, p[4], n, 1);
  const float *g = arg(ctx, p[5], n, 0);
  if (!w || !v || !g) return;
  for (int i = 0; i < n; i++) {
    v[i] = mu * v[i] + g[i];
    w[i] -= lr * v[i];
  }
}

/* vectorized_elementwise_kernel<4, ClampMinFunctor<float>, std::array<char*, 2>>(int n, functor,
 * {out, x}): out = max(x, 0) (NORM bn: relu_ in place, {y, y}; torch's launch_clamp_scalar) */
static float relu_of(float x) { return x < 0 ? 0 : x; }
static void aten_relu(simgpuKernelCtx *ctx, void **p) { unary(ctx, p, relu_of); }

/* ATen's TensorInfo<T, unsigned int> (MAX_TENSORINFO_DIMS 25) and PhiloxCudaState, by value. */
#define TI_DIMS 25
typedef struct { float *data; unsigned sizes[TI_DIMS], strides[TI_DIMS]; int dims; } TiFloat;
typedef struct { unsigned char *data; unsigned sizes[TI_DIMS], strides[TI_DIMS]; int dims; } TiBool;
typedef struct { uint64_t seed, offset; uint32_t offset_intragraph; unsigned char captured; } PhiloxState;
_Static_assert(sizeof(TiFloat) == 216 && sizeof(TiBool) == 216 && sizeof(PhiloxState) == 24, "torch's layout");

/* The element offset of linear index i (IndexToOffset), and the elements a TensorInfo spans. */
static size_t ti_offset(const unsigned *sizes, const unsigned *strides, int dims, size_t i) {
  size_t off = 0;
  for (int d = dims - 1; d >= 0; d--) { off += (i % sizes[d]) * strides[d]; i /= sizes[d]; }
  return off;
}
static size_t ti_span(const unsigned *sizes, const unsigned *strides, int dims) {
  size_t last = 0;
  for (int d = 0; d < dims; d++) { if (!sizes[d]) return 0; last += (size_t)(sizes[d] - 1) * strides[d]; }
  return last + 1;
}

/* A counter-based uniform draw in [0, 1): a hash of the seed, the offset and the index only. */
static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float draw(uint64_t seed, uint64_t offset, uint64_t i) {
  return (float)(mix64(seed ^ mix64(offset * 0x100000001B3ull + i)) >> 40) * (1.0f / 16777216.0f);
}

/* fused_dropout_kernel_vec(a, b, c, n, p, philox): b = a * (u < p) / p, c = (u < p) */
static void fused_dropout(simgpuKernelCtx *ctx, void **p) {
  const TiFloat *a = p[0], *b = p[1];
  const TiBool *c = p[2];
  unsigned n = *(unsigned *)p[3];
  float keep = *(float *)p[4];
  const PhiloxState *ph = p[5];
  if (ph->captured) return;
  const float *x = access_fn(ctx, (CUdeviceptr)(uintptr_t)a->data, ti_span(a->sizes, a->strides, a->dims) * 4, 0);
  float *y = access_fn(ctx, (CUdeviceptr)(uintptr_t)b->data, ti_span(b->sizes, b->strides, b->dims) * 4, 1);
  unsigned char *m = access_fn(ctx, (CUdeviceptr)(uintptr_t)c->data, ti_span(c->sizes, c->strides, c->dims), 1);
  if (!x || !y || !m) return;
  float scale = 1.0f / keep;
  for (unsigned i = 0; i < n; i++) {
    float kept = draw(ph->seed, ph->offset, i) < keep ? 1.0f : 0.0f;
    y[ti_offset(b->sizes, b->strides, b->dims, i)] = x[ti_offset(a->sizes, a->strides, a->dims, i)] * kept * scale;
    m[ti_offset(c->sizes, c->strides, c->dims, i)] = kept != 0.0f;
  }
}

/* masked_scale(int n, float scale, float *out, const float *g, const bool *mask): out = g * mask * scale
 * (dropout's backward) */
static void masked_scale(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0];
  float scale = *(float *)p[1];
  float *out = arg(ctx, p[2], n, 1);
  const float *g = arg(ctx, p[3], n, 0);
  const unsigned char *mask = access_fn(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[4], (size_t)n, 0);
  if (!out || !g || !mask) return;
  for (int i = 0; i < n; i++) out[i] = g[i] * (float)mask[i] * scale;
}

static void *k_relu, *k_relu_bwd, *k_add, *k_add_, *k_xent, *k_sgd, *k_gelu, *k_gelu_bwd, *k_aten_add, *k_aten_relu;
static void *k_dropout, *k_masked_scale, *k_softsign, *k_softsign_bwd;
/* ACT softsign: the test's own kernels instead of GELU's. */
static int use_softsign;

/* ATen's mangled names (c++filt: void at::native::vectorized_elementwise_kernel<4,
 * at::native::GeluFunctor<float>, std::array<char*, 2ul>, false>(int, ...) and the backward's). */
#define GELU_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11GeluFunctorIfEESt5arrayIPcLm2EELb0EEEviT0_T1_"
#define GELU_BWD_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_19GeluBackwardFunctorIfEESt5arrayIPcLm3EELb0EEEviT0_T1_"
#define ADD_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EELb0EEEviT0_T1_"
#define RELU_NAME "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15ClampMinFunctorIfEESt5arrayIPcLm2EELb0EEEviT0_T1_"
/* c++filt: void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>(
 * at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<float, unsigned int>,
 * at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState) */
#define DROPOUT_NAME "_ZN2at6native12_GLOBAL__N_124fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6detail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE"

static void register_kernels(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  simgpuRegisterKernel_t reg = h ? (simgpuRegisterKernel_t)dlsym(h, "simgpuRegisterKernel") : NULL;
  access_fn = h ? (simgpuKernelAccess_t)dlsym(h, "simgpuKernelAccess") : NULL;
  if (!reg || !access_fn) { fprintf(stderr, "torchlike: needs the simulated GPU's kernel registration\n"); exit(1); }
  size_t s2[] = {4, 8}, s3[] = {4, 8, 8}, s4[] = {4, 8, 8, 8}, s6[] = {4, 4, 8, 8, 8, 8}, g6[] = {4, 4, 4, 8, 8, 8};
  if (reg("relu_", relu_, 2, s2, s2, &k_relu) || reg("relu_backward_", relu_backward_, 3, s3, s3, &k_relu_bwd) ||
      reg("add", add, 4, s4, s4, &k_add) || reg("add_", add_, 3, s3, s3, &k_add_) ||
      reg("xent", xent, 6, s6, s6, &k_xent) || reg("sgd_", sgd_, 6, g6, g6, &k_sgd))
    exit(1);
  /* (int N, an empty functor, K operand pointers): offsets 0, 4, 8 as torch's fatbins give. */
  size_t gs[] = {4, 1, 16}, ga[] = {4, 1, 8}, bs[] = {4, 1, 24}, ba[] = {4, 1, 8};
  if (reg(GELU_NAME, gelu, 3, gs, ga, &k_gelu) || reg(GELU_BWD_NAME, gelu_backward, 3, bs, ba, &k_gelu_bwd) ||
      reg(ADD_NAME, aten_add, 3, bs, ba, &k_aten_add) || reg(RELU_NAME, aten_relu, 3, gs, ga, &k_aten_relu))
    exit(1);
  size_t ss[] = {4, 8, 8}, sb[] = {4, 8, 8, 8};
  if (reg("_ZN7mm_test16softsign_forwardEiPKfPf", softsign_forward, 3, ss, ss, &k_softsign) ||
      reg("_ZN7mm_test17softsign_backwardEiPKfS1_Pf", softsign_backward, 4, sb, sb, &k_softsign_bwd))
    exit(1);
  /* Dropout: three 216-byte TensorInfos, unsigned int, float, a 24-byte PhiloxCudaState. */
  size_t ds[] = {216, 216, 216, 4, 4, 24}, da[] = {8, 8, 8, 4, 4, 8}, ms[] = {4, 4, 8, 8, 8}, ma[] = {4, 4, 8, 8, 8};
  if (reg(DROPOUT_NAME, fused_dropout, 6, ds, da, &k_dropout) || reg("masked_scale", masked_scale, 5, ms, ma, &k_masked_scale))
    exit(1);
}

static void launch(void *k, int n, void **args) {
  dim3 grid = {(unsigned)(n + 255) / 256, 1, 1}, block = {256, 1, 1};
  CU(cudaLaunchKernel(k, grid, block, args, 0, st));
}
static void relu_inplace(float *x, int n) { void *a[] = {&n, &x}; launch(k_relu, n, a); }
static void relu_bwd_inplace(float *g, float *y, int n) { void *a[] = {&n, &g, &y}; launch(k_relu_bwd, n, a); }
static int conv_mode;
static void add_into(float *a, float *b, float *out, int n) {
  if (conv_mode == 0) {
    void *v[] = {&n, &a, &b, &out};
    launch(k_add, n, v);
    return;
  }
  unsigned char functor = 0;
  float *data[3] = {out, a, b};
  void *v[] = {&n, &functor, data};
  launch(k_aten_add, n, v);
}
/* ATen's in-place kernels (NORM bn): y = max(y, 0) and y += b, the output an input too. */
static void aten_relu_(float *y, int n) {
  unsigned char functor = 0;
  float *data[2] = {y, y};
  void *v[] = {&n, &functor, data};
  launch(k_aten_relu, n, v);
}
static void aten_add_(float *y, float *b, int n) {
  unsigned char functor = 0;
  float *data[3] = {y, y, b};
  void *v[] = {&n, &functor, data};
  launch(k_aten_add, n, v);
}
static void add_inplace(float *a, float *b, int n) { void *v[] = {&n, &a, &b}; launch(k_add_, n, v); }
static void gelu_into(float *x, float *out, int n) {
  if (use_softsign) {
    void *v[] = {&n, &x, &out};
    launch(k_softsign, n, v);
    return;
  }
  unsigned char functor = 0;
  float *data[2] = {out, x};
  void *v[] = {&n, &functor, data};
  launch(k_gelu, n, v);
}
static void gelu_bwd_into(float *dy, float *x, float *dx, int n) {
  if (use_softsign) {
    void *v[] = {&n, &dy, &x, &dx};
    launch(k_softsign_bwd, n, v);
    return;
  }
  unsigned char functor = 0;
  float *data[3] = {dx, dy, x};
  void *v[] = {&n, &functor, data};
  launch(k_gelu_bwd, n, v);
}

/* Dropout's generator: a fixed seed, an offset that advances by 4 per launch (a draw of four per
 * thread, as torch's counter_offset for a grid that covers the tensor). */
static const uint64_t DROP_SEED = 0x5EEDull;
static uint64_t philox_offset;
static const float KEEP = 0.9f;

/* Stale bytes in a TensorInfo's unused slots, and `stale` (an address) at sizes[2..3]. */
static void ti_stale(unsigned *sizes, unsigned *strides, uint64_t salt, uint64_t stale) {
  for (int d = 1; d < TI_DIMS; d++) {
    sizes[d] = (unsigned)mix64(salt + 2 * (uint64_t)d);
    strides[d] = (unsigned)mix64(salt + 2 * (uint64_t)d + 1);
  }
  if (stale) { sizes[2] = (unsigned)stale; sizes[3] = (unsigned)(stale >> 32); }
}

/* out = dropout(x) and its mask, n elements each (1-D, as collapseDims leaves a contiguous
 * tensor); `stale`: the address left in the input's unused sizes. */
static void dropout_into(float *x, float *out, unsigned char *mask, unsigned n, const void *stale) {
  TiFloat a, b;
  TiBool c;
  memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c);
  ti_stale(a.sizes, a.strides, 1, (uint64_t)(uintptr_t)stale);
  ti_stale(b.sizes, b.strides, 2, 0);
  ti_stale(c.sizes, c.strides, 3, 0);
  /* and a stale copy of the input's address in the mask's strides */
  c.strides[4] = (unsigned)(uintptr_t)x; c.strides[5] = (unsigned)((uint64_t)(uintptr_t)x >> 32);
  a.data = x; b.data = out; c.data = mask;
  a.dims = b.dims = c.dims = 1;
  a.sizes[0] = b.sizes[0] = c.sizes[0] = n;
  a.strides[0] = b.strides[0] = c.strides[0] = 1;
  PhiloxState ph;
  memset(&ph, 0, sizeof ph);
  ph.seed = DROP_SEED; ph.offset = philox_offset;
  philox_offset += 4;
  float keep = KEEP;
  void *v[] = {&a, &b, &c, &n, &keep, &ph};
  launch(k_dropout, (int)n, v);
}
static void masked_scale_into(float *g, unsigned char *mask, float *out, int n) {
  float scale = 1.0f / KEEP;
  void *v[] = {&n, &scale, &out, &g, &mask};
  launch(k_masked_scale, n, v);
}

/* One tensor: one stream-ordered allocation, as PyTorch's CUDA allocator with
 * PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync. */
static void *talloc(size_t bytes) { void *p; CU(cudaMallocAsync(&p, bytes, st)); return p; }
static void tfree(void *p) { CU(cudaFreeAsync(p, st)); }
/* NORM bnlate: an operation that touches none of the network's tensors (a scratch of `bytes`
 * set to zero, then freed). */
static void other_op(size_t bytes) {
  void *z = talloc(bytes);
  CU(cudaMemsetAsync(z, 0, bytes, st));
  tfree(z);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static cudnnTensorDescriptor_t tdesc(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t d;
  int dims[4] = {n, c, h, w}, s[4] = {c * h * w, h * w, w, 1};
  DNN(cudnnCreateTensorDescriptor(&d));
  DNN(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, 4, dims, s));
  return d;
}

/* A convolution with its bias, parameters, momentum (allocated at the first step) and
 * algorithms. */
typedef struct {
  int cin, cout, k;
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t conv;
  float *W, *B, *vW, *vB, *dW, *dB;
  int fa, da, wa;
  size_t fws, dws, wws;
  int n, h, w, pad; /* for the backend plan */
  cudnnBackendDescriptor_t plan; /* CONV backend: the forward plan, once built */
  int64_t plan_ws;
} Conv;

/* conv_mode (CONV): 0 legacy (bias added), 1 nobias, 2 backend, 3 backend-rebuild. */

static void conv_init(Conv *l, int n, int cin, int cout, int k, int pad, int h, int w) {
  l->cin = cin; l->cout = cout; l->k = k;
  l->n = n; l->h = h; l->w = w; l->pad = pad; l->plan = NULL; l->plan_ws = 0;
  int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
  l->x = tdesc(n, cin, h, w); l->y = tdesc(n, cout, oh, ow); l->bias = tdesc(1, cout, 1, 1);
  int fd[4] = {cout, cin, k, k}, pads[2] = {pad, pad}, one2[2] = {1, 1};
  DNN(cudnnCreateFilterDescriptor(&l->f));
  DNN(cudnnSetFilterNdDescriptor(l->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, fd));
  DNN(cudnnCreateConvolutionDescriptor(&l->conv));
  DNN(cudnnSetConvolutionNdDescriptor(l->conv, 2, pads, one2, one2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  cudnnConvolutionFwdAlgoPerf_t perf[8]; int got;
  DNN(cudnnGetConvolutionForwardAlgorithm_v7(dnn, l->x, l->f, l->conv, l->y, 8, &got, perf));
  l->fa = perf[0].algo;
  DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, l->f, l->y, l->conv, l->x, 8, &got, perf));
  l->da = perf[0].algo;
  DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, l->x, l->y, l->conv, l->f, 8, &got, perf));
  l->wa = perf[0].algo;
  DNN(cudnnGetConvolutionForwardWorkspaceSize(dnn, l->x, l->f, l->conv, l->y, l->fa, &l->fws));
  DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, l->f, l->y, l->conv, l->x, l->da, &l->dws));
  DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, l->x, l->y, l->conv, l->f, l->wa, &l->wws));
  size_t nw = (size_t)cout * cin * k * k;
  float *host = malloc(nw * 4), scale = 1.0f / sqrtf((float)(cin * k * k));
  for (size_t i = 0; i < nw; i++) host[i] = frand() * scale;
  l->W = talloc(nw * 4); l->B = talloc((size_t)cout * 4);
  CU(cudaMemcpyAsync(l->W, host, nw * 4, cudaMemcpyHostToDevice, st));
  CU(cudaMemsetAsync(l->B, 0, (size_t)cout * 4, st));
  CU(cudaStreamSynchronize(st));
  free(host);
  l->vW = l->vB = l->dW = l->dB = NULL;
}

static const float ONE = 1.0f, ZERO = 0.0f;

static cudnnBackendDescriptor_t bmake(int type) {
  cudnnBackendDescriptor_t d;
  DNN(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

static cudnnBackendDescriptor_t btensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnBackendDescriptor_t t = bmake(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1}, align = 16;
  int dtype = CUDNN_DATA_FLOAT;
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  DNN(cudnnBackendFinalize(t));
  return t;
}

/* The layer's forward plan, as cuDNN's frontend builds it: tensors, convolution, operation and
 * graph (dropped once the plan exists), INSTANT heuristics' first configuration. */
static void build_plan(Conv *l) {
  int oh = l->h + 2 * l->pad - l->k + 1, ow = l->w + 2 * l->pad - l->k + 1;
  cudnnBackendDescriptor_t tx = btensor('x', l->n, l->cin, l->h, l->w);
  cudnnBackendDescriptor_t tw = btensor('w', l->cout, l->cin, l->k, l->k);
  cudnnBackendDescriptor_t ty = btensor('y', l->n, l->cout, oh, ow);
  cudnnBackendDescriptor_t cd = bmake(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, pad[2] = {l->pad, l->pad}, one2[2] = {1, 1};
  int mode = CUDNN_CROSS_CORRELATION, comp = CUDNN_DATA_FLOAT;
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  DNN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
  DNN(cudnnBackendFinalize(cd));
  cudnnBackendDescriptor_t op = bmake(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const int base = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA;
  float alpha = 1.0f, beta = 0.0f;
  DNN(cudnnBackendSetAttribute(op, base + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
  DNN(cudnnBackendSetAttribute(op, base + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
  DNN(cudnnBackendSetAttribute(op, base + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
  DNN(cudnnBackendSetAttribute(op, base + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
  DNN(cudnnBackendSetAttribute(op, base, CUDNN_TYPE_FLOAT, 1, &alpha));
  DNN(cudnnBackendSetAttribute(op, base + 1, CUDNN_TYPE_FLOAT, 1, &beta));
  DNN(cudnnBackendFinalize(op));
  DNN(cudnnBackendDestroyDescriptor(tx)); DNN(cudnnBackendDestroyDescriptor(tw));
  DNN(cudnnBackendDestroyDescriptor(ty)); DNN(cudnnBackendDestroyDescriptor(cd));
  cudnnBackendDescriptor_t graph = bmake(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn));
  DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
  DNN(cudnnBackendFinalize(graph));
  cudnnBackendDescriptor_t heur = bmake(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  int hmode = CUDNN_HEUR_MODE_INSTANT;
  DNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  DNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hmode));
  DNN(cudnnBackendFinalize(heur));
  cudnnBackendDescriptor_t cfg = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &cfg));
  if (got < 1) { fprintf(stderr, "no engine configuration\n"); exit(1); }
  DNN(cudnnBackendDestroyDescriptor(heur));
  l->plan = bmake(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  DNN(cudnnBackendSetAttribute(l->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn));
  DNN(cudnnBackendSetAttribute(l->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
  DNN(cudnnBackendFinalize(l->plan));
  DNN(cudnnBackendGetAttribute(l->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, NULL, &l->plan_ws));
  DNN(cudnnBackendDestroyDescriptor(cfg));
  DNN(cudnnBackendDestroyDescriptor(graph));
  DNN(cudnnBackendDestroyDescriptor(op));
}

/* y = conv(x) (+ bias with CONV legacy), y a new tensor of `out` floats. */
static float *conv_fwd(Conv *l, const float *x, size_t out) {
  float *y = talloc(out * 4);
  if (conv_mode >= 2) {
    if (!l->plan) build_plan(l);
    void *ws = l->plan_ws > 0 ? talloc((size_t)l->plan_ws) : NULL;
    void *ptrs[3] = {(void *)x, l->W, y};
    int64_t uids[3] = {'x', 'w', 'y'};
    cudnnBackendDescriptor_t pack = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    DNN(cudnnBackendFinalize(pack));
    DNN(cudnnBackendExecute(dnn, l->plan, pack));
    DNN(cudnnBackendDestroyDescriptor(pack));
    if (ws) tfree(ws);
    return y;
  }
  void *ws = l->fws ? talloc(l->fws) : NULL;
  DNN(cudnnConvolutionForward(dnn, &ONE, l->x, x, l->f, l->W, l->conv, l->fa, ws, l->fws, &ZERO, l->y, y));
  if (ws) tfree(ws);
  if (conv_mode == 0) DNN(cudnnAddTensor(dnn, &ONE, l->bias, l->B, &ONE, l->y, y));
  return y;
}

/* Parameter gradients (new tensors) and, when `in` > 0, the input's gradient (returned). */
static float *conv_bwd(Conv *l, const float *x, const float *dy, size_t in) {
  size_t nw = (size_t)l->cout * l->cin * l->k * l->k;
  l->dB = talloc((size_t)l->cout * 4);
  DNN(cudnnConvolutionBackwardBias(dnn, &ONE, l->y, dy, &ZERO, l->bias, l->dB));
  l->dW = talloc(nw * 4);
  void *ws = l->wws ? talloc(l->wws) : NULL;
  DNN(cudnnConvolutionBackwardFilter(dnn, &ONE, l->x, x, l->y, dy, l->conv, l->wa, ws, l->wws, &ZERO, l->f, l->dW));
  if (ws) tfree(ws);
  if (!in) return NULL;
  float *dx = talloc(in * 4);
  ws = l->dws ? talloc(l->dws) : NULL;
  DNN(cudnnConvolutionBackwardData(dnn, &ONE, l->f, l->W, l->y, dy, l->conv, l->da, ws, l->dws, &ZERO, l->x, dx));
  if (ws) tfree(ws);
  return dx;
}

/* optimizer.step() then zero_grad(set_to_none=True). */
static void step(Conv *l, float lr, float mu) {
  int nw = l->cout * l->cin * l->k * l->k, nb = l->cout;
  if (!l->vW) { /* the momentum buffers, created by the first step */
    l->vW = talloc((size_t)nw * 4); l->vB = talloc((size_t)nb * 4);
    CU(cudaMemsetAsync(l->vW, 0, (size_t)nw * 4, st));
    CU(cudaMemsetAsync(l->vB, 0, (size_t)nb * 4, st));
  }
  void *a[] = {&nw, &lr, &mu, &l->W, &l->vW, &l->dW};
  launch(k_sgd, nw, a);
  void *b[] = {&nb, &lr, &mu, &l->B, &l->vB, &l->dB};
  launch(k_sgd, nb, b);
  tfree(l->dW); tfree(l->dB);
  l->dW = l->dB = NULL;
  if (conv_mode == 3 && l->plan) {
    DNN(cudnnBackendDestroyDescriptor(l->plan));
    l->plan = NULL;
  }
}

/* A batch normalisation (NORM bn): its parameters and running statistics, and what one forward
 * pass keeps for the backward pass (its input, the saved statistics). */
typedef struct {
  cudnnTensorDescriptor_t x, p;
  float *scale, *bias, *rmean, *rvar;
  float *in, *smean, *sinv;
} Bn;

static const double BN_EPS = 1e-5;

static void bn_init(Bn *b, int n, int c, int h, int w) {
  b->x = tdesc(n, c, h, w); b->p = tdesc(1, c, 1, 1);
  float *ones = malloc((size_t)c * 4);
  for (int i = 0; i < c; i++) ones[i] = 1.0f;
  b->scale = talloc((size_t)c * 4); b->bias = talloc((size_t)c * 4);
  b->rmean = talloc((size_t)c * 4); b->rvar = talloc((size_t)c * 4);
  CU(cudaMemcpyAsync(b->scale, ones, (size_t)c * 4, cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(b->rvar, ones, (size_t)c * 4, cudaMemcpyHostToDevice, st));
  CU(cudaMemsetAsync(b->bias, 0, (size_t)c * 4, st));
  CU(cudaMemsetAsync(b->rmean, 0, (size_t)c * 4, st));
  CU(cudaStreamSynchronize(st));
  free(ones);
}

/* y = bn(x), a new tensor of `count` floats; x and the saved statistics kept for bn_bwd. */
static float *bn_fwd(Bn *b, float *x, size_t count, int c) {
  float *y = talloc(count * 4);
  b->in = x;
  b->smean = talloc((size_t)c * 4); b->sinv = talloc((size_t)c * 4);
  DNN(cudnnBatchNormalizationForwardTrainingEx(dnn, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &ONE, &ZERO,
      b->x, x, NULL, NULL, b->x, y, b->p, b->scale, b->bias, 0.1, b->rmean, b->rvar, BN_EPS, b->smean, b->sinv,
      NULL, NULL, 0, NULL, 0));
  return y;
}

/* dx (a new tensor) from dy; the input and saved statistics are freed. */
static float *bn_bwd(Bn *b, const float *dy, size_t count, int c) {
  float *dx = talloc(count * 4), *ds = talloc((size_t)c * 4), *db = talloc((size_t)c * 4);
  DNN(cudnnBatchNormalizationBackwardEx(dnn, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &ONE, &ZERO, &ONE,
      &ZERO, b->x, b->in, NULL, NULL, b->x, dy, NULL, NULL, b->x, dx, b->p, b->scale, b->bias, ds, db, BN_EPS,
      b->smean, b->sinv, NULL, NULL, 0, NULL, 0));
  tfree(ds); tfree(db);
  tfree(b->in); tfree(b->smean); tfree(b->sinv);
  return dx;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 4, n = argc > 2 ? atoi(argv[2]) : 4, hw = argc > 3 ? atoi(argv[3]) : 16;
  int ch = argc > 4 ? atoi(argv[4]) : 8, nblocks = argc > 5 ? atoi(argv[5]) : 2;
  int ks = argc > 6 ? atoi(argv[6]) : 3;
  const char *act_name = argc > 7 ? argv[7] : "relu";
  use_softsign = strcmp(act_name, "softsign") == 0;
  int use_gelu = strcmp(act_name, "gelu") == 0 || use_softsign;
  const char *conv_name = argc > 8 ? argv[8] : "legacy";
  const char *modes[4] = {"legacy", "nobias", "backend", "backend-rebuild"};
  conv_mode = -1;
  for (int i = 0; i < 4; i++) if (!strcmp(conv_name, modes[i])) conv_mode = i;
  const char *norm_name = argc > 9 ? argv[9] : "none";
  int bn_sum = strcmp(norm_name, "bnsum") == 0;
  int bn_copy = strcmp(norm_name, "bncopy") == 0;
  int bn_late = strcmp(norm_name, "bnlate") == 0;
  int use_bn = strcmp(norm_name, "bn") == 0 || bn_sum || bn_copy || bn_late;
  const char *drop_name = argc > 10 ? argv[10] : "none";
  int drop_seeded = strcmp(drop_name, "drop-seeded") == 0;
  int drop_res = strcmp(drop_name, "drop-res") == 0;
  int use_drop = strcmp(drop_name, "drop") == 0 || drop_seeded;
  const int classes = 10;
  if (iters < 1 || n < 1 || hw < 2 || ch < 1 || nblocks < 0 || nblocks > 64 || ks < 1 || ks % 2 == 0 || ks > hw ||
      (!use_gelu && strcmp(act_name, "relu") != 0) || conv_mode < 0 || (!use_bn && strcmp(norm_name, "none") != 0) ||
      (use_bn && (use_gelu || conv_mode == 0)) || (!use_drop && !drop_res && strcmp(drop_name, "none") != 0) ||
      ((use_drop || drop_res) && use_bn)) {
    fprintf(stderr, "usage: torchlike [ITERATIONS] [BATCH] [WIDTH] [CHANNELS] [BLOCKS, 0..64] [KERNEL, odd] [relu|gelu|softsign] [legacy|nobias|backend|backend-rebuild] [none|bn|bnsum|bncopy|bnlate (relu, not legacy)] [none|drop|drop-seeded|drop-res (norm none)]\n");
    return 2;
  }
  register_kernels();
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  DNN(cudnnCreate(&dnn));
  DNN(cudnnSetStream(dnn, st));
  Conv stem, head, *blocks = calloc(2 * (size_t)nblocks + 1, sizeof *blocks);
  conv_init(&stem, n, 3, ch, ks, ks / 2, hw, hw);
  for (int b = 0; b < 2 * nblocks; b++) conv_init(&blocks[b], n, ch, ch, ks, ks / 2, hw, hw);
  conv_init(&head, n, ch, classes, hw, 0, hw, hw);
  Bn *bns = calloc(2 * (size_t)nblocks + 1, sizeof *bns); /* NORM bn: the stem's, then each block's two */
  if (use_bn)
    for (int b = 0; b <= 2 * nblocks; b++) bn_init(&bns[b], n, ch, hw, hw);
  cudnnTensorDescriptor_t lo = tdesc(n, classes, 1, 1);

  size_t in = (size_t)n * 3 * hw * hw, act = (size_t)n * ch * hw * hw, out = (size_t)n * classes;
  int nact = (int)act;
  float *hx = malloc(in * 4), *hl = malloc((size_t)n * 4);
  for (size_t i = 0; i < in; i++) hx[i] = frand();
  for (int i = 0; i < n; i++) hl[i] = (float)(i % classes);
  /* The data loader: the first batch now, each next one while the current one trains. */
  float *x = talloc(in * 4), *labels = talloc((size_t)n * 4);
  CU(cudaMemcpyAsync(x, hx, in * 4, cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(labels, hl, (size_t)n * 4, cudaMemcpyHostToDevice, st));
  float **a = calloc((size_t)nblocks + 1, sizeof *a), **h1 = calloc((size_t)nblocks + 1, sizeof *h1);
  float **g1 = calloc((size_t)nblocks + 1, sizeof *g1); /* GELU's outputs (ACT gelu) */
  float **pre = calloc((size_t)nblocks + 1, sizeof *pre); /* NORM bncopy: the copies aside */
  float **d1 = calloc((size_t)nblocks + 1, sizeof *d1); /* dropout's outputs and masks (DROP) */
  unsigned char **m1 = calloc((size_t)nblocks + 1, sizeof *m1);
  const float lr = 0.05f, mu = 0.9f;
  /* Each iteration's time on the device's clock, on stderr at the end with TRAINER_TIMES set. */
  cudaEvent_t *marks = malloc((iters + 1) * sizeof *marks);
  for (int i = 0; i <= iters; i++) cudaEventCreate(&marks[i]);
  for (int it = 0; it < iters; it++) {
    cudaEventRecord(marks[it], st);
    if (drop_seeded) philox_offset = 0;
    /* forward: a[0] = relu_(stem(x)); a[b+1] = relu_(conv2(relu_(conv1(a[b]))) + a[b]) */
    if (use_bn) {
      /* a[0] = relu_(bn(stem(x))); a[b+1] = relu_(bn2(conv2(relu_(bn1(conv1(a[b]))))) += a[b]) */
      a[0] = bn_fwd(&bns[0], conv_fwd(&stem, x, act), act, ch);
      if (bn_late) other_op(act);
      aten_relu_(a[0], nact);
      for (int b = 0; b < nblocks; b++) {
        h1[b] = bn_fwd(&bns[2 * b + 1], conv_fwd(&blocks[2 * b], a[b], act), act, ch);
        if (bn_copy) {
          pre[b] = talloc(act * 4);
          CU(cudaMemcpyAsync(pre[b], h1[b], act * 4, cudaMemcpyDeviceToDevice, st));
        }
        aten_relu_(h1[b], nact);
        float *y = bn_fwd(&bns[2 * b + 2], conv_fwd(&blocks[2 * b + 1], h1[b], act), act, ch);
        if (bn_sum) {
          a[b + 1] = talloc(act * 4);
          add_into(y, a[b], a[b + 1], nact);
          tfree(y);
        } else {
          a[b + 1] = y;
          if (bn_late) other_op(act);
          aten_add_(a[b + 1], a[b], nact);
        }
        aten_relu_(a[b + 1], nact);
      }
    }
    if (!use_bn) {
      a[0] = conv_fwd(&stem, x, act);
      relu_inplace(a[0], nact);
    }
    for (int b = 0; b < nblocks && !use_bn; b++) {
      h1[b] = conv_fwd(&blocks[2 * b], a[b], act);
      if (use_gelu) {
        g1[b] = talloc(act * 4);
        gelu_into(h1[b], g1[b], nact);
      } else {
        relu_inplace(h1[b], nact);
        g1[b] = h1[b];
      }
      if (use_drop) {
        d1[b] = talloc(act * 4);
        m1[b] = talloc(act);
        dropout_into(g1[b], d1[b], m1[b], (unsigned)nact, blocks[2 * b + 1].B);
        if (use_gelu) tfree(g1[b]); /* GELU's output: nothing keeps it past the dropout */
      }
      float *h2 = conv_fwd(&blocks[2 * b + 1], use_drop ? d1[b] : g1[b], act);
      if (drop_res) {
        float *d = talloc(act * 4);
        m1[b] = talloc(act);
        dropout_into(h2, d, m1[b], (unsigned)nact, blocks[2 * b + 1].B);
        tfree(h2); /* dropout's backward needs its mask only */
        h2 = d;
      }
      a[b + 1] = talloc(act * 4);
      add_into(h2, a[b], a[b + 1], nact);
      tfree(h2); /* an addition's backward needs neither input */
      relu_inplace(a[b + 1], nact);
    }
    float *logits = conv_fwd(&head, a[nblocks], out);
    float *probs = talloc(out * 4);
    DNN(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &ONE, lo, logits, &ZERO, lo, probs));
    tfree(logits);
    float *loss = talloc(4), *dlogits = talloc(out * 4);
    CU(cudaMemsetAsync(loss, 0, 4, st));
    int nn = n, k = classes;
    void *xa[] = {&nn, &k, &probs, &labels, &dlogits, &loss};
    dim3 one = {1, 1, 1};
    CU(cudaLaunchKernel(k_xent, one, one, xa, 0, st));
    tfree(probs);
    /* the next batch, prefetched while this one trains (its memory is taken now) */
    float *x_next = talloc(in * 4), *labels_next = talloc((size_t)n * 4);
    CU(cudaMemcpyAsync(x_next, hx, in * 4, cudaMemcpyHostToDevice, st));
    CU(cudaMemcpyAsync(labels_next, hl, (size_t)n * 4, cudaMemcpyHostToDevice, st));
    /* backward */
    float *g = conv_bwd(&head, a[nblocks], dlogits, act);
    tfree(dlogits);
    if (use_bn) {
      for (int b = nblocks - 1; b >= 0; b--) {
        relu_bwd_inplace(g, a[b + 1], nact);
        tfree(a[b + 1]);
        float *d2 = bn_bwd(&bns[2 * b + 2], g, act, ch);
        float *dh1 = conv_bwd(&blocks[2 * b + 1], h1[b], d2, act);
        tfree(d2);
        relu_bwd_inplace(dh1, bn_copy ? pre[b] : h1[b], nact);
        if (bn_copy) tfree(pre[b]);
        tfree(h1[b]);
        float *d1 = bn_bwd(&bns[2 * b + 1], dh1, act, ch);
        tfree(dh1);
        float *da = conv_bwd(&blocks[2 * b], a[b], d1, act);
        tfree(d1);
        add_inplace(da, g, nact);
        tfree(g);
        g = da;
      }
      relu_bwd_inplace(g, a[0], nact);
      tfree(a[0]);
      float *d0 = bn_bwd(&bns[0], g, act, ch);
      tfree(g);
      g = d0;
    }
    for (int b = nblocks - 1; b >= 0 && !use_bn; b--) {
      relu_bwd_inplace(g, a[b + 1], nact); /* through the block's last relu_ */
      tfree(a[b + 1]);
      float *g2 = g; /* the gradient at the second convolution's output */
      if (drop_res) {
        g2 = talloc(act * 4);
        masked_scale_into(g, m1[b], g2, nact);
        tfree(m1[b]);
      }
      float *dh1 = conv_bwd(&blocks[2 * b + 1], use_drop ? d1[b] : g1[b], g2, act);
      if (drop_res) tfree(g2);
      if (use_drop) {
        tfree(d1[b]);
        float *dd = talloc(act * 4);
        masked_scale_into(dh1, m1[b], dd, nact);
        tfree(dh1); tfree(m1[b]);
        dh1 = dd;
      }
      if (use_gelu) {
        if (!use_drop) tfree(g1[b]);
        float *dpre = talloc(act * 4);
        gelu_bwd_into(dh1, h1[b], dpre, nact);
        tfree(dh1);
        dh1 = dpre;
      } else {
        relu_bwd_inplace(dh1, h1[b], nact);
      }
      tfree(h1[b]);
      float *da = conv_bwd(&blocks[2 * b], a[b], dh1, act);
      tfree(dh1);
      add_inplace(da, g, nact); /* the skip connection's gradient accumulates */
      tfree(g);
      g = da;
    }
    if (!use_bn) {
      relu_bwd_inplace(g, a[0], nact);
      tfree(a[0]);
    }
    conv_bwd(&stem, x, g, 0);
    tfree(g);
    tfree(x); tfree(labels);
    x = x_next; labels = labels_next;
    /* optimizer */
    step(&stem, lr, mu);
    for (int b = 0; b < 2 * nblocks; b++) step(&blocks[b], lr, mu);
    step(&head, lr, mu);
    float hloss;
    CU(cudaMemcpyAsync(&hloss, loss, 4, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    tfree(loss);
    printf("iter %d loss %.9g\n", it, hloss);
  }
  cudaEventRecord(marks[iters], st);
  CU(cudaStreamSynchronize(st));
  print_iteration_times("torchlike", marks, iters);
  for (int i = 0; i <= iters; i++) cudaEventDestroy(marks[i]);
  free(marks);
  tfree(x); tfree(labels);

  /* FNV-1a over every weight and bias. */
  uint64_t hsum = 1469598103934665603ull;
  for (int i = -1; i <= 2 * nblocks; i++) {
    Conv *l = i < 0 ? &stem : i == 2 * nblocks ? &head : &blocks[i];
    size_t nw = (size_t)l->cout * l->cin * l->k * l->k;
    unsigned char *buf = malloc((nw + l->cout) * 4);
    CU(cudaMemcpyAsync(buf, l->W, nw * 4, cudaMemcpyDeviceToHost, st));
    CU(cudaMemcpyAsync(buf + nw * 4, l->B, (size_t)l->cout * 4, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    for (size_t b = 0; b < (nw + l->cout) * 4; b++) { hsum ^= buf[b]; hsum *= 1099511628211ull; }
    free(buf);
    tfree(l->W); tfree(l->B);
    if (l->vW) { tfree(l->vW); tfree(l->vB); }
  }
  if (use_bn)
    for (int b = 0; b <= 2 * nblocks; b++) {
      tfree(bns[b].scale); tfree(bns[b].bias); tfree(bns[b].rmean); tfree(bns[b].rvar);
    }
  CU(cudaStreamSynchronize(st));
  printf("checksum %016llx\n", (unsigned long long)hsum);
  cudnnDestroy(dnn);
  CU(cudaStreamDestroy(st));
  free(hx); free(hl); free(a); free(h1); free(g1); free(pre); free(d1); free(m1); free(blocks); free(bns);
  return 0;
}
