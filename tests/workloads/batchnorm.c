/* batchnorm: cuDNN batch normalisation as PyTorch's BatchNorm calls it (derived parameter
 * descriptor, workspace and reserve-space queries, ForwardTrainingEx with running averages and
 * saved statistics, BackwardEx from the saved statistics, ForwardInference from the running
 * ones), checked against a reference computed here in double precision, for the SPATIAL and
 * PER_ACTIVATION modes.
 *
 * Prints, per mode M in spatial, per_activation: M_param_dims=, M_workspace=, M_reserve=, and
 * the largest absolute error of each result against the reference: M_y_err=, M_running_mean_err=,
 * M_running_var_err=, M_saved_mean_err=, M_saved_inv_err=, M_dx_err=, M_dscale_err=,
 * M_dbias_err=, M_infer_err=; then fused_status= (BN_ACTIVATION, not simulated). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_abi.h"

#define CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { \
  fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

enum { N = 3, C = 4, H = 5, W = 6, E = N * C * H * W };

static void *upload(const float *h, size_t n) {
  void *d;
  CHECK(cudaMalloc(&d, n * 4));
  CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  return d;
}

static double err(const void *dev, const double *want, size_t n) {
  float *got = malloc(n * 4);
  CHECK(cudaMemcpy(got, dev, n * 4, cudaMemcpyDeviceToHost));
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= e)) e = d; /* NaN counts as the largest error */
  }
  free(got);
  return e;
}

int main(void) {
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  float x[E], dy[E];
  for (int i = 0; i < E; i++) {
    x[i] = (float)((i * 37) % 101) / 25.0f - 2.0f + (float)(i % C);
    dy[i] = (float)((i * 53) % 89) / 89.0f - 0.5f;
  }
  cudnnTensorDescriptor_t xd;
  CHECK(cudnnCreateTensorDescriptor(&xd));
  CHECK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  void *dx_dev = upload(x, E), *ddy = upload(dy, E), *y, *dxout;
  CHECK(cudaMalloc(&y, E * 4));
  CHECK(cudaMalloc(&dxout, E * 4));
  const char *names[2] = {"spatial", "per_activation"};
  const int modes[2] = {CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_PER_ACTIVATION};
  for (int m = 0; m < 2; m++) {
    const char *mn = names[m];
    int per_act = modes[m] == CUDNN_BATCHNORM_PER_ACTIVATION;
    int P = per_act ? C * H * W : C; /* parameters */
    int M = per_act ? N : N * H * W; /* values per statistic */
    cudnnTensorDescriptor_t pd;
    CHECK(cudnnCreateTensorDescriptor(&pd));
    CHECK(cudnnDeriveBNTensorDescriptor(pd, xd, modes[m]));
    int dt, nb, pdims[4], pstr[4];
    CHECK(cudnnGetTensorNdDescriptor(pd, 4, &dt, &nb, pdims, pstr));
    printf("%s_param_dims=%dx%dx%dx%d\n", mn, pdims[0], pdims[1], pdims[2], pdims[3]);
    size_t ws = 99, rs = 99, bws = 99;
    CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, modes[m], CUDNN_BATCHNORM_OPS_BN, xd, NULL, xd,
                                                                   pd, NULL, &ws));
    CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, modes[m], CUDNN_BATCHNORM_OPS_BN, NULL, xd, &rs));
    CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, modes[m], CUDNN_BATCHNORM_OPS_BN, xd, xd, xd, NULL, xd,
                                                            pd, NULL, &bws));
    printf("%s_workspace=%zu\n%s_reserve=%zu\n%s_backward_workspace=%zu\n", mn, ws, mn, rs, mn, bws);

    float *scale = malloc(P * 4), *bias = malloc(P * 4), *rmean = malloc(P * 4), *rvar = malloc(P * 4);
    for (int k = 0; k < P; k++) {
      scale[k] = 0.5f + 0.25f * (float)(k % 5);
      bias[k] = 0.1f * (float)(k % 3) - 0.1f;
      rmean[k] = 0.2f;
      rvar[k] = 1.5f;
    }
    void *dscale = upload(scale, P), *dbias = upload(bias, P), *drm = upload(rmean, P), *drv = upload(rvar, P);
    void *smean, *sinv, *gscale, *gbias;
    CHECK(cudaMalloc(&smean, P * 4)); CHECK(cudaMalloc(&sinv, P * 4));
    CHECK(cudaMalloc(&gscale, P * 4)); CHECK(cudaMalloc(&gbias, P * 4));
    const double eps = 1e-5, factor = 0.1;
    float one = 1.0f, zero = 0.0f;
    CHECK(cudnnBatchNormalizationForwardTrainingEx(h, modes[m], CUDNN_BATCHNORM_OPS_BN, &one, &zero, xd, dx_dev, NULL,
                                                   NULL, xd, y, pd, dscale, dbias, factor, drm, drv, eps, smean,
                                                   sinv, NULL, NULL, 0, NULL, 0));

    /* The reference, in double precision. */
    double *mean = calloc(P, 8), *var = calloc(P, 8), *inv = calloc(P, 8);
    double *yref = calloc(E, 8), *rmref = calloc(P, 8), *rvref = calloc(P, 8);
    double *dxref = calloc(E, 8), *dsref = calloc(P, 8), *dbref = calloc(P, 8), *iref = calloc(E, 8);
