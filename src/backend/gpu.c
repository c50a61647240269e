/* backend/gpu.c: the registry's one #ifdef: without HAVE_CUDA the GPU backend is absent and
 * every entry point says so; with it, backend/cuda/ (forward.cu, kv.cu, profile.cu) provides
 * them, except gpu_runtime_info(), which asks the CUDA runtime here. */
#include "backend/gpu.h"

#include "base/err.h"
#include "base/log.h"

#ifndef HAVE_CUDA
int gpu_available(void) {
    return 0;
}
const char *gpu_device_name(void) {
    return "none";
}
int gpu_input_terms(void) {
    return 0;
}
int gpu_kv_default_bytes(void) {
    return 0;
}
int gpu_model_input_terms(const struct gpu_model *g) {
    (void)g;
    return 0;
}
int gpu_model_rows(const struct gpu_model *g) {
    (void)g;
    return 0;
}
long gpu_split_tiles(void) {
    return 0;
}
int gpu_model_kv_bytes(const struct gpu_model *g) {
    (void)g;
    return 0;
}

int gpu_runtime_info(int *driver_version, int *runtime_version, size_t *mem_bytes) {
    *driver_version = *runtime_version = 0;
    *mem_bytes = 0;
    return ERR_UNSUPPORTED;
}

int gpu_model_new(const struct gpu_model_desc *d, struct gpu_model **out) {
    (void)d;
    *out = NULL;
    log_error("this dspark was built without CUDA");
    log_hint("rebuild with `make CUDA=1` on a machine with nvcc, or use the CPU");
    return ERR_UNSUPPORTED;
}

void gpu_model_free(struct gpu_model *g) {
    (void)g;
}

int gpu_kv_new(struct gpu_model *g, int cap, struct gpu_kv **out) {
    (void)g, (void)cap;
    *out = NULL;
    return ERR_UNSUPPORTED;
}

void gpu_kv_free(struct gpu_kv *kv) {
    (void)kv;
}

int gpu_kv_new_shared(struct gpu_model *g, int cap, const struct gpu_kv *base, int nb,
                      struct gpu_kv **out) {
    (void)g, (void)cap, (void)base, (void)nb;
    *out = NULL;
    return ERR_UNSUPPORTED;
}

int gpu_kv_copy(struct gpu_kv *dst, const struct gpu_kv *src, int from, int n, int heads, int D) {
    (void)dst, (void)src, (void)from, (void)n, (void)heads, (void)D;
    return ERR_UNSUPPORTED;
}

int gpu_kv_unshare(struct gpu_kv *kv, int n, int heads, int D) {
    (void)kv, (void)n, (void)heads, (void)D;
    return ERR_UNSUPPORTED;
}

int gpu_kv_export(const struct gpu_kv *kv, int n, int heads, int D, float *out) {
    (void)kv, (void)n, (void)heads, (void)D, (void)out;
    return ERR_UNSUPPORTED;
}

int gpu_kv_import(struct gpu_kv *kv, const float *in, int n_in, int n, int heads, int D) {
    (void)kv, (void)in, (void)n_in, (void)n, (void)heads, (void)D;
    return ERR_UNSUPPORTED;
}

int gpu_kv_grow(struct gpu_kv *kv, int cap, int len, int heads, int D) {
    (void)kv, (void)cap, (void)len, (void)heads, (void)D;
    return ERR_UNSUPPORTED;
}

int gpu_kv_shrink(struct gpu_kv *kv, int cap, int heads, int D) {
    (void)kv, (void)cap, (void)heads, (void)D;
    return ERR_UNSUPPORTED;
}

int gpu_forward(struct gpu_model *g, struct gpu_kv *kv, int pos0, const int32_t *ids, int n,
                float *logits, int all_rows) {
    (void)g, (void)kv, (void)pos0, (void)ids, (void)n, (void)logits, (void)all_rows;
    return ERR_UNSUPPORTED;
}

int gpu_forward_greedy(struct gpu_model *g, struct gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       int32_t *out_ids, int all_rows) {
    (void)g, (void)kv, (void)pos0, (void)ids, (void)n, (void)out_ids, (void)all_rows;
    return ERR_UNSUPPORTED;
}

int gpu_forward_batch(struct gpu_model *g, struct gpu_seq_io *seqs, int n) {
    (void)g, (void)seqs, (void)n;
    return ERR_UNSUPPORTED;
}

int gpu_logits_row(struct gpu_model *g, const struct gpu_sample_req *req, int row, float *out) {
    (void)g, (void)req, (void)row, (void)out;
    return ERR_UNSUPPORTED;
}

int gpu_ctx_append(struct gpu_model *g, struct gpu_kv *kv, int pos0, const float *fused, int n) {
    (void)g, (void)kv, (void)pos0, (void)fused, (void)n;
    return ERR_UNSUPPORTED;
}

int gpu_markov_bias(struct gpu_model *g, const int32_t *prev, int n, float *const *bias) {
    (void)g, (void)prev, (void)n, (void)bias;
    return ERR_UNSUPPORTED;
}

int gpu_set_taps(struct gpu_model *g, const int *layers, int n) {
    (void)g, (void)layers, (void)n;
    return ERR_UNSUPPORTED;
}

int gpu_profile(struct gpu_model *g, struct gpu_kv **kv, int nseq, int pos0, int n,
                struct gpu_op_time *out, int max) {
    (void)g, (void)kv, (void)nseq, (void)pos0, (void)n, (void)out, (void)max;
    return ERR_UNSUPPORTED;
}
#else
/* From cuda_runtime_api.h, which this C file is compiled without; cudaError_t is an enum whose
 * value 0 is cudaSuccess. */
int cudaDriverGetVersion(int *version);
int cudaRuntimeGetVersion(int *version);
int cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

int gpu_runtime_info(int *driver_version, int *runtime_version, size_t *mem_bytes) {
    size_t free_bytes = 0;
    *driver_version = *runtime_version = 0;
    *mem_bytes = 0;
    cudaDriverGetVersion(driver_version); /* known even when no device is usable */
    cudaRuntimeGetVersion(runtime_version);
    if (!gpu_available() || cudaMemGetInfo(&free_bytes, mem_bytes)) return ERR_IO;
    return OK;
}
#endif
