/* mem_probe: programs that hold more device memory than a budget allows, for testing memory
 * virtualisation. Each checks every byte it reads back against a host shadow copy and prints
 * NAME=ok (or NAME=wrong), with the counts of what it did.
 *
 *   mem_probe streams        a tensor written on one stream and read on another, evicted between
 *   mem_probe freed-evicted  tensors freed while evicted; the others stay intact
 *   mem_probe async          cudaMallocAsync / cudaFreeAsync in stream order
 *   mem_probe fault          three 4 MiB tensors under a 10 MiB budget (for SIMGPU_FAIL=copy:3)
 *   mem_probe random [N]     N random allocate/write/read/free operations (default 1000) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static simgpuKernelAccess_t k_access;
static void *k_fill, *k_copy;
static const dim3 ONE = {1, 1, 1};

/* fill(unsigned char *p, size_t n, int seed): p[i] = (i * 31 + seed) & 255 */
static void fill(simgpuKernelCtx *ctx, void **p) {
  unsigned char *d = k_access(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[0], *(size_t *)p[1], 1);
  if (!d) return;
  for (size_t i = 0; i < *(size_t *)p[1]; i++) d[i] = (unsigned char)((i * 31 + (size_t)*(int *)p[2]) & 255);
}

/* copy(void *dst, const void *src, size_t n) */
static void copy(simgpuKernelCtx *ctx, void **p) {
  size_t n = *(size_t *)p[2];
  unsigned char *d = k_access(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[0], n, 1);
  const unsigned char *s = k_access(ctx, (CUdeviceptr)(uintptr_t)*(void **)p[1], n, 0);
  if (!d || !s) return;
  memcpy(d, s, n);
}

static void register_kernels(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  simgpuRegisterKernel_t reg = h ? (simgpuRegisterKernel_t)dlsym(h, "simgpuRegisterKernel") : NULL;
  k_access = h ? (simgpuKernelAccess_t)dlsym(h, "simgpuKernelAccess") : NULL;
  if (!reg || !k_access) { fprintf(stderr, "mem_probe: needs the simulated GPU\n"); exit(1); }
  size_t s1[] = {8, 8, 4}, a1[] = {8, 8, 4};
  CHECK(reg("fill", fill, 3, s1, a1, &k_fill));
  size_t s2[] = {8, 8, 8}, a2[] = {8, 8, 8};
  CHECK(reg("copy", copy, 3, s2, a2, &k_copy));
}

static void launch_fill(void *p, size_t n, int seed, cudaStream_t s) {
  void *args[] = {&p, &n, &seed};
  CHECK(cudaLaunchKernel(k_fill, ONE, ONE, args, 0, s));
}

static int check_fill(const void *dev, size_t n, int seed) {
  unsigned char *h = malloc(n);
  CHECK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (size_t i = 0; i < n; i++) if (h[i] != (unsigned char)((i * 31 + (size_t)seed) & 255)) { ok = 0; break; }
  free(h);
  return ok;
}

#define MIB (1u << 20)

static int probe_streams(void) {
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  void *t, *u, *other[6];
  CHECK(cudaMalloc(&t, 4 * MIB));
  launch_fill(t, 4 * MIB, 7, a); /* written on stream a */
  cudaEvent_t written;
  CHECK(cudaEventCreate(&written));
  CHECK(cudaEventRecord(written, a));
  for (int i = 0; i < 6; i++) { CHECK(cudaMalloc(&other[i], 4 * MIB)); launch_fill(other[i], 4 * MIB, i, b); }
  CHECK(cudaMalloc(&u, 4 * MIB));
  CHECK(cudaStreamWaitEvent(b, written, 0));
  size_t n = 4 * MIB;
  void *args[] = {&u, &t, &n};
  CHECK(cudaLaunchKernel(k_copy, ONE, ONE, args, 0, b)); /* read on stream b */
  CHECK(cudaStreamSynchronize(b));
  int ok = check_fill(u, 4 * MIB, 7) && check_fill(t, 4 * MIB, 7);
  for (int i = 0; i < 6; i++) ok &= check_fill(other[i], 4 * MIB, i);
  printf("streams=%s\n", ok ? "ok" : "wrong");
  return !ok;
}

static int probe_freed_evicted(void) {
  void *t[8];
  for (int i = 0; i < 8; i++) { CHECK(cudaMalloc(&t[i], 4 * MIB)); launch_fill(t[i], 4 * MIB, 100 + i, NULL); }
  /* The oldest ones are evicted by now (budget far below 32 MiB): free them as they are. */
  for (int i = 0; i < 4; i++) CHECK(cudaFree(t[i]));
  int ok = 1;
  for (int i = 4; i < 8; i++) ok &= check_fill(t[i], 4 * MIB, 100 + i);
  for (int round = 0; round < 3; round++) {
    void *x;
    CHECK(cudaMalloc(&x, 4 * MIB));
    launch_fill(x, 4 * MIB, round, NULL);
    ok &= check_fill(x, 4 * MIB, round);
    CHECK(cudaFree(x));
  }
  for (int i = 4; i < 8; i++) CHECK(cudaFree(t[i]));
  printf("freed_evicted=%s\n", ok ? "ok" : "wrong");
  return !ok;
}

