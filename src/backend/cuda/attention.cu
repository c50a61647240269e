/* backend/cuda/attention.cu: per-head RMSNorm and RoPE of the new q/k rows with the cache
 * append, and causal attention over the cache split into key ranges (flash-decoding).
 *
 * Attention: a block per (key range, kv head, row) serves the kv head's G query heads, so
 * each K/V row is read once per row of the pass; keys go through shared memory in tiles of
 * 32 with a running max. The ATT_SPLITS ranges of a row depend only on its own key count, and
 * the last block of a (row, kv head) merges them in range order, so a row's output is the
 * same bits whatever the number of rows in the pass. The merged rows go straight into the
 * output projection's B operand. */
#include "backend/cuda/cuda.cuh"

/* One block per (row, head slot): slots [0, nh) are query heads, [nh, nh + nkv) key heads
 * (whose block also appends the value row). */
__global__ void k_rope(const float *qkv, float *qout, const step_params *sp, const float *q_norm,
                       const float *k_norm, const float *inv_freq, int nh, int nkv, int D,
                       float eps, int layer) {
    pdl_wait();
    pdl_launch();
    __shared__ double red[128];
    int t = blockIdx.x, h = blockIdx.y, half = D / 2, i = threadIdx.x;
    int QD = nh * D, KD = nkv * D;
    bool isq = h < nh;
    const float *src = qkv + (size_t)t * (QD + 2 * KD) + (isq ? h * D : QD + (h - nh) * D);
    const float *nw = isq ? q_norm : k_norm;
    float a = 0, b = 0;
    if (i < half) a = __ldcg(src + i), b = __ldcg(src + i + half);
    if (nw) {
        red[i] = (double)a * a + (double)b * b;
        __syncthreads();
        for (int o = 64; o; o >>= 1) {
            if (i < o) red[i] += red[i + o];
            __syncthreads();
        }
        float inv = (float)(1.0 / sqrt(red[0] / D + (double)eps));
        if (i < half) a = nw[i] * (a * inv), b = nw[i + half] * (b * inv);
    }
    if (i >= half) return;
    int pos = sp->pos0 + t;
    float ang = (float)pos * inv_freq[i];
    float c = (float)cos((double)ang), s = (float)sin((double)ang);
    float ra = a * c - b * s, rb = b * c + a * s;
    if (isq) {
        float *o = qout + ((size_t)t * nh + h) * D;
        o[i] = ra, o[i + half] = rb;
        return;
    }
    int kvh = h - nh;
    size_t base = (((size_t)layer * nkv + kvh) * sp->cap + pos) * D;
    sp->kc[base + i] = ra, sp->kc[base + i + half] = rb;
    const float *vs = qkv + (size_t)t * (QD + 2 * KD) + QD + KD + kvh * D;
    sp->vc[base + i] = __ldcg(vs + i), sp->vc[base + i + half] = __ldcg(vs + i + half);
}

cudaError_t rope_launch(gpu_model *g, const dlayer *l, int layer, int T) {
    const gpu_model_desc *d = &g->d;
    return launch(k_rope, dim3(T, d->n_heads + d->n_kv_heads), dim3(128), 0, g->stream, g->qkv,
                  g->q, g->dsp, l->q_norm, l->k_norm, g->inv_freq, d->n_heads, d->n_kv_heads, g->D,
                  d->rms_eps, layer);
}

struct attn_args {
    const float *q; /* [T, nh, D] */
    const step_params *sp;
    uint16_t *xb_out; /* B operand of the output projection (K = QD) */
    float *acc, *ml;  /* per-range partials */
    unsigned *cnt;    /* [T][nkv] */
    int T, nh, nkv, G, D, KT_out, layer, window;
    float scale;
};

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}

