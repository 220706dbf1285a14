/* threads: host threads sharing one device, as a framework's autograd and data-loading threads
 * do. Each thread owns NBUF buffers of KIB KiB and, for STEPS steps, copies known bytes in, runs
 * y = a * x + y over neighbouring buffers on its own stream, copies one buffer out and checks it
 * against the same arithmetic done on the host, frees one buffer and allocates it again (through
 * cudaMalloc and cudaMallocAsync in turn). Every thread prints a checksum of all its buffers at
 * the end, in thread order, so two runs compare byte for byte.
 *
 *   threads NTHREADS NBUF STEPS KIB [cold]
 *
 * cold: the threads run one after another, each thread's first CUDA call is a cudaMalloc (no
 * context is current on it yet, as on a framework's fresh autograd thread), and each leaves its
 * buffers allocated, for the main thread to free at the end: under a budget that the first
 * thread fills, each later thread's first call must make room.
 *
 * Runs on the simulated GPU only (its kernels are host functions registered with it). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

static void *sim_fn(const char *name) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  void *f = h ? dlsym(h, name) : NULL;
  if (!f) { fprintf(stderr, "not the simulated GPU: no %s\n", name); exit(1); }
  return f;
}

static simgpuKernelAccess_t k_access;
static void *k_axpy;

/* axpy(int n, float a, const float *x, float *y): y = a * x + y */
static void axpy(simgpuKernelCtx *ctx, void **p) {
  int n = *(int *)p[0]; float a = *(float *)p[1];
  CUdeviceptr x = (CUdeviceptr)(uintptr_t)*(const float **)p[2], y = (CUdeviceptr)(uintptr_t)*(float **)p[3];
  const float *hx = k_access(ctx, x, (size_t)n * 4, 0);
  float *hy = k_access(ctx, y, (size_t)n * 4, 1);
  if (!hx || !hy) return;
  for (int i = 0; i < n; i++) hy[i] += a * hx[i];
}

static int nthreads, nbuf, steps, cold;
static size_t n; /* floats per buffer */

typedef struct { int id; int failed; uint64_t checksum; char why[160]; float **kept; } Work;

