/* model/layer.h: checked binding of safetensors tensors, and the decoder layer every model
 * here shares (Qwen2/Qwen3/Llama/Mistral targets, DSpark/DFlash drafters). Matmul weights stay
 * in the file's map; norms and biases are copied to float and owned by the layer. */
#ifndef DSPARK_MODEL_LAYER_H
#define DSPARK_MODEL_LAYER_H

#include "base/thread.h"
#include "format/hf_config.h"
#include "format/safetensors.h"

struct weight {
    const void *data; /* [rows, cols] row-major, in the file's map (or a copy of it) */
    enum dtype dtype;
    const void *tiles; /* the same BF16 weights in the AMX tile layout, or NULL */
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

/* Where tensors come from, for messages: the folder and its architecture. */
struct weights_src {
    const struct st_set *st;
    const char *dir;
    const char *arch;
};

/* Binds a 2-D tensor (cols < 0: 1-D) after checking presence, dtype and shape. */
int weight_bind(const struct weights_src *src, struct weight *w, const char *name, int64_t rows,
                int64_t cols);
/* y[n, rows] = x[n, cols] · W^T (+ bias) through the weight's one kernel (AMX tiles when it has
 * them), so a row's result never depends on which call computed it. */
void weight_matmul(struct pool *pool, float *y, const float *x, const struct weight *w,
                   const float *bias, int n, int cols, int rows);
/* ys[i][n, rows[i]] = x[n, cols] · W_i^T (+ biases[i]) for count weights sharing x: one pass
 * of the threads when all have AMX tiles; each result equals weight_matmul's. */
void weights_matmul(struct pool *pool, const float *x, int n, int cols, int count,
                    const struct weight *const *ws, float *const *ys, const float *const *biases,
                    const int *rows);
/* A matmul weight and its shape, for weights_place. */
struct weight_ref {
    struct weight *w;
    int64_t rows, cols;
};
/* Moves the listed weights out of the file's 4 KiB-page map into one anonymous buffer advised
 * for 2 MiB pages (fewer TLB misses on the streaming reads: +15-21% on the matmul pass,
 * docs/perf.md). On a CPU with AMX, BF16 weights go into it in the tile layout instead
 * (w->tiles; w->data stays in the map). Only when the buffer takes at most a quarter of the
 * free memory; otherwise nothing moves and NULL is returned. Values are unchanged. The buffer
 * (*bytes long) is released with munmap after the weights' last use. */
void *weights_place(struct weight_ref *list, int n, size_t *bytes);
/* Writes the 7 matmul weights of layer l, with their shapes, to out; returns 7. */
int layer_weight_refs(const struct hf_config *c, struct layer *l, struct weight_ref *out);
/* A 1-D tensor of n values copied to float; optional ones may be absent (*out = NULL). */
int weight_vec(const struct weights_src *src, float **out, const char *name, int64_t n,
               int optional);
/* Loads layer i, its tensors named "<prefix>.<i>.self_attn.q_proj.weight" and so on. */
int layer_load(const struct weights_src *src, const struct hf_config *c, const char *prefix, int i,
               struct layer *l);
void layer_free(struct layer *l);
/* x[T, H] += down(silu(gate(n)) * up(n)), n = ffn_norm(x); xn[T, H], g and u [T, I] scratch. */
void layer_mlp(struct pool *pool, const struct layer *l, const struct hf_config *c, float *x,
               float *xn, float *g, float *u, int T, int bf16);

#endif
