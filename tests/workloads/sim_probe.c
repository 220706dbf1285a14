/* sim_probe: small programs that exercise one behaviour of the GPU they run on, through the C ABI
 * only, and print what they observed as key=value lines for the tests to judge.
 *
 *   sim_probe oom          out-of-memory codes of the runtime, the driver and stream-ordered allocs
 *   sim_probe vmm-copy     VMM map/unmap; a copy into a reserved but unmapped range
 *   sim_probe vmm-kernel   the same for a kernel, vmm-cudnn for a cuDNN call
 *   sim_probe timing       copy/compute overlap across streams, serialisation within one
 *   sim_probe kernels      every launch entry point, kernelParams and packed parameter buffers
 *   sim_probe entry        cuGetProcAddress(_v2) and cudaGetDriverEntryPoint(ByVersion)
 *   sim_probe shape GIB    allocate and compute over GIB GiB of tensors (for SIMGPU_MODE=shape)
 *   sim_probe faults       allocations, copies and launches, reporting each result code
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static void *driver_fn(const char *name, unsigned version) {
  void *fn = NULL; int status = -1;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, 0, &status));
  if (!fn || status != 0) { fprintf(stderr, "no driver function %s\n", name); exit(1); }
  return fn;
}

static void *sim_fn(const char *name) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  void *f = h ? dlsym(h, name) : NULL;
  if (!f) { fprintf(stderr, "not the simulated GPU: no %s\n", name); exit(1); }
  return f;
}

/* ---- kernels, registered with the simulator */
static simgpuKernelAccess_t k_access;
static simgpuKernelWork_t k_work;

/* axpy(int n, float a, const float *x, float *y): y = a * x + y */
static void axpy(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0]; float a = *(float *)p[1];
  CUdeviceptr x = (CUdeviceptr)(uintptr_t)*(const float **)p[2], y = (CUdeviceptr)(uintptr_t)*(float **)p[3];
  const float *hx = k_access(ctx, x, (size_t)n * 4, 0);
  float *hy = k_access(ctx, y, (size_t)n * 4, 1);
  if (!hx || !hy) return;
  for (int i = 0; i < n; i++) hy[i] += a * hx[i];
}

/* scale(struct { float *p; int n; } s, float f): pointers inside a struct parameter */
typedef struct { float *p; int n; } Span;
static void scale(simgpuKernelCtx *ctx, void **p) {
  Span s = *(Span *)p[0]; float f = *(float *)p[1];
  float *h = k_access(ctx, (CUdeviceptr)(uintptr_t)s.p, (size_t)s.n * 4, 1);
  if (!h) return;
  for (int i = 0; i < s.n; i++) h[i] *= f;
}

/* burn(double flops): pure arithmetic of a stated size, for timing */
static void burn(simgpuKernelCtx *ctx, void **p) { k_work(ctx, *(double *)p[0], 0); }

static void *k_axpy, *k_scale, *k_burn;
static void register_kernels(void) {
  simgpuRegisterKernel_t reg = (simgpuRegisterKernel_t)sim_fn("simgpuRegisterKernel");
  k_access = (simgpuKernelAccess_t)sim_fn("simgpuKernelAccess");
  k_work = (simgpuKernelWork_t)sim_fn("simgpuKernelWork");
  size_t s1[] = {4, 4, 8, 8}, a1[] = {4, 4, 8, 8};
  CHECK(reg("axpy", axpy, 4, s1, a1, &k_axpy));
  size_t s2[] = {sizeof(Span), 4}, a2[] = {8, 4};
  CHECK(reg("scale", scale, 2, s2, a2, &k_scale));
  size_t s3[] = {8}, a3[] = {8};
  CHECK(reg("burn", burn, 1, s3, a3, &k_burn));
}

static const dim3 ONE = {1, 1, 1};

/* ---- probes */

