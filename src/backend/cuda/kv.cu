/* backend/cuda/kv.cu: the per-sequence KV caches in device memory (struct gpu_kv): own rows
 * of positions [nb, cap) beside a base cache's first nb positions when shared, copies between
 * caches and to and from the host (the prefix cache's export layout), growth, and the
 * attention scratch that follows the longest cache. */
#include "backend/cuda/cuda.cuh"

#include <stdlib.h>

/* Attention's per-span scratch for caches of cap positions: grown (to at least twice its
 * spans, at most the model's positions) when a cache needs more, so a model of long context
 * holds only what its caches use. The graphs hold the old buffers and are captured again. */
static int att_reserve(gpu_model *g, int cap) {
    int need = (cap - 1) / ATT_SPAN + 1, most = g->d.max_pos / ATT_SPAN + 1;
    if (need <= g->att_spans) return OK;
    int spans = 2 * g->att_spans > need ? 2 * g->att_spans : need;
    if (spans > most) spans = most;
    /* as many rows a launch as ATT_SCRATCH bytes hold (all rows of a pass at short contexts),
     * at least GPU_GROUP */
    size_t per_row = (size_t)g->d.n_heads * spans * (g->D + 2) * sizeof(float);
    size_t fit = ATT_SCRATCH / per_row / GPU_GROUP * GPU_GROUP;
    int att_rows = fit < GPU_GROUP || !g->att_wide ? GPU_GROUP
                   : fit > (size_t)g->rows          ? g->rows
                                                   : (int)fit;
    size_t rows = (size_t)att_rows * g->d.n_heads * spans;
    float *acc = NULL, *ml = NULL;
    if (cudaMalloc(&acc, sizeof(float) * rows * g->D) != cudaSuccess ||
        cudaMalloc(&ml, sizeof(float) * rows * 2) != cudaSuccess) {
        if (acc) cudaFree(acc);
        log_error("cannot allocate GPU attention scratch for %d positions (%.1f MB)",
                  spans * ATT_SPAN, (double)rows * (g->D + 2) * 4 / 1e6);
        return ERR_NOMEM;
    }
    if (cudaStreamSynchronize(g->stream) != cudaSuccess) {
        cudaFree(acc), cudaFree(ml);
        log_error("CUDA: %s", cudaGetErrorString(cudaGetLastError()));
        return ERR_UNSUPPORTED;
    }
    drop_graphs(g);
    if (g->att_acc) cudaFree(g->att_acc);
    if (g->att_ml) cudaFree(g->att_ml);
    g->att_acc = acc, g->att_ml = ml, g->att_spans = spans, g->att_rows = att_rows;
    return OK;
}

/* own rows for positions [nb, cap) of every (layer, kv head) */
static int alloc_own(gpu_kv *kv, int heads, int D) {
    size_t n = (size_t)heads * (size_t)(kv->cap - kv->nb > 0 ? kv->cap - kv->nb : 1) * D;
    if (cudaMalloc(&kv->k, n * kv_elem_bytes(kv->g)) != cudaSuccess ||
        cudaMalloc(&kv->v, n * kv_elem_bytes(kv->g)) != cudaSuccess) {
        if (kv->k) cudaFree(kv->k);
        kv->k = kv->v = NULL;
        log_error("cannot allocate a GPU KV cache of %d positions (%.1f MB)", kv->cap - kv->nb,
                  2.0 * (double)n * kv_elem_bytes(kv->g) / 1e6);
        return ERR_NOMEM;
    }
    return OK;
}

static int check_cap(gpu_model *g, int cap) {
    if (cap > g->d.max_pos) {
        log_error("a GPU KV cache of %d positions exceeds the model's %d", cap, g->d.max_pos);
        return ERR_ARG;
    }
    return att_reserve(g, cap);
}