static int probe_async(void) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int ok = 1;
  void *keep[5];
  for (int i = 0; i < 5; i++) { CHECK(cudaMallocAsync(&keep[i], 3 * MIB, s)); launch_fill(keep[i], 3 * MIB, 50 + i, s); }
  for (int round = 0; round < 6; round++) {
    void *p;
    CHECK(cudaMallocAsync(&p, 4 * MIB, s));
    CHECK(cudaMemsetAsync(p, 0, 4 * MIB, s));
    launch_fill(p, 4 * MIB, round, s);
    unsigned char *h = malloc(4 * MIB);
    CHECK(cudaMemcpyAsync(h, p, 4 * MIB, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(p, s)); /* released after the copy, in stream order */
    CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < 4 * MIB; i++) if (h[i] != (unsigned char)((i * 31 + (size_t)round) & 255)) { ok = 0; break; }
    free(h);
  }
  for (int i = 0; i < 5; i++) { ok &= check_fill(keep[i], 3 * MIB, 50 + i); CHECK(cudaFreeAsync(keep[i], s)); }
  CHECK(cudaStreamSynchronize(s));
  printf("async=%s\n", ok ? "ok" : "wrong");
  return !ok;
}

static int probe_fault(void) {
  /* copies #1 and #2 write A and B; allocating C evicts one of them (copy #3, #4). */
  unsigned char *h = malloc(4 * MIB);
  void *t[3];
  for (int i = 0; i < 3; i++) {
    CHECK(cudaMalloc(&t[i], 4 * MIB));
    for (size_t j = 0; j < 4 * MIB; j++) h[j] = (unsigned char)((j * 31 + (size_t)(10 + i)) & 255);
    if (i < 2) CHECK(cudaMemcpy(t[i], h, 4 * MIB, cudaMemcpyHostToDevice));
    else launch_fill(t[i], 4 * MIB, 10 + i, NULL);
  }
  int ok = 1;
  for (int i = 0; i < 3; i++) ok &= check_fill(t[i], 4 * MIB, 10 + i);
  free(h);
  printf("fault=%s\n", ok ? "ok" : "wrong");
  return !ok;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int probe_random(int ops) {
  enum { SLOTS = 24 };
  void *dev[SLOTS] = {0};
  unsigned char *shadow[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  int counts[4] = {0}, ok = 1;
  for (int op = 0; op < ops && ok; op++) {
    int i = (int)(next() % SLOTS), kind = (int)(next() % 4);
    if (!dev[i]) kind = 0;
    if (kind == 0 && !dev[i]) { /* allocate: mostly tensors, some small blocks */
      size[i] = next() % 5 == 0 ? 4096 + next() % 60000 : (1 + next() % 5) * MIB + next() % 4096;
      CHECK(cudaMalloc(&dev[i], size[i]));
      shadow[i] = calloc(size[i], 1);
      CHECK(cudaMemset(dev[i], 0, size[i]));
    } else if (kind == 1 || kind == 0) { /* write: a random range, from the host or by a kernel */
      size_t off = next() % size[i], n = 1 + next() % (size[i] - off);
      if (next() % 2) {
        for (size_t k = 0; k < n; k++) shadow[i][off + k] = (unsigned char)next();
        CHECK(cudaMemcpy((char *)dev[i] + off, shadow[i] + off, n, cudaMemcpyHostToDevice));
      } else {
        int seed = (int)(next() % 1000);
        for (size_t k = 0; k < n; k++) shadow[i][off + k] = (unsigned char)((k * 31 + (size_t)seed) & 255);
        void *p = (char *)dev[i] + off;
        void *args[] = {&p, &n, &seed};
        CHECK(cudaLaunchKernel(k_fill, ONE, ONE, args, 0, NULL));
      }
      counts[1]++;
    } else if (kind == 2) { /* read all of it back */
      unsigned char *h = malloc(size[i]);
      CHECK(cudaMemcpy(h, dev[i], size[i], cudaMemcpyDeviceToHost));
      if (memcmp(h, shadow[i], size[i])) { ok = 0; printf("slot %d differs at op %d\n", i, op); }
      free(h);
      counts[2]++;
    } else { /* free */
      CHECK(cudaFree(dev[i]));
      free(shadow[i]);
      dev[i] = NULL; shadow[i] = NULL;
      counts[3]++;
    }
    if (kind == 0) counts[0]++;
  }
  for (int i = 0; i < SLOTS && ok; i++) {
    if (!dev[i]) continue;
    unsigned char *h = malloc(size[i]);
    CHECK(cudaMemcpy(h, dev[i], size[i], cudaMemcpyDeviceToHost));
    if (memcmp(h, shadow[i], size[i])) { ok = 0; printf("slot %d differs at the end\n", i); }
    free(h);
  }
  printf("random=%s ops=%d allocs=%d writes=%d reads=%d frees=%d\n", ok ? "ok" : "wrong", ops, counts[0], counts[1],
         counts[2], counts[3]);
  return !ok;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: mem_probe streams|freed-evicted|async|fault|random [N]\n"); return 2; }
  register_kernels();
  if (!strcmp(argv[1], "streams")) return probe_streams();
  if (!strcmp(argv[1], "freed-evicted")) return probe_freed_evicted();
  if (!strcmp(argv[1], "async")) return probe_async();
  if (!strcmp(argv[1], "fault")) return probe_fault();
  if (!strcmp(argv[1], "random")) return probe_random(argc > 2 ? atoi(argv[2]) : 1000);
  fprintf(stderr, "unknown probe %s\n", argv[1]);
  return 2;
}
