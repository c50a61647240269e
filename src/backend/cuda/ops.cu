/* backend/cuda/ops.cu: the small kernels around the matmuls: embedding rows, RMSNorm into a
 * matmul's B operand, SwiGLU for matmuls without the fused epilogue, float rows into a B
 * operand and back, and the greedy argmax
 * (first index of the largest logit, NaN never chosen, 0 when no logit beats -inf: what
 * the CPU's sample_greedy picks). Each row is reduced in a fixed order. */
#include "backend/cuda/cuda.cuh"

__global__ void k_embed(float *x, const step_params *sp, const void *w, int dt, int H, int T) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * H) return;
    int t = (int)(i / H), c = (int)(i % H);
    x[i] = load_w(w, dt, (size_t)sp->ids[t] * H + c);
}

cudaError_t embed_launch(gpu_model *g, int T) {
    return launch(k_embed, dim3(cdiv((size_t)T * g->H, 256)), dim3(256), 0, g->stream, g->x, g->dsp,
                  g->embed, g->embed_dtype, g->H, T);
}

/* taps[t][slot] = x[t] for the T rows of the pass (n_taps slots per row) */
__global__ void k_tap(float *taps, const float *x, int slot, int n_taps, int H, int T) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * H) return;
    int t = (int)(i / H), c = (int)(i % H);
    taps[((size_t)t * n_taps + slot) * H + c] = __ldcg(x + i);
}

cudaError_t tap_launch(gpu_model *g, int slot, int T) {
    return launch(k_tap, dim3(cdiv((size_t)T * g->H, 256)), dim3(256), 0, g->stream, g->taps, g->x,
                  slot, g->n_taps, g->H, T);
}

__global__ void __launch_bounds__(256) k_norm_split(uint16_t *xb, int KT, const float *x, int row0,
                                                    const int32_t *sel, const float *w, int H,
                                                    float eps, int terms) {
    pdl_wait();
    pdl_launch();
    __shared__ double red[256];
    const int row = sel ? sel[blockIdx.x] : row0 + (int)blockIdx.x;
    norm_row(x + (size_t)row * H, w, H, eps, xb, gridDim.x, KT, blockIdx.x, red, terms);
}

/* xb row r of an n-row chunk = x[row0 + r] / rms * w */
cudaError_t norm_launch(gpu_model *g, uint16_t *xb, const float *w, int row0, int n) {
    return launch(k_norm_split, dim3(n), dim3(256), 0, g->stream, xb, g->KT_H, g->x, row0,
                  (const int32_t *)NULL, w, g->H, g->d.rms_eps, g->terms);
}

/* Deferred RMSNorm of the chunk's rows: block (row, 128-column group) writes w * x of its
 * columns into xb and the group's sum of squares (ss_group, as the matmul epilogues add it) */
__global__ void __launch_bounds__(128) k_prescale(uint16_t *xb, int KT, const float *x,
                                                  const float *w, int H, double *ss, int ng,
                                                  int terms) {
    pdl_wait();
    pdl_launch();
    __shared__ double chunk[4];
    const int t = blockIdx.x, g = blockIdx.y, m = g * 128 + threadIdx.x;
    float v = m < H ? __ldcg(x + (size_t)t * H + m) : 0.f;
    if (m < H) xb_put(xb, gridDim.x, KT, t, m, w[m] * v, terms);
    double s = ss_chunk(v);
    if ((threadIdx.x & 31) == 0) chunk[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) ss[(size_t)t * ng + g] = ss_group(chunk);
}

cudaError_t prescale_launch(gpu_model *g, uint16_t *xb, const float *w, double *ss, int n) {
    return launch(k_prescale, dim3(n, g->n_ssg), dim3(128), 0, g->stream, xb, g->KT_H, g->x, w,
                  g->H, ss, g->n_ssg, g->terms);
}

/* xb row r of an n-row chunk = x[sel[r]] / rms * w (sel in device memory) */
cudaError_t norm_sel_launch(gpu_model *g, uint16_t *xb, const float *w, const int32_t *sel, int n) {
    return launch(k_norm_split, dim3(n), dim3(256), 0, g->stream, xb, g->KT_H, g->x, 0, sel, w,
                  g->H, g->d.rms_eps, g->terms);
}

__global__ void k_swiglu_split(uint16_t *xb, int KT, const float *gu, int I, int T, int terms) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * I) return;
    int t = (int)(i / I), j = (int)(i % I);
    float gv = __ldcg(gu + (size_t)t * 2 * I + j), uv = __ldcg(gu + (size_t)t * 2 * I + I + j);
    xb_put(xb, T, KT, t, j, gv / (1.0f + expf(-gv)) * uv, terms);
}