/* A device cache of cap positions whose first nb are base's own rows (none without a base) */
static int new_kv(gpu_model *g, int cap, const gpu_kv *base, int nb, gpu_kv **out) {
    *out = NULL;
    int rc = check_cap(g, cap);
    if (rc) return rc;
    gpu_kv *kv = (gpu_kv *)calloc(1, sizeof *kv);
    if (!kv) return ERR_NOMEM;
    kv->cap = cap, kv->g = g;
    kv->base = base, kv->nb = nb;
    if ((rc = alloc_own(kv, g->d.n_layers * g->d.n_kv_heads, g->D))) {
        free(kv);
        return rc;
    }
    *out = kv;
    return OK;
}

extern "C" int gpu_kv_new(gpu_model *g, int cap, gpu_kv **out) {
    return new_kv(g, cap, NULL, 0, out);
}

extern "C" int gpu_kv_new_shared(gpu_model *g, int cap, const gpu_kv *base, int nb, gpu_kv **out) {
    *out = NULL;
    /* the same element type: a base's rows are read as the model's own */
    if (base->nb || nb > base->cap || nb > cap || base->g->kv16 != g->kv16) return ERR_ARG;
    return new_kv(g, cap, base, nb, out);
}

/* rows [0, n) of each of heads blocks of es-byte elements: from pitch sp to pitch dp */
static int copy_rows(void *dst, size_t dp, const void *src, size_t sp, int n, int heads, int D,
                     size_t es, cudaMemcpyKind kind) {
    if (n <= 0) return OK;
    CK(cudaMemcpy2D(dst, dp * es, src, sp * es, (size_t)n * D * es, (size_t)heads, kind));
    /* a copy within the device, or from pageable host memory, may return before its rows have
     * landed, and the passes run on a stream that does not wait for the default one: finish
     * it before the next pass reads the rows */
    if (kind != cudaMemcpyDeviceToHost) CK(cudaDeviceSynchronize());
    return OK;
}

/* Positions [from, n) of kv's K (v = 0) or V rows, from its base and its own rows, to dst in
 * the layout [heads][rows][D] with dp elements (kv's) a head, position j at row j - d0 (the
 * host, or another device cache's own rows). */
static int copy_out(void *dst, size_t dp, int d0, const gpu_kv *kv, int v, int from, int n,
                    int heads, int D, cudaMemcpyKind kind) {
    const size_t es = kv_elem_bytes(kv->g);
    int a = from, b = n < kv->nb ? n : kv->nb; /* [a, b) from the base */
    int rc = OK;
    if (b > a)
        rc = copy_rows((char *)dst + (size_t)(a - d0) * D * es, dp,
                       (const char *)(v ? kv->base->v : kv->base->k) + (size_t)a * D * es,
                       (size_t)kv->base->cap * D, b - a, heads, D, es, kind);
    if (rc) return rc;
    a = from > kv->nb ? from : kv->nb; /* [a, n) from the own rows */
    if (n <= a) return OK;
    return copy_rows((char *)dst + (size_t)(a - d0) * D * es, dp,
                     (const char *)(v ? kv->v : kv->k) + (size_t)(a - kv->nb) * D * es,
                     (size_t)(kv->cap - kv->nb) * D, n - a, heads, D, es, kind);
}

extern "C" int gpu_kv_copy(gpu_kv *dst, const gpu_kv *src, int from, int n, int heads, int D) {
    if (n > dst->cap || n > src->cap || from < dst->nb || dst->g->kv16 != src->g->kv16)
        return ERR_ARG;
    size_t dp = (size_t)(dst->cap - dst->nb) * D;
    int rc = copy_out(dst->k, dp, dst->nb, src, 0, from, n, heads, D, cudaMemcpyDeviceToDevice);
    return rc ? rc
              : copy_out(dst->v, dp, dst->nb, src, 1, from, n, heads, D, cudaMemcpyDeviceToDevice);
}

