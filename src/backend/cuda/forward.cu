/* backend/cuda/forward.cu: the decoder forward on an NVIDIA GPU (see backend/gpu.h).
 * Float32 activations; weights stay in their stored type and are widened in registers.
 * Every kernel computes a row's result in a fixed order that does not depend on how many
 * rows share the launch, so verify rows equal single steps bit for bit, as on the CPU.
 * Shapes: T rows, H hidden, D head_dim, QD = n_heads*D, KD = n_kv*D, I ffn, V vocab. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/gpu.h"
#include "base/err.h"
#include "base/log.h"
}

#define ROWS 256 /* rows per pass */

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            log_error("CUDA: %s (%s:%d)", cudaGetErrorString(e_), __FILE__, __LINE__);            \
            return ERR_UNSUPPORTED;                                                                \
        }                                                                                          \
    } while (0)

struct dweight {
    const void *p;
    int dtype; /* enum dtype */
};

struct dlayer {
    dweight wq, wk, wv, wo, wg, wu, wd;
    float *bq, *bk, *bv, *attn_norm, *ffn_norm, *q_norm, *k_norm;
};

struct gpu_model {
    gpu_model_desc d;
    dweight embed, lm_head;
    float *final_norm, *inv_freq;
    dlayer *layers;
    float *x, *xn, *q, *k, *v, *att, *tmp, *g, *u, *logits;
    int32_t *ids;
    void **allocs;
    int n_allocs, cap_allocs;
};

struct gpu_kv {
    float *k, *v; /* [n_layers][n_kv][cap][D] */
    int cap;
};

/* ---- kernels ---- */

__device__ __forceinline__ float load_w(const void *p, int dt, size_t i) {
    if (dt == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* 8 consecutive weights from a 16-byte aligned (bf16/f16) or 32-byte (f32) address */
__device__ __forceinline__ void load_w8(const void *p, int dt, size_t i, float w[8]) {
    if (dt == DTYPE_BF16 || dt == DTYPE_F16) {
        uint4 raw = *(const uint4 *)((const uint16_t *)p + i);
        const uint16_t *h = (const uint16_t *)&raw;
        for (int j = 0; j < 8; j++) {
            if (dt == DTYPE_BF16) w[j] = __uint_as_float((uint32_t)h[j] << 16);
            else w[j] = __half2float(__ushort_as_half(h[j]));
        }
    } else {
        float4 a = *(const float4 *)((const float *)p + i), b = *(const float4 *)((const float *)p + i + 4);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    }
}

#define RB 8 /* rows per register block */

/* y[n, m] = x[n, k] · W[m, k]^T (+ bias): one warp per output column j, weights read once per
 * block of RB rows; each (row, j) sums in the same order whatever n is. */
__global__ void k_matmul(float *y, const float *x, const void *w, int dt, const float *bias,
                         int n, int k, int m) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= m) return;
    size_t row = (size_t)warp * k;
    int vec = (k % 8) == 0;
    for (int r0 = 0; r0 < n; r0 += RB) {
        int nr = n - r0 < RB ? n - r0 : RB;
        float acc[RB];
        for (int r = 0; r < RB; r++) acc[r] = 0.f;
        if (vec) {
            for (int i = lane * 8; i < k; i += 32 * 8) {
                float wv[8];
                load_w8(w, dt, row + i, wv);
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    if (r < nr) {
                        const float *xr = x + (size_t)(r0 + r) * k + i;
                        float4 a = *(const float4 *)xr, b = *(const float4 *)(xr + 4);
                        float s = acc[r];
                        s = fmaf(wv[0], a.x, s), s = fmaf(wv[1], a.y, s);
                        s = fmaf(wv[2], a.z, s), s = fmaf(wv[3], a.w, s);
                        s = fmaf(wv[4], b.x, s), s = fmaf(wv[5], b.y, s);
                        s = fmaf(wv[6], b.z, s), s = fmaf(wv[7], b.w, s);
                        acc[r] = s;
                    }
                }
            }
        } else {
            for (int i = lane; i < k; i += 32) {
                float wi = load_w(w, dt, row + i);
#pragma unroll
                for (int r = 0; r < RB; r++)
                    if (r < nr) acc[r] = fmaf(wi, x[(size_t)(r0 + r) * k + i], acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            float s = acc[r];
            for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0 && r < nr) y[(size_t)(r0 + r) * m + warp] = s + (bias ? bias[warp] : 0.f);
        }
    }
}

