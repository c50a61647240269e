/* model/model_impl.h: the layout of struct model and struct kv_cache, shared by model.c
 * (loading), forward.c (the layer loop) and kv.c. Not for use outside src/model. */
#ifndef DSPARK_MODEL_IMPL_H
#define DSPARK_MODEL_IMPL_H

#include "backend/gpu.h"
#include "base/thread.h"
#include "format/safetensors.h"
#include "model/layer.h"
#include "model/model.h"

struct model {
    struct hf_config cfg;
    struct st_set *st; /* owns the weight maps */
    struct pool *pool;
    int owns_pool;
    struct weight embed;   /* [vocab, H] */
    struct weight lm_head; /* [vocab, H]; equals embed when tied */
    float *final_norm;     /* [H] */
    struct layer *layers;  /* [n_layers] */
    float *inv_freq;       /* [D/2] RoPE frequencies, llama3 scaling applied */
    size_t weight_bytes;   /* matmul weights read per decode step */
    int act_bf16;          /* model_opts.bf16_activations */
    int gpu_inputs;        /* model_opts.gpu_inputs */
    int gpu_kv;            /* model_opts.gpu_kv */
    struct gpu_model *gpu; /* the forward runs on the GPU when set */
    void *huge;            /* matmul weights copied to 2 MiB pages (munmap), or NULL */
    size_t huge_bytes;
    uint64_t fingerprint;           /* model_fingerprint(), 0 until first asked */
    int tap_layers[MODEL_MAX_TAPS]; /* layers whose output model_forward_taps() copies out */
    int n_taps;
    /* step scratch, sized for MODEL_CHUNK rows at load (the hot loop never mallocs) */
    float *x, *xn, *q, *k, *v, *att, *g, *u, *last_logits;
    float *taps_scratch; /* [MODEL_CHUNK, MODEL_MAX_TAPS * H] once taps are set */
};

/* Rows per forward chunk: longer inputs are processed chunk by chunk (chunked prefill). */
#define MODEL_CHUNK MODEL_CHUNK_ROWS

#define KV_PAGE (1 << KV_PAGE_SHIFT) /* positions per page of a host cache (model.h) */

/* KV_PAGE positions of every (layer, kv head), K then V: rows[2][n_layers][n_kv_heads]
 * [KV_PAGE][D]. Any number of caches may hold a page; one holding it alone may write it. */
struct kv_page {
    _Alignas(64) int refs; /* caches whose table holds it */
    unsigned mark;         /* kv_set_bytes()'s visit stamp */
    _Alignas(64) float rows[];
};

struct kv_cache {
    int n_layers, n_kv_heads, head_dim;
    int cap; /* positions it may hold */
    int len; /* positions filled */
    /* host caches: position j lives in pages[j >> KV_PAGE_SHIFT] (NULL until written), of
     * n_pages table slots. Pages are shared between caches by reference count (a prefix, a
     * share of a share), and copied before a cache writes one it does not hold alone. */
    struct kv_page **pages;
    int n_pages;
    /* device caches: positions [0, nb) are the first rows of base (another device cache, with
     * no base of its own), shared and never written here */
    struct kv_cache *base;
    int nb;
    int refs;           /* 1 + the device caches using this one as their base */
    struct gpu_kv *gpu; /* the K/V in device memory, for GPU models */
    int es;             /* bytes of a device element: 4 (float) or 2 (bf16) */
};

/* Position j's K (or V, with v != 0) row of (layer, kv head h) in a host cache; its page must
 * exist (kv_writable() makes the pages a pass writes). */
static inline size_t kv_run_off(const struct kv_cache *kv, int v, int layer, int h) {
    /* floats from a page's rows to the run of (K or V, layer, kv head h) */
    size_t head = ((size_t)v * kv->n_layers + (size_t)layer) * kv->n_kv_heads + (size_t)h;
    return head * KV_PAGE * (size_t)kv->head_dim;
}

static inline float *kv_row(const struct kv_cache *kv, int v, int layer, int h, int j) {
    return kv->pages[j >> KV_PAGE_SHIFT]->rows + kv_run_off(kv, v, layer, h) +
           (size_t)(j & (KV_PAGE - 1)) * (size_t)kv->head_dim;
}

/* Makes the pages of positions [from, to) exist and held by kv alone, copying the rows below
 * `from` of a page it shared. ERR_NOMEM leaves the rows before `from` as they were. */
int kv_writable(struct kv_cache *kv, int from, int to);

#endif
