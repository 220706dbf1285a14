/* dl_cudnn_dispatch: libcudnn.so.9 is a dispatcher, as NVIDIA's cuDNN 9 is. This program defines
 * its own dlsym (an executable's definition comes first in symbol look-up, as an LD_PRELOAD
 * interposer's does) that records every look-up and passes it on to glibc's. It opens
 * libcudnn.so.9, calls through it, and checks that the dispatcher found each function in the
 * right sub-library by its exact API name, and that a name no sub-library has answers
 * CUDNN_STATUS_NOT_SUPPORTED.
 *
 * Prints create_status=, create_looked_up_in_graph=, execute_looked_up_in_graph=,
 * conv_looked_up_in_cnn=, tensor_looked_up_in_ops=, version_same=, error_string_same=,
 * ctc_status=, ctc_again_status=, graph_handle_same=. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_SEEN 256
static struct { void *handle; char name[64]; } seen[MAX_SEEN];
static int nseen;

typedef void *(*dlsym_t)(void *, const char *);

void *dlsym(void *handle, const char *name) {
  static dlsym_t real;
  if (!real) {
    real = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real) real = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }
  if (nseen < MAX_SEEN) {
    seen[nseen].handle = handle;
    snprintf(seen[nseen].name, sizeof seen[nseen].name, "%s", name);
    nseen++;
  }
  return real(handle, name);
}

/* Whether `name` was looked up in the library `soname` (already loaded). */
static int looked_up(const char *soname, const char *name) {
  void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  int found = 0;
  for (int i = 0; i < nseen; i++) found |= seen[i].handle == h && !strcmp(seen[i].name, name);
  dlclose(h);
  return found;
}

typedef int (*status_fn)(void);
typedef int (*create_fn)(void **);
typedef size_t (*version_fn)(void);
typedef const char *(*errstr_fn)(int);
typedef int (*exec_fn)(void *, void *, void *);
typedef int (*conv_fn)(void *, const void *, void *, const void *, void *, const void *, void *, int,
                       void *, size_t, const void *, void *, void *);

int main(void) {
  void *dnn = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!dnn) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  void *handle = NULL;
  int st = ((create_fn)dlsym(dnn, "cudnnCreate"))(&handle);
  printf("create_status=%d\n", st);
  printf("create_looked_up_in_graph=%d\n", looked_up("libcudnn_graph.so.9", "cudnnCreate"));
  /* An invalid plan: the call still goes through the dispatcher to the graph library. */
  ((exec_fn)dlsym(dnn, "cudnnBackendExecute"))(handle, NULL, NULL);
  printf("execute_looked_up_in_graph=%d\n", looked_up("libcudnn_graph.so.9", "cudnnBackendExecute"));
  int conv_st = ((conv_fn)dlsym(dnn, "cudnnConvolutionForward"))(handle, NULL, NULL, NULL, NULL, NULL, NULL, 0,
                                                                NULL, 0, NULL, NULL, NULL);
  printf("conv_status=%d\n", conv_st);
  printf("conv_looked_up_in_cnn=%d\n", looked_up("libcudnn_cnn.so.9", "cudnnConvolutionForward"));
  void *t = NULL;
  ((create_fn)dlsym(dnn, "cudnnCreateTensorDescriptor"))(&t);
  printf("tensor_looked_up_in_ops=%d\n", looked_up("libcudnn_ops.so.9", "cudnnCreateTensorDescriptor"));

  /* The dispatcher's answer is the sub-library's. */
  void *graph = dlopen("libcudnn_graph.so.9", RTLD_NOW | RTLD_NOLOAD);
  if (!graph) { fprintf(stderr, "the dispatcher did not load libcudnn_graph.so.9\n"); return 1; }
  printf("version_same=%d\n",
         ((version_fn)dlsym(dnn, "cudnnGetVersion"))() == ((version_fn)dlsym(graph, "cudnnGetVersion"))());
  printf("error_string_same=%d\n", ((errstr_fn)dlsym(dnn, "cudnnGetErrorString"))(2000) ==
                                       ((errstr_fn)dlsym(graph, "cudnnGetErrorString"))(2000));
  printf("dispatcher_is_not_graph=%d\n", dlsym(dnn, "cudnnCreate") != dlsym(graph, "cudnnCreate"));

  /* Imported by torch, simulated by no sub-library. */
  status_fn ctc = (status_fn)dlsym(dnn, "cudnnCTCLoss");
  printf("ctc_status=%d\n", ctc ? ctc() : -1);
  printf("ctc_again_status=%d\n", ctc ? ctc() : -1);
  printf("ctc_in_graph=%d\n", dlsym(graph, "cudnnCTCLoss") != NULL);
  return 0;
}