static int probe_oom(void) {
  size_t free_b, total_b;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  printf("total=%zu free=%zu\n", total_b, free_b);
  void *a = NULL, *b = NULL;
  size_t big = total_b / 10 * 6;
  CHECK(cudaMalloc(&a, big));
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  printf("free_after=%zu\n", free_b);
  printf("runtime_oom=%d\n", cudaMalloc(&b, big));
  typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
  CUdeviceptr d;
  printf("driver_oom=%d\n", ((alloc_t)driver_fn("cuMemAlloc", 12000))(&d, big));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("async_oom=%d\n", cudaMallocAsync(&b, big, s));
  CHECK(cudaFree(a));
  printf("after_free=%d\n", cudaMalloc(&b, big));
  return 0;
}

typedef CUresult (*reserve_t)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*create_t)(unsigned long long *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*map_t)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
typedef CUresult (*unmap_t)(CUdeviceptr, size_t);
typedef CUresult (*access_t)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*gran_t)(size_t *, const CUmemAllocationProp *, int);
typedef CUresult (*release_t)(unsigned long long);

/* Reserves three granules, maps the first two, writes them, unmaps the second. */
static CUdeviceptr vmm_setup(size_t *gran_out) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.locationType = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t gran;
  CHECK(((gran_t)driver_fn("cuMemGetAllocationGranularity", 12000))(&gran, &prop, 0));
  CUdeviceptr va;
  CHECK(((reserve_t)driver_fn("cuMemAddressReserve", 12000))(&va, 3 * gran, 0, 0, 0));
  unsigned long long h1, h2;
  CHECK(((create_t)driver_fn("cuMemCreate", 12000))(&h1, gran, &prop, 0));
  CHECK(((create_t)driver_fn("cuMemCreate", 12000))(&h2, gran, &prop, 0));
  CHECK(((map_t)driver_fn("cuMemMap", 12000))(va, gran, 0, h1, 0));
  CHECK(((map_t)driver_fn("cuMemMap", 12000))(va + gran, gran, 0, h2, 0));
  CUmemAccessDesc acc = {CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK(((access_t)driver_fn("cuMemSetAccess", 12000))(va, 2 * gran, &acc, 1));
  float *host = malloc(2 * gran);
  for (size_t i = 0; i < 2 * gran / 4; i++) host[i] = (float)i;
  CHECK(cudaMemcpy((void *)(uintptr_t)va, host, 2 * gran, cudaMemcpyHostToDevice));
  CHECK(((unmap_t)driver_fn("cuMemUnmap", 12000))(va + gran, gran));
  CHECK(((release_t)driver_fn("cuMemRelease", 12000))(h2));
  /* The mapped granule still reads back what was written, across the old boundary of the map. */
  memset(host, 0, gran);
  CHECK(cudaMemcpy(host, (void *)(uintptr_t)va, gran, cudaMemcpyDeviceToHost));
  printf("mapped_readback=%s\n", host[gran / 4 - 1] == (float)(gran / 4 - 1) ? "ok" : "wrong");
  free(host);
  *gran_out = gran;
  printf("unmapped_at=%#llx\n", va + gran);
  return va;
}

static int probe_vmm(const char *what) {
  size_t gran;
  CUdeviceptr va = vmm_setup(&gran);
  float buf[16] = {0};
  int r;
  if (!strcmp(what, "copy")) {
    r = cudaMemcpy(buf, (void *)(uintptr_t)(va + gran - 32), sizeof buf, cudaMemcpyDeviceToHost);
  } else if (!strcmp(what, "kernel")) {
    register_kernels();
    int n = 64; float a = 2;
    const float *x = (const float *)(uintptr_t)va; float *y = (float *)(uintptr_t)(va + gran);
    void *args[] = {&n, &a, &x, &y};
    r = cudaLaunchKernel(k_axpy, ONE, ONE, args, 0, NULL);
  } else {
    cudnnHandle_t h; cudnnTensorDescriptor_t t; cudnnActivationDescriptor_t act;
    CHECK(cudnnCreate(&h)); CHECK(cudnnCreateTensorDescriptor(&t)); CHECK(cudnnCreateActivationDescriptor(&act));
    CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 64));
    CHECK(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, 0, 0));
    float one = 1, zero = 0;
    r = cudnnActivationForward(h, act, &one, t, (void *)(uintptr_t)va, &zero, t, (void *)(uintptr_t)(va + gran + 64));
  }
  printf("trap_result=%d\n", r);
  void *p;
  printf("sticky_malloc=%d\n", cudaMalloc(&p, 1024));
  return 0;
}