/* The export layout is float whatever the cache holds: bf16 rows come through a host buffer
 * (exactly), and imported floats are rounded to bf16 (exact for rows a bf16 cache exported).
 * Both copy K's rows of every head, then V's, from or to the layout [2][heads][rows][D]. */
extern "C" int gpu_kv_export(const gpu_kv *kv, int n, int heads, int D, float *out) {
    const size_t per = (size_t)n * D, all = 2 * (size_t)heads * per;
    const size_t es = kv_elem_bytes(kv->g);
    uint16_t *h = NULL; /* bf16 rows before they widen to float */
    if (es == 2 && all && !(h = (uint16_t *)malloc(all * sizeof *h))) return ERR_NOMEM;
    char *dst = h ? (char *)h : (char *)out;
    int rc = copy_out(dst, per, 0, kv, 0, 0, n, heads, D, cudaMemcpyDeviceToHost);
    if (!rc)
        rc = copy_out(dst + heads * per * es, per, 0, kv, 1, 0, n, heads, D,
                      cudaMemcpyDeviceToHost);
    if (!rc && h)
        for (size_t i = 0; i < all; i++) out[i] = __bfloat162float(__ushort_as_bfloat16(h[i]));
    free(h);
    return rc;
}

extern "C" int gpu_kv_import(gpu_kv *kv, const float *in, int n_in, int n, int heads, int D) {
    if (n > kv->cap || n > n_in || kv->nb) return ERR_ARG;
    if (n <= 0) return OK;
    const size_t per = (size_t)n_in * D, dp = (size_t)kv->cap * D, all = 2 * (size_t)heads * per;
    const size_t es = kv_elem_bytes(kv->g);
    uint16_t *h = NULL; /* the floats rounded to bf16 */
    if (es == 2 && all) {
        if (!(h = (uint16_t *)malloc(all * sizeof *h))) return ERR_NOMEM;
        for (size_t i = 0; i < all; i++) h[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
    }
    const char *src = h ? (const char *)h : (const char *)in;
    int rc = copy_rows(kv->k, dp, src, per, n, heads, D, es, cudaMemcpyHostToDevice);
    if (!rc)
        rc = copy_rows(kv->v, dp, src + heads * per * es, per, n, heads, D, es,
                       cudaMemcpyHostToDevice);
    free(h);
    return rc;
}

/* kv with new own rows for positions [nb, cap) (nb: 0 or kv's), holding kv's [nb, len) */
static int regrow(gpu_kv *kv, int cap, int nb, int len, int heads, int D) {
    gpu_kv next = *kv;
    next.cap = cap, next.nb = nb, next.k = next.v = NULL;
    if (!nb) next.base = NULL;
    int rc = alloc_own(&next, heads, D);
    if (rc) return rc;
    if ((rc = gpu_kv_copy(&next, kv, nb, len, heads, D))) {
        cudaFree(next.k), cudaFree(next.v);
        return rc;
    }
    cudaFree(kv->k), cudaFree(kv->v);
    *kv = next;
    return OK;
}

extern "C" int gpu_kv_grow(gpu_kv *kv, int cap, int len, int heads, int D) {
    if (cap <= kv->cap) return OK;
    int rc = check_cap(kv->g, cap);
    return rc ? rc : regrow(kv, cap, kv->nb, len, heads, D);
}

extern "C" int gpu_kv_shrink(gpu_kv *kv, int cap, int heads, int D) {
    if (cap >= kv->cap) return OK;
    if (cap < kv->nb) return ERR_ARG;
    return regrow(kv, cap, kv->nb, cap, heads, D);
}

extern "C" int gpu_kv_unshare(gpu_kv *kv, int n, int heads, int D) {
    return kv->nb ? regrow(kv, kv->cap, 0, n, heads, D) : OK;
}

extern "C" void gpu_kv_free(gpu_kv *kv) {
    if (!kv) return;
    if (kv->k) cudaFree(kv->k);
    if (kv->v) cudaFree(kv->v);
    free(kv);
}
