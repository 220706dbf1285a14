/* dl_probe: reaches CUDA the way TensorFlow does, with no CUDA library linked: dlopen each
 * library RTLD_LOCAL and dlsym every function from its handle; then a driver function through
 * cuGetProcAddress_v2 and through cudaGetDriverEntryPointByVersion. Prints each pointer it
 * allocated, for the tests to find in the trace. (Built with -ldl only.) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_abi.h"

static void *sym(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (!f) { fprintf(stderr, "dlsym %s: %s\n", name, dlerror()); exit(1); }
  return f;
}

int main(void) {
  void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!rt || !drv) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  cudaError_t (*rt_malloc)(void **, size_t) = (cudaError_t (*)(void **, size_t))sym(rt, "cudaMalloc");
  cudaError_t (*rt_free)(void *) = (cudaError_t (*)(void *))sym(rt, "cudaFree");
  void *a;
  if (rt_malloc(&a, 1111)) return 1;
  printf("dlsym_handle_alloc=%llu\n", (unsigned long long)(uintptr_t)a);

  CUresult (*gpa)(const char *, void **, int, unsigned long long, int *) =
      (CUresult (*)(const char *, void **, int, unsigned long long, int *))sym(drv, "cuGetProcAddress_v2");
  void *fn = NULL; int status;
  if (gpa("cuMemAlloc", &fn, 12000, 0, &status) || !fn) return 1;
  CUdeviceptr b;
  if (((CUresult (*)(CUdeviceptr *, size_t))fn)(&b, 2222)) return 1;
  printf("proc_address_alloc=%llu\n", (unsigned long long)b);

  cudaError_t (*entry)(const char *, void **, unsigned, unsigned long long, int *) =
      (cudaError_t (*)(const char *, void **, unsigned, unsigned long long, int *))sym(rt, "cudaGetDriverEntryPointByVersion");
  fn = NULL;
  if (entry("cuMemAlloc", &fn, 12000, 0, &status) || !fn) return 1;
  CUdeviceptr c;
  if (((CUresult (*)(CUdeviceptr *, size_t))fn)(&c, 3333)) return 1;
  printf("entry_point_alloc=%llu\n", (unsigned long long)c);
  fn = NULL;
  if (entry("cuMemFree", &fn, 12000, 0, &status) || !fn) return 1;
  if (((CUresult (*)(CUdeviceptr))fn)(c)) return 1;
  if (rt_free(a)) return 1;
  printf("dl_probe=ok\n");
  return 0;
}