static int probe_timing(void) {
  register_kernels();
  cudaStream_t compute, copy;
  CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  size_t bytes = 256u << 20;
  void *host, *dev;
  CHECK(cudaMallocHost(&host, bytes));
  CHECK(cudaMalloc(&dev, bytes));
  double flops = 2e12;
  void *args[] = {&flops};
  cudaEvent_t e0, e1, e2, e3;
  CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1)); CHECK(cudaEventCreate(&e2)); CHECK(cudaEventCreate(&e3));
  float ms;
  /* Each alone. */
  CHECK(cudaEventRecord(e0, compute));
  CHECK(cudaLaunchKernel(k_burn, ONE, ONE, args, 0, compute));
  CHECK(cudaEventRecord(e1, compute));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaEventElapsedTime(&ms, e0, e1)); printf("kernel_ms=%.6f\n", ms);
  CHECK(cudaEventRecord(e0, copy));
  CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, copy));
  CHECK(cudaEventRecord(e1, copy));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaEventElapsedTime(&ms, e0, e1)); printf("copy_ms=%.6f\n", ms);
  /* Two streams: the copy overlaps the kernel. */
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(e0, compute));
  CHECK(cudaStreamWaitEvent(copy, e0, 0));
  CHECK(cudaLaunchKernel(k_burn, ONE, ONE, args, 0, compute));
  CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, copy));
  CHECK(cudaEventRecord(e1, compute)); CHECK(cudaEventRecord(e2, copy));
  CHECK(cudaStreamWaitEvent(compute, e2, 0));
  CHECK(cudaEventRecord(e3, compute));
  CHECK(cudaEventSynchronize(e3));
  CHECK(cudaEventElapsedTime(&ms, e0, e3)); printf("two_streams_ms=%.6f\n", ms);
  /* One stream: the same work runs one after the other. */
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(e0, compute));
  CHECK(cudaLaunchKernel(k_burn, ONE, ONE, args, 0, compute));
  CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, compute));
  CHECK(cudaEventRecord(e3, compute));
  printf("query_before_sync=%d\n", cudaEventQuery(e3));
  CHECK(cudaEventSynchronize(e3));
  CHECK(cudaEventElapsedTime(&ms, e0, e3)); printf("one_stream_ms=%.6f\n", ms);
  /* A pageable copy is synchronous and slower. */
  void *pageable = malloc(bytes);
  memset(pageable, 1, bytes);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(e0, copy));
  CHECK(cudaMemcpyAsync(dev, pageable, bytes, cudaMemcpyHostToDevice, copy));
  CHECK(cudaEventRecord(e1, copy));
  printf("pageable_query=%d\n", cudaEventQuery(e1));
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaEventElapsedTime(&ms, e0, e1)); printf("pageable_copy_ms=%.6f\n", ms);
  free(pageable);
  return 0;
}