/* y = x / sqrt(mean(x^2) + eps) * w, one block per row; a fixed tree keeps it deterministic */
__global__ void k_rmsnorm(float *y, const float *x, const float *w, int d, float eps) {
    __shared__ float red[256];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    float s = 0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += xr[i] * xr[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    float inv = rsqrtf(red[0] / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = w[i] * (xr[i] * inv);
}

__global__ void k_embed(float *x, const int32_t *ids, const void *w, int dt, int H, int T) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * H) return;
    int t = (int)(i / H), c = (int)(i % H);
    x[i] = load_w(w, dt, (size_t)ids[t] * H + c);
}

__global__ void k_rope(float *x, int T, int nh, int D, int pos0, const float *inv_freq) {
    int half = D / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nh * half) return;
    int p = (int)(i % half), h = (int)((i / half) % nh), t = (int)(i / ((size_t)half * nh));
    float ang = (float)(pos0 + t) * inv_freq[p];
    float c = (float)cos((double)ang), s = (float)sin((double)ang);
    float *xh = x + ((size_t)t * nh + h) * D;
    float a = xh[p], b = xh[p + half];
    xh[p] = a * c - b * s;
    xh[p + half] = b * c + a * s;
}

__global__ void k_kv_store(float *kc, float *vc, const float *k, const float *v, int T, int nkv,
                           int D, int cap, int pos0) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * nkv * D) return;
    int d = (int)(i % D), h = (int)((i / D) % nkv), t = (int)(i / ((size_t)D * nkv));
    size_t dst = ((size_t)h * cap + pos0 + t) * D + d;
    kc[dst] = k[i];
    vc[dst] = v[i];
}

/* Causal attention, one block of 128 threads per (row, head): scores in tiles of 128 keys
 * (one thread per key), max over all, then the weighted sum of V, tile by tile, in key order. */
__global__ void k_attention(float *out, const float *q, const float *kc, const float *vc, int nh,
                            int nkv, int D, int cap, int pos0, int window, float scale) {
    extern __shared__ float sm[]; /* q[D], e[128], red[128] */
    float *qs = sm, *e = sm + D, *red = e + 128;
    int t = blockIdx.x / nh, h = blockIdx.x % nh, kvh = h / (nh / nkv);
    int p = pos0 + t, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const float *qr = q + ((size_t)t * nh + h) * D;
    const float *K = kc + (size_t)kvh * cap * D, *Vv = vc + (size_t)kvh * cap * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = qr[d];
    __syncthreads();
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j <= p; j += blockDim.x) {
        float s = 0;
        for (int d = 0; d < D; d++) s = fmaf(qs[d], K[(size_t)j * D + d], s);
        mx = fmaxf(mx, s * scale);
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int o = 64; o; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + o]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float acc0 = 0, acc1 = 0, sum = 0; /* thread d accumulates dims d and d + 128 */
    for (int j0 = lo; j0 <= p; j0 += 128) {
        int j = j0 + threadIdx.x;
        float ej = 0;
        if (j <= p) {
            float s = 0;
            for (int d = 0; d < D; d++) s = fmaf(qs[d], K[(size_t)j * D + d], s);
            ej = expf(s * scale - mx);
        }
        e[threadIdx.x] = ej;
        __syncthreads();
        int nk = p - j0 + 1 < 128 ? p - j0 + 1 : 128;
        for (int jj = 0; jj < nk; jj++) {
            float w = e[jj];
            sum += w;
            const float *vr = Vv + (size_t)(j0 + jj) * D;
            if ((int)threadIdx.x < D) acc0 = fmaf(w, vr[threadIdx.x], acc0);
            if ((int)threadIdx.x + 128 < D) acc1 = fmaf(w, vr[threadIdx.x + 128], acc1);
        }
        __syncthreads();
    }
    float *o = out + ((size_t)t * nh + h) * D;
    if ((int)threadIdx.x < D) o[threadIdx.x] = acc0 / sum;
    if ((int)threadIdx.x + 128 < D) o[threadIdx.x + 128] = acc1 / sum;
}