#define TRY(w, x) do { int e_ = (int)(x); if (e_ != 0) { \
  snprintf((w)->why, sizeof (w)->why, "line %d: %s -> %d", __LINE__, #x, e_); (w)->failed = 1; return NULL; } } while (0)

static void fill(float *h, int thread, int buf, int step) {
  for (size_t i = 0; i < n; i++) h[i] = (float)((thread * 131 + buf * 17 + step * 7 + (int)(i % 97)) % 251) / 64.0f;
}

static void *work(void *arg) {
  Work *w = arg;
  cudaStream_t s;
  if (!cold) TRY(w, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float **d = calloc((size_t)nbuf, sizeof *d);
  float **h = calloc((size_t)nbuf, sizeof *h); /* the host's reference of each buffer */
  float *back = malloc(n * 4);
  if (!d || !h || !back) { snprintf(w->why, sizeof w->why, "host memory"); w->failed = 1; return NULL; }
  for (int b = 0; b < nbuf; b++) {
    h[b] = malloc(n * 4);
    if (!h[b]) { snprintf(w->why, sizeof w->why, "host memory"); w->failed = 1; return NULL; }
    fill(h[b], w->id, b, 0);
    TRY(w, cudaMalloc((void **)&d[b], n * 4));
    TRY(w, cudaMemcpy(d[b], h[b], n * 4, cudaMemcpyHostToDevice));
  }
  if (cold) TRY(w, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int count = (int)n;
  for (int step = 1; step <= steps; step++) {
    float a = 0.5f + 0.25f * (float)((w->id + step) % 4);
    for (int b = 0; b + 1 < nbuf; b++) {
      void *args[] = {&count, &a, &d[b], &d[b + 1]};
      dim3 one = {1, 1, 1};
      TRY(w, cudaLaunchKernel(k_axpy, one, one, args, 0, s));
      for (size_t i = 0; i < n; i++) h[b + 1][i] += a * h[b][i];
    }
    /* One buffer out and checked now. */
    int c = step % nbuf;
    TRY(w, cudaMemcpyAsync(back, d[c], n * 4, cudaMemcpyDeviceToHost, s));
    TRY(w, cudaStreamSynchronize(s));
    if (memcmp(back, h[c], n * 4) != 0) {
      snprintf(w->why, sizeof w->why, "step %d: buffer %d differs from the host's arithmetic", step, c);
      w->failed = 1;
      return NULL;
    }
    /* One buffer freed and made again with new contents, by turns synchronously and on the stream. */
    int f = (step * 3) % nbuf;
    fill(h[f], w->id, f, step);
    if (step % 2) {
      TRY(w, cudaFree(d[f]));
      TRY(w, cudaMalloc((void **)&d[f], n * 4));
      TRY(w, cudaMemcpy(d[f], h[f], n * 4, cudaMemcpyHostToDevice));
    } else {
      TRY(w, cudaFreeAsync(d[f], s));
      TRY(w, cudaMallocAsync((void **)&d[f], n * 4, s));
      TRY(w, cudaMemcpyAsync(d[f], h[f], n * 4, cudaMemcpyHostToDevice, s));
    }
  }
  uint64_t sum = 1469598103934665603ull;
  for (int b = 0; b < nbuf; b++) {
    TRY(w, cudaMemcpyAsync(back, d[b], n * 4, cudaMemcpyDeviceToHost, s));
    TRY(w, cudaStreamSynchronize(s));
    if (memcmp(back, h[b], n * 4) != 0) {
      snprintf(w->why, sizeof w->why, "at the end: buffer %d differs from the host's arithmetic", b);
      w->failed = 1;
      return NULL;
    }
    const unsigned char *p = (const unsigned char *)back;
    for (size_t i = 0; i < n * 4; i++) sum = (sum ^ p[i]) * 1099511628211ull;
    if (!cold) TRY(w, cudaFree(d[b]));
    free(h[b]);
  }
  TRY(w, cudaStreamDestroy(s));
  if (cold) w->kept = d; else free(d);
  free(h); free(back);
  w->checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: threads NTHREADS NBUF STEPS KIB [cold]\n"); return 2; }
  nthreads = atoi(argv[1]); nbuf = atoi(argv[2]); steps = atoi(argv[3]);
  cold = argc > 5 && strcmp(argv[5], "cold") == 0;
  n = (size_t)atoi(argv[4]) * 1024 / 4;
  if (nthreads < 1 || nthreads > 64 || nbuf < 2 || steps < 1 || n < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
  simgpuRegisterKernel_t reg = (simgpuRegisterKernel_t)sim_fn("simgpuRegisterKernel");
  k_access = (simgpuKernelAccess_t)sim_fn("simgpuKernelAccess");
  size_t sizes[] = {4, 4, 8, 8}, aligns[] = {4, 4, 8, 8};
  if (reg("axpy", axpy, 4, sizes, aligns, &k_axpy)) { fprintf(stderr, "cannot register axpy\n"); return 1; }
  pthread_t t[64];
  Work w[64];
  for (int i = 0; i < nthreads; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].id = i;
    if (pthread_create(&t[i], NULL, work, &w[i])) { fprintf(stderr, "pthread_create\n"); return 1; }
    if (cold) pthread_join(t[i], NULL);
  }
  int bad = 0;
  if (!cold)
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < nthreads; i++)
    if (w[i].kept) {
      for (int b = 0; b < nbuf; b++)
        if (cudaFree(w[i].kept[b]) != 0) { printf("thread %d: freeing buffer %d failed\n", i, b); bad = 1; }
      free(w[i].kept);
    }
  for (int i = 0; i < nthreads; i++) {
    if (w[i].failed) { printf("thread %d: failed: %s\n", i, w[i].why); bad = 1; }
    else printf("thread %d: checksum %016llx\n", i, (unsigned long long)w[i].checksum);
  }
  return bad;
}