static int probe_kernels(void) {
  register_kernels();
  enum { N = 1000 };
  float hx[N], hy[N];
  for (int i = 0; i < N; i++) { hx[i] = (float)i; hy[i] = 1.0f; }
  float *x, *y;
  CHECK(cudaMalloc((void **)&x, sizeof hx)); CHECK(cudaMalloc((void **)&y, sizeof hy));
  CHECK(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice));
  int n = N; float a = 0.5f;
  void *args[] = {&n, &a, &x, &y};
  dim3 grid = {4, 1, 1}, block = {256, 1, 1};
  /* 1. cudaLaunchKernel */
  CHECK(cudaLaunchKernel(k_axpy, grid, block, args, 0, NULL));
  /* 2. <<<>>> in CUDA 13: __cudaGetKernel + __cudaLaunchKernel */
  void *kern;
  CHECK(__cudaGetKernel(&kern, k_axpy));
  CHECK(__cudaLaunchKernel(kern, grid, block, args, 0, NULL));
  /* 3. cudaLaunchKernelExC */
  cudaLaunchConfig_t cfg = {grid, block, 0, NULL, NULL, 0};
  CHECK(cudaLaunchKernelExC(&cfg, k_axpy, args));
  /* 4. cuLaunchKernel with kernelParams, and 5. with a packed buffer (extra) */
  typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
  launch_t cu_launch = (launch_t)driver_fn("cuLaunchKernel", 12000);
  CHECK(cu_launch(k_axpy, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  typedef CUresult (*param_info_t)(void *, size_t, size_t *, size_t *);
  param_info_t info = (param_info_t)driver_fn("cuFuncGetParamInfo", 12040);
  unsigned char packed[32] = {0};
  size_t off, sz;
  for (size_t i = 0; i < 4; i++) { CHECK(info(k_axpy, i, &off, &sz)); memcpy(packed + off, args[i], sz); printf("axpy_param%zu=%zu+%zu\n", i, off, sz); }
  size_t packed_size = sizeof packed;
  void *extra[] = {(void *)1, packed, (void *)2, &packed_size, (void *)0};
  CHECK(cu_launch(k_axpy, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
  /* 6. cuLaunchKernelEx */
  typedef struct { unsigned g[3], b[3], shared; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;
  typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, void *, void **, void **);
  CUlaunchConfig ccfg = {{4, 1, 1}, {256, 1, 1}, 0, NULL, NULL, 0};
  CHECK(((launch_ex_t)driver_fn("cuLaunchKernelEx", 12000))(&ccfg, k_axpy, args, NULL));
  CHECK(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
  int good = 1;
  for (int i = 0; i < N; i++) if (hy[i] != 1.0f + 6 * 0.5f * (float)i) good = 0;
  printf("six_launches=%s\n", good ? "ok" : "wrong");
  /* A struct parameter holding a device pointer. */
  Span s = {y, N}; float f = 2.0f;
  void *sargs[] = {&s, &f};
  CHECK(cudaLaunchKernel(k_scale, grid, block, sargs, 0, NULL));
  CHECK(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
  printf("struct_param=%s\n", hy[10] == 2.0f * (1.0f + 30.0f) ? "ok" : "wrong");
  for (size_t i = 0; i < 2; i++) { CHECK(info(k_scale, i, &off, &sz)); printf("scale_param%zu=%zu+%zu\n", i, off, sz); }
  printf("param_out_of_range=%d\n", info(k_scale, 2, &off, &sz));
  printf("unknown_kernel=%d\n", cudaLaunchKernel((void *)hx, grid, block, args, 0, NULL));
  return 0;
}

static int probe_entry(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
  gpa2_t gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
  void *direct = dlsym(h, "cuMemAlloc_v2"), *fn = NULL;
  int status = -1;
  CHECK(gpa2("cuMemAlloc", &fn, 12000, 0, &status));
  printf("cuMemAlloc_12000=%s status=%d\n", fn == direct ? "cuMemAlloc_v2" : "other", status);
  fn = NULL; status = -1;
  int r = gpa2("cuMemAlloc", &fn, 3000, 0, &status);
  printf("cuMemAlloc_3000_result=%d status=%d null=%d\n", r, status, fn == NULL);
  fn = NULL; status = -1;
  r = gpa2("cudnnCreate", &fn, 12000, 0, &status);
  printf("cudnnCreate_result=%d status=%d\n", r, status);
  CHECK(gpa2("cuGetProcAddress", &fn, 12000, 0, &status));
  printf("cuGetProcAddress_is_v2=%d\n", fn == (void *)gpa2);
  void *via_rt = NULL;
  CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &via_rt, 12000, 0, &status));
  printf("runtime_entry_point_same=%d\n", via_rt == direct);
  CHECK(cudaGetDriverEntryPoint("cuMemFree", &via_rt, 0, &status));
  printf("runtime_entry_point_default_same=%d\n", via_rt == dlsym(h, "cuMemFree_v2"));
  int rv, dv;
  CHECK(cudaRuntimeGetVersion(&rv)); CHECK(cudaDriverGetVersion(&dv));
  printf("runtime_version=%d driver_version=%d cudnn_version=%zu\n", rv, dv, cudnnGetVersion());
  return 0;
}

/* GIB GiB of activations through conv + relu, as a large model would hold them. */
static int probe_shape(int gib) {
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  int n = 256, c = 64, hw = 128; /* one activation: 256*64*128*128*4 = 1 GiB */
  cudnnTensorDescriptor_t t; cudnnFilterDescriptor_t w; cudnnConvolutionDescriptor_t cd;
  CHECK(cudnnCreateTensorDescriptor(&t)); CHECK(cudnnCreateFilterDescriptor(&w)); CHECK(cudnnCreateConvolutionDescriptor(&cd));
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hw, hw));
  CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c, c, 3, 3));
  CHECK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  size_t act = (size_t)n * c * hw * hw * 4;
  void *weights, *host;
  CHECK(cudaMalloc(&weights, (size_t)c * c * 9 * 4));
  CHECK(cudaMallocHost(&host, act));
  void **acts = calloc((size_t)gib, sizeof *acts);
  CHECK(cudaMalloc(&acts[0], act));
  CHECK(cudaMemcpy(acts[0], host, act, cudaMemcpyHostToDevice));
  float one = 1, zero = 0;
  for (int i = 1; i < gib; i++) {
    CHECK(cudaMalloc(&acts[i], act));
    CHECK(cudnnConvolutionForward(h, &one, t, acts[i - 1], w, weights, cd, 0, NULL, 0, &zero, t, acts[i]));
  }
  CHECK(cudaDeviceSynchronize());
  size_t free_b, total_b;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("device_used=%zu maxrss_kib=%ld\n", total_b - free_b, ru.ru_maxrss);
  return 0;
}

