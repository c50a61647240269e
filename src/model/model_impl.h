/* model/model_impl.h: the layout of struct model and struct kv_cache, shared by model.c
 * (loading), forward.c (the layer loop) and kv.c. Not for use outside src/model. */
#ifndef DSPARK_MODEL_IMPL_H
#define DSPARK_MODEL_IMPL_H

#include "base/thread.h"
#include "format/safetensors.h"
#include "model/model.h"

struct weight {
    const void *data; /* [rows, cols] row-major, in the file's map */
    enum dtype dtype;
};

struct layer {
    struct weight wq;       /* [n_heads*D, H] */
    struct weight wk;       /* [n_kv*D, H] */
    struct weight wv;       /* [n_kv*D, H] */
    struct weight wo;       /* [H, n_heads*D] */
    struct weight wg;       /* [I, H] */
    struct weight wu;       /* [I, H] */
    struct weight wd;       /* [H, I] */
    float *bq, *bk, *bv;    /* [n_heads*D], [n_kv*D], [n_kv*D] or NULL (Qwen2 biases) */
    float *attn_norm;       /* [H] */
    float *ffn_norm;        /* [H] */
    float *q_norm, *k_norm; /* [D] or NULL (Qwen3 QK-norm) */
};

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
    /* step scratch, sized for MODEL_CHUNK rows at load (the hot loop never mallocs) */
    float *x, *xn, *q, *k, *v, *att, *g, *u, *last_logits;
    float *attn_scratch; /* [n_threads, max_pos] */
};

/* Rows per forward chunk: longer inputs are processed chunk by chunk (chunked prefill). */
#define MODEL_CHUNK 256

struct kv_cache {
    int n_layers, n_kv_heads, head_dim;
    int cap;  /* positions per head */
    int len;  /* positions filled */
    float *k; /* [n_layers][n_kv_heads][cap][D] */
    float *v; /* same */
};

#endif