/* rows [jb, jb + n) of K and V into a tile buffer (rows padded to D + 4 floats) */
__device__ __forceinline__ void load_tile(float *Ks, float *Vs, const float *K, const float *V,
                                          int jb, int n, int D) {
    const int DP = D + 4, q4 = D / 4;
    for (int i = threadIdx.x; i < n * q4; i += ATT_THREADS) {
        int r = i / q4, c = (i % q4) * 4;
        cp_async16(Ks + r * DP + c, K + (size_t)(jb + r) * D + c);
        cp_async16(Vs + r * DP + c, V + (size_t)(jb + r) * D + c);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

__global__ void __launch_bounds__(ATT_THREADS) k_attn(attn_args a) {
    pdl_wait();
    pdl_launch();
    extern __shared__ __align__(16) float sm[];
    const int D = a.D, G = a.G, DP = D + 4; /* padded rows: conflict-free float4 reads */
    float *qs = sm, *tiles = qs + G * D, *E = tiles + 4 * 32 * DP, *Mx = E + G * 32, *Ls = Mx + G,
          *Cr = Ls + G; /* tiles: [2 buffers][K, V][32][DP] */
    const int s = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int p = a.sp->pos0 + t;
    const int lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    const int per = ((p - lo + 1 + ATT_SPLITS - 1) / ATT_SPLITS + 31) & ~31;
    const int j0 = lo + s * per, j1 = min(p + 1, j0 + per);
    const size_t head = ((size_t)a.layer * a.nkv + kvh) * a.sp->cap * D;
    const float *K = a.sp->kc + head, *V = a.sp->vc + head;
    const int ntiles = j1 > j0 ? (j1 - j0 + 31) / 32 : 0;

    if (ntiles > 0) load_tile(tiles, tiles + 32 * DP, K, V, j0, min(32, j1 - j0), D);
    for (int i = tid; i < G * D; i += ATT_THREADS)
        qs[i] = __ldcg(a.q + ((size_t)t * a.nh + kvh * G + i / D) * D + i % D);
    for (int g = tid; g < G; g += ATT_THREADS) Mx[g] = -INFINITY, Ls[g] = 0.f;
    float acc[ATT_PAIRS];
#pragma unroll
    for (int i = 0; i < ATT_PAIRS; i++) acc[i] = 0.f;

    for (int it = 0; it < ntiles; it++) {
        int jb = j0 + it * 32, n = min(32, j1 - jb);
        const float *Ks = tiles + (it & 1) * 64 * DP, *Vs = Ks + 32 * DP;
        if (it + 1 < ntiles) { /* the next tile streams in while this one is used */
            float *Kn = tiles + ((it + 1) & 1) * 64 * DP;
            load_tile(Kn, Kn + 32 * DP, K, V, jb + 32, min(32, j1 - jb - 32), D);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        for (int pr = tid; pr < G * 32; pr += ATT_THREADS) { /* scores: warp = head, lane = key */
            int g = pr >> 5, j = pr & 31;
            float sc = -INFINITY;
            if (j < n) {
                const float *qv = qs + g * D, *kv = Ks + j * DP;
                float d0 = 0.f;
                for (int c = 0; c < D; c += 4) {
                    float4 kk = *(const float4 *)(kv + c), qq = *(const float4 *)(qv + c);
                    d0 = fmaf(qq.x, kk.x, d0), d0 = fmaf(qq.y, kk.y, d0);
                    d0 = fmaf(qq.z, kk.z, d0), d0 = fmaf(qq.w, kk.w, d0);
                }
                sc = d0 * a.scale;
            }
            E[pr] = sc;
        }
        __syncthreads();
        for (int g = warp; g < G;
             g += ATT_THREADS / 32) { /* running max and sum, a warp per head */
            float sc = E[g * 32 + lane], mx = sc;
            for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float mold = Mx[g], mnew = fmaxf(mold, mx);
            float e = lane < n ? expf(sc - mnew) : 0.f, sum = e;
            for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            float corr = expf(mold - mnew);
            E[g * 32 + lane] = e;
            __syncwarp();
            if (lane == 0) Mx[g] = mnew, Ls[g] = Ls[g] * corr + sum, Cr[g] = corr;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_PAIRS; i++) { /* acc = acc * corr + sum_j e_j v_j, j in order */
            int pi = tid + ATT_THREADS * i;
            if (pi < G * D) {
                int g = pi / D, dd = pi % D;
                float v = acc[i] * Cr[g];
                const float *e = E + g * 32;
                for (int j = 0; j < n; j++) v = fmaf(e[j], Vs[j * DP + dd], v);
                acc[i] = v;
            }
        }
        __syncthreads(); /* this buffer is refilled two tiles on */
    }
    __syncthreads();
    /* this range's partials */
    const size_t row = (size_t)t * a.nh + kvh * G; /* first head of the group */
#pragma unroll
    for (int i = 0; i < ATT_PAIRS; i++) {
        int pi = tid + ATT_THREADS * i;
        if (pi < G * D) {
            int g = pi / D, dd = pi % D;
            a.acc[((row + g) * ATT_SPLITS + s) * D + dd] = acc[i];
        }
    }
    for (int g = tid; g < G; g += ATT_THREADS) {
        a.ml[((row + g) * ATT_SPLITS + s) * 2] = Mx[g];
        a.ml[((row + g) * ATT_SPLITS + s) * 2 + 1] = Ls[g];
    }
    __shared__ int last;
    __threadfence();
    __syncthreads();
    unsigned *cnt = a.cnt + (size_t)t * a.nkv + kvh;
    if (tid == 0) last = atomicAdd(cnt, 1u) == ATT_SPLITS - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (tid == 0) *cnt = 0;
    /* merge the ranges in order: each range's weight once per head, then every output adds
     * its ATT_SPLITS partials (loaded together) */
    float *W = tiles, *Lr = W + G * ATT_SPLITS, *Lsum = Lr + G * ATT_SPLITS;
    for (int i = tid; i < G * ATT_SPLITS; i += ATT_THREADS) {
        const float *ml = a.ml + ((row + i / ATT_SPLITS) * ATT_SPLITS + i % ATT_SPLITS) * 2;
        W[i] = __ldcg(ml), Lr[i] = __ldcg(ml + 1);
    }
    __syncthreads();
    for (int g = tid; g < G; g += ATT_THREADS) {
        float M = -INFINITY, L = 0.f;
        for (int r = 0; r < ATT_SPLITS; r++) M = fmaxf(M, W[g * ATT_SPLITS + r]);
        for (int r = 0; r < ATT_SPLITS; r++) {
            float w = expf(W[g * ATT_SPLITS + r] - M);
            W[g * ATT_SPLITS + r] = w;
            L = fmaf(Lr[g * ATT_SPLITS + r], w, L);
        }
        Lsum[g] = L;
    }
    __syncthreads();
    for (int pi = tid; pi < G * D; pi += ATT_THREADS) {
        int g = pi / D, dd = pi % D;
        const float *src = a.acc + (row + g) * ATT_SPLITS * D + dd;
        float v[ATT_SPLITS], o = 0.f;
#pragma unroll
        for (int r = 0; r < ATT_SPLITS; r++) v[r] = __ldcg(src + r * D);
#pragma unroll
        for (int r = 0; r < ATT_SPLITS; r++) o = fmaf(v[r], W[g * ATT_SPLITS + r], o);
        xb_put(a.xb_out, a.T, a.KT_out, t, (kvh * G + g) * D + dd, o / Lsum[g]);
    }
}

static size_t attn_smem(int G, int D) {
    return sizeof(float) * ((size_t)G * D + 4 * 32 * (size_t)(D + 4) + (size_t)G * 32 + 3 * G);
}

cudaError_t attn_launch(gpu_model *g, int layer, int T) {
    const gpu_model_desc *d = &g->d;
    attn_args a;
    a.q = g->q, a.sp = g->dsp, a.xb_out = g->xo, a.acc = g->att_acc, a.ml = g->att_ml;
    a.cnt = g->cnt + CNT_ATT;
    a.T = T, a.nh = d->n_heads, a.nkv = d->n_kv_heads, a.G = g->G, a.D = g->D;
    a.KT_out = g->KT_QD, a.layer = layer, a.window = d->window;
    a.scale = 1.0f / sqrtf((float)g->D);
    size_t smem = attn_smem(g->G, g->D);
    return launch(k_attn, dim3(ATT_SPLITS, d->n_kv_heads, T), dim3(ATT_THREADS), smem, g->stream,
                  a);
}

int attn_init(int G, int D) {
    CK(cudaFuncSetAttribute(k_attn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)attn_smem(G, D)));
    return OK;
}