__global__ void k_silu_mul(float *g, const float *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = g[i] / (1.f + expf(-g[i])) * u[i];
}

__global__ void k_add(float *x, const float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

/* ---- host side ---- */

static unsigned blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

static void matmul(float *y, const float *x, dweight w, const float *b, int n, int k, int m) {
    k_matmul<<<blocks((size_t)m * 32, 256), 256>>>(y, x, w.p, w.dtype, b, n, k, m);
}

static int dev_alloc(gpu_model *g, void **p, size_t bytes) {
    if (g->n_allocs == g->cap_allocs) {
        int c = g->cap_allocs ? g->cap_allocs * 2 : 64;
        void **a = (void **)realloc(g->allocs, sizeof(void *) * (size_t)c);
        if (!a) return ERR_NOMEM;
        g->allocs = a, g->cap_allocs = c;
    }
    CK(cudaMalloc(p, bytes ? bytes : 4));
    g->allocs[g->n_allocs++] = *p;
    return OK;
}

static int upload(gpu_model *g, const void *src, size_t bytes, void **dst) {
    int rc = dev_alloc(g, dst, bytes);
    if (rc) return rc;
    CK(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return OK;
}

static int up_w(gpu_model *g, const gpu_weight *w, dweight *out) {
    void *p;
    int rc = upload(g, w->data, (size_t)w->rows * (size_t)w->cols * dtype_size(w->dtype), &p);
    out->p = p, out->dtype = w->dtype;
    return rc;
}

static int up_v(gpu_model *g, const float *src, size_t n, float **out) {
    *out = NULL;
    if (!src) return OK;
    return upload(g, src, n * sizeof(float), (void **)out);
}

extern "C" int gpu_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" const char *gpu_device_name(void) {
    static char name[256];
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "none";
    snprintf(name, sizeof name, "%s", p.name);
    return name;
}

extern "C" void gpu_model_free(gpu_model *g) {
    if (!g) return;
    for (int i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
    free(g->allocs);
    free(g->layers);
    free(g);
}

extern "C" int gpu_model_new(const gpu_model_desc *d, gpu_model **out) {
    *out = NULL;
    if (!gpu_available()) {
        log_error("no CUDA device found");
        return ERR_UNSUPPORTED;
    }
    gpu_model *g = (gpu_model *)calloc(1, sizeof *g);
    if (!g) return ERR_NOMEM;
    g->d = *d;
    g->layers = (dlayer *)calloc((size_t)d->n_layers, sizeof *g->layers);
    int H = d->hidden, D = d->head_dim, QD = d->n_heads * D, KD = d->n_kv_heads * D;
    int rc = g->layers ? OK : ERR_NOMEM;
    if (!rc) rc = up_w(g, &d->embed, &g->embed);
    if (!rc) rc = d->lm_head.data == d->embed.data ? (g->lm_head = g->embed, OK)
                                                   : up_w(g, &d->lm_head, &g->lm_head);
    if (!rc) rc = up_v(g, d->final_norm, (size_t)H, &g->final_norm);
    if (!rc) rc = up_v(g, d->inv_freq, (size_t)D / 2, &g->inv_freq);
    for (int i = 0; !rc && i < d->n_layers; i++) {
        const gpu_layer_desc *s = &d->layers[i];
        dlayer *l = &g->layers[i];
        if ((rc = up_w(g, &s->wq, &l->wq)) || (rc = up_w(g, &s->wk, &l->wk)) ||
            (rc = up_w(g, &s->wv, &l->wv)) || (rc = up_w(g, &s->wo, &l->wo)) ||
            (rc = up_w(g, &s->wg, &l->wg)) || (rc = up_w(g, &s->wu, &l->wu)) ||
            (rc = up_w(g, &s->wd, &l->wd)) || (rc = up_v(g, s->bq, (size_t)QD, &l->bq)) ||
            (rc = up_v(g, s->bk, (size_t)KD, &l->bk)) || (rc = up_v(g, s->bv, (size_t)KD, &l->bv)) ||
            (rc = up_v(g, s->attn_norm, (size_t)H, &l->attn_norm)) ||
            (rc = up_v(g, s->ffn_norm, (size_t)H, &l->ffn_norm)) ||
            (rc = up_v(g, s->q_norm, (size_t)D, &l->q_norm)) ||
            (rc = up_v(g, s->k_norm, (size_t)D, &l->k_norm)))
            break;
    }
    size_t wide = (size_t)(QD > H ? QD : H);
    if (!rc) rc = dev_alloc(g, (void **)&g->x, sizeof(float) * ROWS * H);
    if (!rc) rc = dev_alloc(g, (void **)&g->xn, sizeof(float) * ROWS * H);
    if (!rc) rc = dev_alloc(g, (void **)&g->q, sizeof(float) * ROWS * QD);
    if (!rc) rc = dev_alloc(g, (void **)&g->k, sizeof(float) * ROWS * KD);
    if (!rc) rc = dev_alloc(g, (void **)&g->v, sizeof(float) * ROWS * KD);
    if (!rc) rc = dev_alloc(g, (void **)&g->att, sizeof(float) * ROWS * QD);
    if (!rc) rc = dev_alloc(g, (void **)&g->tmp, sizeof(float) * ROWS * wide);
    if (!rc) rc = dev_alloc(g, (void **)&g->g, sizeof(float) * ROWS * d->ffn);
    if (!rc) rc = dev_alloc(g, (void **)&g->u, sizeof(float) * ROWS * d->ffn);
    if (!rc) rc = dev_alloc(g, (void **)&g->logits, sizeof(float) * ROWS * (size_t)d->vocab);
    if (!rc) rc = dev_alloc(g, (void **)&g->ids, sizeof(int32_t) * ROWS);
    if (rc) {
        gpu_model_free(g);
        return rc;
    }
    *out = g;
    return OK;
}

extern "C" int gpu_kv_new(gpu_model *g, int cap, gpu_kv **out) {
    *out = NULL;
    gpu_kv *kv = (gpu_kv *)calloc(1, sizeof *kv);
    if (!kv) return ERR_NOMEM;
    size_t n = (size_t)g->d.n_layers * g->d.n_kv_heads * (size_t)cap * g->d.head_dim;
    if (cudaMalloc(&kv->k, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&kv->v, n * sizeof(float)) != cudaSuccess) {
        log_error("cannot allocate a GPU KV cache of %d positions (%.1f MB)", cap,
                  2.0 * (double)n * 4 / 1e6);
        gpu_kv_free(kv);
        return ERR_NOMEM;
    }
    kv->cap = cap;
    *out = kv;
    return OK;
}

extern "C" void gpu_kv_free(gpu_kv *kv) {
    if (!kv) return;
    if (kv->k) cudaFree(kv->k);
    if (kv->v) cudaFree(kv->v);
    free(kv);
}

static void layer(gpu_model *g, gpu_kv *kv, int li, int pos0, int T) {
    const gpu_model_desc *d = &g->d;
    const dlayer *l = &g->layers[li];
    int H = d->hidden, D = d->head_dim, QD = d->n_heads * D, KD = d->n_kv_heads * D, I = d->ffn;
    k_rmsnorm<<<T, 256>>>(g->xn, g->x, l->attn_norm, H, d->rms_eps);
    matmul(g->q, g->xn, l->wq, l->bq, T, H, QD);
    matmul(g->k, g->xn, l->wk, l->bk, T, H, KD);
    matmul(g->v, g->xn, l->wv, l->bv, T, H, KD);
    if (l->q_norm) {
        k_rmsnorm<<<T * d->n_heads, 64>>>(g->q, g->q, l->q_norm, D, d->rms_eps);
        k_rmsnorm<<<T * d->n_kv_heads, 64>>>(g->k, g->k, l->k_norm, D, d->rms_eps);
    }
    k_rope<<<blocks((size_t)T * d->n_heads * D / 2, 256), 256>>>(g->q, T, d->n_heads, D, pos0,
                                                                 g->inv_freq);
    k_rope<<<blocks((size_t)T * d->n_kv_heads * D / 2, 256), 256>>>(g->k, T, d->n_kv_heads, D,
                                                                    pos0, g->inv_freq);
    size_t off = (size_t)li * d->n_kv_heads * kv->cap * D;
    k_kv_store<<<blocks((size_t)T * KD, 256), 256>>>(kv->k + off, kv->v + off, g->k, g->v, T,
                                                     d->n_kv_heads, D, kv->cap, pos0);
    size_t shm = sizeof(float) * (size_t)(D + 256);
    k_attention<<<T * d->n_heads, 128, shm>>>(g->att, g->q, kv->k + off, kv->v + off, d->n_heads,
                                               d->n_kv_heads, D, kv->cap, pos0, d->window,
                                               1.0f / sqrtf((float)D));
    matmul(g->tmp, g->att, l->wo, NULL, T, QD, H);
    k_add<<<blocks((size_t)T * H, 256), 256>>>(g->x, g->tmp, (size_t)T * H);
    k_rmsnorm<<<T, 256>>>(g->xn, g->x, l->ffn_norm, H, d->rms_eps);
    matmul(g->g, g->xn, l->wg, NULL, T, H, I);
    matmul(g->u, g->xn, l->wu, NULL, T, H, I);
    k_silu_mul<<<blocks((size_t)T * I, 256), 256>>>(g->g, g->u, (size_t)T * I);
    matmul(g->tmp, g->g, l->wd, NULL, T, I, H);
    k_add<<<blocks((size_t)T * H, 256), 256>>>(g->x, g->tmp, (size_t)T * H);
}

extern "C" int gpu_forward(gpu_model *g, gpu_kv *kv, int pos0, const int32_t *ids, int n,
                           float *logits, int all_rows) {
    const gpu_model_desc *d = &g->d;
    int H = d->hidden, V = d->vocab;
    if (pos0 + n > kv->cap) return ERR_FULL;
    for (int done = 0; done < n; done += ROWS) {
        int T = n - done < ROWS ? n - done : ROWS;
        CK(cudaMemcpy(g->ids, ids + done, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice));
        k_embed<<<blocks((size_t)T * H, 256), 256>>>(g->x, g->ids, g->embed.p, g->embed.dtype, H, T);
        for (int li = 0; li < d->n_layers; li++) layer(g, kv, li, pos0 + done, T);
        if (!logits || (!all_rows && done + T < n)) continue;
        int r0 = all_rows ? 0 : T - 1, nr = all_rows ? T : 1;
        k_rmsnorm<<<nr, 256>>>(g->xn, g->x + (size_t)r0 * H, g->final_norm, H, d->rms_eps);
        matmul(g->logits, g->xn, g->lm_head, NULL, nr, H, V);
        CK(cudaGetLastError());
        CK(cudaMemcpy(logits + (all_rows ? (size_t)done * V : 0), g->logits,
                      sizeof(float) * (size_t)nr * V, cudaMemcpyDeviceToHost));
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return OK;
}
