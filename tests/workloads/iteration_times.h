/* TRAINER_TIMES=1: each iteration's time on the device clock, from events recorded at the
 * iteration boundaries (marks[0..iters]), on stderr as "PROG: iteration times (ms, device
 * clock): ...", the line scripts/bench-memory.py reads. Simulated on the simulated GPU. */
#ifndef ITERATION_TIMES_H
#define ITERATION_TIMES_H

#include <stdio.h>
#include <stdlib.h>

#include "cuda_abi.h"

static void print_iteration_times(const char *prog, cudaEvent_t *marks, int iters) {
  if (!getenv("TRAINER_TIMES")) return;
  fprintf(stderr, "%s: iteration times (ms, device clock):", prog);
  for (int it = 0; it < iters; it++) {
    float ms = 0;
    cudaEventElapsedTime(&ms, marks[it], marks[it + 1]);
    fprintf(stderr, " %.3f", ms);
  }
  fprintf(stderr, "\n");
}

#endif
