/* backend/cuda/attention.cuh: what the attention kernels (attention.cu) and the merge of their
 * span partials (merge.cu) share: a launch's arguments, a row's lowest key, the kernels'
 * shared-memory limit, and the merge's entry points. */
#ifndef DSPARK_BACKEND_CUDA_ATTENTION_CUH
#define DSPARK_BACKEND_CUDA_ATTENTION_CUH

#include "backend/cuda/cuda.cuh"

struct attn_args {
    const float *q; /* [T, nh, D] */
    const step_params *sp;
    uint16_t *xb_out; /* B operand of the output projection (K = QD) */
    float *acc, *ml;  /* span partials: [att_rows][nh][spans][D] and [..][2] */
    int T, r0, nr;    /* the chunk's rows (xb layout); this launch's rows [r0, r0 + nr) */
    int nh, nkv, G, KT_out, layer, window, spans;
    int early; /* the merge lets the output projection start (and load weights) at once */
    int early_kv; /* one buffer: the next item's keys and queries load during this one's
                   * softmax and values (DSPARK_GPU_ATT_EARLY_KV) */
    int pre_kv;   /* the first item's keys and values of earlier positions are requested
                   * before the wait on the previous kernel (DSPARK_GPU_ATT_PRE_KV) */
    float scale;
    int terms;    /* of xb_out (gpu_model.terms) */
    int merge_ch; /* k_attn_merge_dims: spans a chunk, 1..MERGE_CH */
};

/* the lowest position a row at position p sees (0 without a sliding window) */
__host__ __device__ __forceinline__ int att_lo(int p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* raises kernel k's dynamic shared memory limit to bytes for the whole process (never lowers
 * it); ERR_UNSUPPORTED when the CUDA call fails */
int raise_smem(const void *k, size_t bytes);

/* merge.cu: the shared memory the merge needs for rows of `spans` spans; its limits raised for
 * that many (with most a block can have: the merge by dims is turned off where it does not
 * fit); the merge of launch a's n rows after its attention kernel */
size_t merge_smem(int spans);
int merge_init(gpu_model *g, int spans, size_t most);
cudaError_t merge_launch(gpu_model *g, attn_args a, int n);

#endif