#define PIDX(i) (per_act ? (i) % (C * H * W) : ((i) / (H * W)) % C)
    for (int i = 0; i < E; i++) mean[PIDX(i)] += x[i];
    for (int k = 0; k < P; k++) mean[k] /= M;
    for (int i = 0; i < E; i++) var[PIDX(i)] += (x[i] - mean[PIDX(i)]) * (x[i] - mean[PIDX(i)]);
    for (int k = 0; k < P; k++) {
      var[k] /= M;
      inv[k] = 1.0 / sqrt(var[k] + eps);
      rmref[k] = (1 - factor) * rmean[k] + factor * mean[k];
      rvref[k] = (1 - factor) * rvar[k] + factor * var[k] * M / (M - 1);
    }
    for (int i = 0; i < E; i++) {
      int k = PIDX(i);
      yref[i] = scale[k] * (x[i] - mean[k]) * inv[k] + bias[k];
    }
    printf("%s_y_err=%g\n", mn, err(y, yref, E));
    printf("%s_running_mean_err=%g\n%s_running_var_err=%g\n", mn, err(drm, rmref, P), mn, err(drv, rvref, P));
    printf("%s_saved_mean_err=%g\n%s_saved_inv_err=%g\n", mn, err(smean, mean, P), mn, err(sinv, inv, P));

    CHECK(cudnnBatchNormalizationBackwardEx(h, modes[m], CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, xd, dx_dev,
                                            xd, y, xd, ddy, NULL, NULL, xd, dxout, pd, dscale, dbias, gscale, gbias,
                                            eps, smean, sinv, NULL, NULL, 0, NULL, 0));
    for (int i = 0; i < E; i++) {
      int k = PIDX(i);
      dbref[k] += dy[i];
      dsref[k] += dy[i] * (x[i] - mean[k]) * inv[k];
    }
    for (int i = 0; i < E; i++) {
      int k = PIDX(i);
      double xhat = (x[i] - mean[k]) * inv[k];
      dxref[i] = scale[k] * inv[k] / M * (M * dy[i] - dbref[k] - xhat * dsref[k]);
    }
    printf("%s_dx_err=%g\n%s_dscale_err=%g\n%s_dbias_err=%g\n", mn, err(dxout, dxref, E), mn, err(gscale, dsref, P),
           mn, err(gbias, dbref, P));

    /* Inference from the updated running statistics. */
    float *rm2 = malloc(P * 4), *rv2 = malloc(P * 4);
    CHECK(cudaMemcpy(rm2, drm, P * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(rv2, drv, P * 4, cudaMemcpyDeviceToHost));
    CHECK(cudnnBatchNormalizationForwardInference(h, modes[m], &one, &zero, xd, dx_dev, xd, y, pd, dscale, dbias, drm,
                                                  drv, eps));
    for (int i = 0; i < E; i++) {
      int k = PIDX(i);
      iref[i] = scale[k] * (x[i] - rm2[k]) / sqrt(rv2[k] + eps) + bias[k];
    }
    printf("%s_infer_err=%g\n", mn, err(y, iref, E));
    if (m == 0) {
      printf("fused_status=%d\n",
             (int)cudnnBatchNormalizationForwardTrainingEx(h, modes[m], CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero,
                                                           xd, dx_dev, NULL, NULL, xd, y, pd, dscale, dbias, factor,
                                                           drm, drv, eps, smean, sinv, NULL, NULL, 0, NULL, 0));
    }
  }
  return 0;
}
