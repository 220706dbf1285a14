/* big_alloc: asks the device for one allocation of GIB GiB through each allocation entry point
 * (cudaMalloc, cuMemAlloc, cudaMallocAsync, cuMemCreate), prints each result code and the free
 * memory around them, then checks that the device still works: a small allocation, a copy of known
 * bytes in and back, and no error left behind.
 *
 *   big_alloc GIB
 *
 * Prints key=value lines: runtime= driver= async= create= (0 or the error code), free_before=,
 * free_after= (bytes free with none of the big allocations held), roundtrip=ok|bad. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static void *driver_fn(const char *name, unsigned version) {
  void *fn = NULL; int status = -1;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, 0, &status));
  if (!fn || status != 0) { fprintf(stderr, "no driver function %s\n", name); exit(1); }
  return fn;
}

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*create_t)(unsigned long long *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_t)(unsigned long long);
typedef CUresult (*gran_t)(size_t *, const CUmemAllocationProp *, int);

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: big_alloc GIB\n"); return 2; }
  size_t big = (size_t)strtoull(argv[1], NULL, 10) << 30;
  size_t free_b, total_b;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  printf("total=%zu free_before=%zu\n", total_b, free_b);

  void *p = NULL;
  int r = cudaMalloc(&p, big);
  printf("runtime=%d\n", r);
  if (r == 0) CHECK(cudaFree(p));

  CUdeviceptr d = 0;
  r = ((alloc_t)driver_fn("cuMemAlloc", 12000))(&d, big);
  printf("driver=%d\n", r);
  if (r == 0) CHECK(((free_t)driver_fn("cuMemFree", 12000))(d));

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  r = cudaMallocAsync(&p, big, s);
  printf("async=%d\n", r);
  if (r == 0) CHECK(cudaFreeAsync(p, s));
  CHECK(cudaStreamSynchronize(s));

  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.locationType = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t gran;
  CHECK(((gran_t)driver_fn("cuMemGetAllocationGranularity", 12000))(&gran, &prop, 0));
  unsigned long long h;
  r = ((create_t)driver_fn("cuMemCreate", 12000))(&h, (big + gran - 1) / gran * gran, &prop, 0);
  printf("create=%d\n", r);
  if (r == 0) CHECK(((release_t)driver_fn("cuMemRelease", 12000))(h));

  CHECK(cudaMemGetInfo(&free_b, &total_b));
  printf("free_after=%zu\n", free_b);

  /* The device goes on: a small buffer holds what is copied in. */
  enum { N = 1 << 20 };
  unsigned char *in = malloc(N), *out = malloc(N);
  for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
  CHECK(cudaMalloc(&p, N));
  CHECK(cudaMemcpy(p, in, N, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(out, p, N, cudaMemcpyDeviceToHost));
  printf("roundtrip=%s\n", memcmp(in, out, N) ? "bad" : "ok");
  CHECK(cudaFree(p));
  CHECK(cudaDeviceSynchronize());
  free(in); free(out);
  return 0;
}
