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

struct kv_cache {
    int n_layers, n_kv_heads, head_dim;
    int cap; /* positions per head, the shared ones included */
    int len; /* positions filled */
    /* own rows: [n_layers][n_kv_heads][cap - nb][D], row r holding position nb + r */
    float *k, *v;
    /* positions [0, nb) are the first rows of base, shared and never written here; base
     * holds no base of its own */
    struct kv_cache *base;
    int nb;
    int refs;           /* 1 + the caches using this one as their base */
    struct gpu_kv *gpu; /* the K/V in device memory instead, for GPU models */
};

/* Position j's K (or V, with v != 0) row of (layer, kv head h). */
static inline float *kv_row(const struct kv_cache *kv, int v, int layer, int h, int j) {
    const struct kv_cache *src = j < kv->nb ? kv->base : kv;
    int rows = src->cap - src->nb;
    size_t off = (((size_t)layer * kv->n_kv_heads + h) * rows + (size_t)(j - src->nb)) *
                 (size_t)kv->head_dim;
    return (v ? src->v : src->k) + off;
}

#endif