static int probe_faults(void) {
  register_kernels();
  void *p[4];
  for (int i = 0; i < 4; i++) printf("alloc%d=%d\n", i + 1, cudaMalloc(&p[i], 4096));
  char buf[64] = {0};
  for (int i = 0; i < 3; i++) printf("copy%d=%d\n", i + 1, cudaMemcpy(p[0], buf, sizeof buf, cudaMemcpyHostToDevice));
  double flops = 1e6;
  void *args[] = {&flops};
  for (int i = 0; i < 3; i++) printf("launch%d=%d\n", i + 1, cudaLaunchKernel(k_burn, ONE, ONE, args, 0, NULL));
  return 0;
}

/* 8 threads allocating, launching and freeing at once. */
static void *thread_work(void *arg) {
  long id = (long)arg;
  for (int i = 0; i < 50; i++) {
    float *x, *y;
    if (cudaMalloc((void **)&x, 4096 + 64 * id) || cudaMalloc((void **)&y, 4096)) return (void *)1;
    int n = 1024; float a = 1;
    void *args[] = {&n, &a, &x, &y};
    if (cudaLaunchKernel(k_axpy, ONE, ONE, args, 0, NULL)) return (void *)1;
    if (cudaFree(x) || cudaFree(y)) return (void *)1;
  }
  return NULL;
}

static int probe_threads(void) {
  register_kernels();
  pthread_t t[8];
  for (long i = 0; i < 8; i++) pthread_create(&t[i], NULL, thread_work, (void *)i);
  int bad = 0;
  for (int i = 0; i < 8; i++) { void *r; pthread_join(t[i], &r); bad |= r != NULL; }
  printf("threads=%s allocs=%d launches=%d\n", bad ? "failed" : "ok", 8 * 50 * 2, 8 * 50);
  return bad;
}

