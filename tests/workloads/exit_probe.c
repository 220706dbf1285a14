/* exit_probe: does some work on the device and then ends the way it is told, to check that the
 * simulated GPU writes its report (SIMGPU_REPORT) at every exit it can see.
 *
 *   exit_probe exit|abort|kill [MIB]
 *
 * Allocates MIB MiB (default 4), copies them in and back synchronously, then copies them in once
 * more on a stream without waiting for it (work the report must still count), and ends: `exit`
 * returns 0; `abort` calls abort(), as std::terminate does (the report is still written);
 * `kill` sends itself SIGKILL (nothing can write the report then).
 *
 * Prints h2d_bytes= and d2h_bytes= (what the report must count) before it ends. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "exit") && strcmp(argv[1], "abort") && strcmp(argv[1], "kill"))) {
    fprintf(stderr, "usage: exit_probe exit|abort|kill [MIB]\n");
    return 2;
  }
  size_t n = (size_t)(argc > 2 ? strtoull(argv[2], NULL, 10) : 4) << 20;
  char *host = malloc(n);
  if (!host) return 1;
  memset(host, 7, n);
  void *dev = NULL;
  CHECK(cudaMalloc(&dev, n));
  CHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
  printf("h2d_bytes=%zu d2h_bytes=%zu\n", 2 * n, n);
  fflush(stdout);
  if (!strcmp(argv[1], "abort")) abort();
  if (!strcmp(argv[1], "kill")) kill(getpid(), SIGKILL);
  return 0;
}
