/* hook_bench: the cost Marmoset adds to a call, measured in one process: N calls of a driver
 * function through the pointer the program gets (our hook, under LD_PRELOAD) against N calls of
 * the real function (marmoset_real_function gives it; without Marmoset both are the same).
 * cuMemGetInfo_v2 passes through (nothing traced); cuStreamSynchronize writes a sync record
 * when tracing is on.  Usage: hook_bench [N] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_abi.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef CUresult (*info_t)(size_t *, size_t *);
typedef CUresult (*sync_t)(void *);

static double per_call_info(info_t f, long n) {
  size_t a, b;
  for (long i = 0; i < n / 10; i++) f(&a, &b); /* warm up */
  double t0 = now();
  for (long i = 0; i < n; i++) f(&a, &b);
  return (now() - t0) / n * 1e9;
}

static double per_call_sync(sync_t f, long n) {
  for (long i = 0; i < n / 10; i++) f(NULL);
  double t0 = now();
  for (long i = 0; i < n; i++) f(NULL);
  return (now() - t0) / n * 1e9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int devices;
  if (cudaGetDeviceCount(&devices)) return 1;
  void *drv = dlopen("libcuda.so.1", RTLD_NOW);
  info_t hooked_info = (info_t)dlsym(drv, "cuMemGetInfo_v2");
  sync_t hooked_sync = (sync_t)dlsym(drv, "cuStreamSynchronize");
  void *(*real_fn)(const char *) = (void *(*)(const char *))dlsym(RTLD_DEFAULT, "marmoset_real_function");
  info_t direct_info = real_fn ? (info_t)real_fn("cuMemGetInfo_v2") : hooked_info;
  sync_t direct_sync = real_fn ? (sync_t)real_fn("cuStreamSynchronize") : hooked_sync;
  if (!hooked_info || !direct_info || !hooked_sync || !direct_sync) return 1;
  /* Interleave the measurements so machine noise hits both alike. */
  double d = 0, h = 0, ds = 0, hs = 0;
  for (int r = 0; r < 3; r++) {
    d += per_call_info(direct_info, n) / 3; h += per_call_info(hooked_info, n) / 3;
    ds += per_call_sync(direct_sync, n / 4) / 3; hs += per_call_sync(hooked_sync, n / 4) / 3;
  }
  printf("shim=%s calls=%ld\n", real_fn ? "loaded" : "absent", n);
  printf("pass_through: direct_ns=%.1f hooked_ns=%.1f added_ns=%.1f\n", d, h, h - d);
  printf("recorded_call: direct_ns=%.1f hooked_ns=%.1f added_ns=%.1f\n", ds, hs, hs - ds);
  return 0;
}