/* A thread's context: none current on a fresh thread, where a driver call that works in one
 * fails; the runtime binds its primary context at its first call there that needs one. */
typedef CUresult (*ctx_get_t)(void **);
typedef CUresult (*ctx_set_t)(void *);
typedef CUresult (*retain_t)(void **, int);
typedef CUresult (*dalloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*dfree_t)(CUdeviceptr);

static void *fresh_driver(void *arg) {
  (void)arg;
  void *ctx = (void *)1;
  CUdeviceptr d = 0;
  int got = ((ctx_get_t)driver_fn("cuCtxGetCurrent", 4000))(&ctx);
  int alloc = ((dalloc_t)driver_fn("cuMemAlloc", 12000))(&d, 4096);
  void *primary = NULL;
  int retain = ((retain_t)driver_fn("cuDevicePrimaryCtxRetain", 7000))(&primary, 0);
  int set = ((ctx_set_t)driver_fn("cuCtxSetCurrent", 4000))(primary);
  int bound = ((dalloc_t)driver_fn("cuMemAlloc", 12000))(&d, 4096);
  if (bound == 0) ((dfree_t)driver_fn("cuMemFree", 12000))(d);
  printf("fresh_get=%d fresh_current_null=%d fresh_alloc=%d retain=%d set=%d bound_alloc=%d\n",
         got, ctx == NULL, alloc, retain, set, bound);
  return NULL;
}

static void *fresh_runtime(void *arg) {
  (void)arg;
  void *a = NULL, *ctx = NULL;
  int r = cudaMalloc(&a, 4096);
  ((ctx_get_t)driver_fn("cuCtxGetCurrent", 4000))(&ctx);
  printf("runtime_malloc=%d runtime_bound=%d\n", r, ctx != NULL);
  if (r == 0) cudaFree(a);
  return NULL;
}

static int probe_context(void) {
  pthread_t t;
  pthread_create(&t, NULL, fresh_driver, NULL);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, fresh_runtime, NULL);
  pthread_join(t, NULL);
  return 0;
}

/* A child forked after CUDA started: it runs on (pass-through) and exits cleanly. */
static int probe_fork(void) {
  void *a;
  CHECK(cudaMalloc(&a, 1000));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    void *b;
    int r = cudaMalloc(&b, 2000);
    printf("child_malloc=%d\n", r);
    fflush(stdout);
    _exit(r == 0 ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  void *c;
  CHECK(cudaMalloc(&c, 3000));
  printf("child_exit=%d parent_after=ok\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

/* Three allocations, then _exit, which skips atexit handlers. */
static int probe_exit(void) {
  void *p;
  for (int i = 0; i < 3; i++) CHECK(cudaMalloc(&p, 4096 * (i + 1)));
  printf("exiting\n");
  fflush(stdout);
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: sim_probe oom|vmm-copy|vmm-kernel|vmm-cudnn|timing|kernels|entry|shape GIB|faults|threads|fork|exit\n"); return 2; }
  const char *p = argv[1];
  if (!strcmp(p, "oom")) return probe_oom();
  if (!strncmp(p, "vmm-", 4)) return probe_vmm(p + 4);
  if (!strcmp(p, "timing")) return probe_timing();
  if (!strcmp(p, "kernels")) return probe_kernels();
  if (!strcmp(p, "entry")) return probe_entry();
  if (!strcmp(p, "shape")) return probe_shape(argc > 2 ? atoi(argv[2]) : 40);
  if (!strcmp(p, "faults")) return probe_faults();
  if (!strcmp(p, "threads")) return probe_threads();
  if (!strcmp(p, "context")) return probe_context();
  if (!strcmp(p, "fork")) return probe_fork();
  if (!strcmp(p, "exit")) return probe_exit();
  fprintf(stderr, "unknown probe %s\n", p);
  return 2;
}