cudaError_t swiglu_launch(gpu_model *g, int T) {
    return launch(k_swiglu_split, dim3(cdiv((size_t)T * g->I, 256)), dim3(256), 0, g->stream, g->xh,
                  g->KT_I, g->gu, g->I, T, g->terms);
}

/* b beats a: larger, or equal at a smaller index; index -1 holds nothing */
__device__ __forceinline__ bool beats(float bv, int bi, float av, int ai) {
    return bi >= 0 && (ai < 0 || bv > av || (bv == av && bi < ai));
}

__global__ void k_argmax_part(const float *logits, int V, float *pv, int *pi) {
    pdl_wait();
    pdl_launch();
    __shared__ float sv[256];
    __shared__ int si[256];
    const float *lr = logits + (size_t)blockIdx.y * V;
    int per = (V + ARGMAX_BLOCKS - 1) / ARGMAX_BLOCKS, lo = blockIdx.x * per;
    int hi = min(V, lo + per);
    float best = -INFINITY;
    int at = -1;
    for (int i = lo + threadIdx.x; i < hi; i += 256) {
        float v = __ldcg(lr + i);
        if (v > best) best = v, at = i;
    }
    sv[threadIdx.x] = best, si[threadIdx.x] = at;
    __syncthreads();
    for (int o = 128; o; o >>= 1) {
        int a = threadIdx.x;
        if (a < o && beats(sv[a + o], si[a + o], sv[a], si[a]))
            sv[a] = sv[a + o], si[a] = si[a + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        pv[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = sv[0];
        pi[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = si[0];
    }
}

__global__ void k_argmax_final(const float *pv, const int *pi, int32_t *out, int n) {
    pdl_wait();
    pdl_launch();
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float best = -INFINITY;
    int at = -1;
    for (int b = 0; b < ARGMAX_BLOCKS; b++) {
        float v = __ldcg(pv + t * ARGMAX_BLOCKS + b);
        int i = __ldcg(pi + t * ARGMAX_BLOCKS + b);
        if (beats(v, i, best, at)) best = v, at = i;
    }
    out[t] = at >= 0 ? at : 0;
}

cudaError_t argmax_launch(gpu_model *g, int n) {
    cudaError_t e = launch(k_argmax_part, dim3(ARGMAX_BLOCKS, n), dim3(256), 0, g->stream,
                           g->logits, g->V, g->amax_v, g->amax_i);
    if (e != cudaSuccess) return e;
    return launch(k_argmax_final, dim3(cdiv(n, 32)), dim3(32), 0, g->stream, g->amax_v, g->amax_i,
                  g->out_ids, n);
}

/* xb rows [0, T) (K columns, KT k-tiles) = the float rows x[T, K], and back (exactly where
 * three terms add up to the value; with one, rounded to bf16) */
__global__ void k_split(uint16_t *xb, const float *x, int K, int KT, int T, int terms) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * K) return;
    xb_put(xb, T, KT, (int)(i / K), (int)(i % K), __ldcg(x + i), terms);
}

cudaError_t split_launch(gpu_model *g, uint16_t *xb, const float *x, int K, int KT, int T) {
    return launch(k_split, dim3(cdiv((size_t)T * K, 256)), dim3(256), 0, g->stream, xb, x, K, KT,
                  T, g->terms);
}

__global__ void k_unsplit(float *x, const uint16_t *xb, int K, int KT, int T, int terms) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * K) return;
    x[i] = xb_get(xb, T, KT, (int)(i / K), (int)(i % K), terms);
}

cudaError_t unsplit_launch(gpu_model *g, float *x, const uint16_t *xb, int K, int KT, int T) {
    return launch(k_unsplit, dim3(cdiv((size_t)T * K, 256)), dim3(256), 0, g->stream, x, xb, K, KT,
                  T, g->terms);
}

__global__ void k_gather(uint16_t *xb, int KT, const void *w, int dt, int r, const int32_t *ids,
                         int n, int terms) {
    pdl_wait();
    pdl_launch();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * r) return;
    int t = (int)(i / r), k = (int)(i % r);
    xb_put(xb, n, KT, t, k, load_w(w, dt, (size_t)ids[t] * r + k), terms);
}

cudaError_t gather_launch(gpu_model *g, uint16_t *xb, const void *w, int dt, int r,
                          const int32_t *ids, int n) {
    return launch(k_gather, dim3(cdiv((size_t)n * r, 256)), dim3(256), 0, g->stream, xb,
                  (r + 15) / 16, w, dt, r, ids, n, g->terms);
}
