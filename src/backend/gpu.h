/* backend/gpu.h: the GPU backend's C interface, used by model/ when a model is loaded with
 * device "cuda". A struct gpu_model holds the weights in device memory (uploaded once; BF16
 * matmul weights in tensor-core fragment order, F16/F32 as stored) and runs the same layer
 * loop as the CPU forward, with float32 activations and a per-sequence KV cache in device
 * memory; logits, or only the greedy tokens, come back to the host. Every row's result is
 * the same bits whatever the number of rows in the pass.
 * Without a CUDA build every function returns ERR_UNSUPPORTED and gpu_available() is 0.
 * One thread uses a gpu_model at a time. */
#ifndef DSPARK_BACKEND_GPU_H
#define DSPARK_BACKEND_GPU_H

#include "tensor/dtype.h"

#include <stddef.h>
#include <stdint.h>

struct gpu_model;
struct gpu_kv;

struct gpu_weight {
    const void *data; /* host pointer ([rows, cols] row-major) */
    enum dtype dtype;
    int64_t rows, cols; /* cols 0: a float vector of rows values */
};

struct gpu_layer_desc {
    struct gpu_weight wq, wk, wv, wo, wg, wu, wd;
    const float *bq, *bk, *bv;         /* biases or NULL */
    const float *attn_norm, *ffn_norm; /* [H] */
    const float *q_norm, *k_norm;      /* [D] or NULL */
};

struct gpu_model_desc {
    int n_layers, hidden, ffn, n_heads, n_kv_heads, head_dim, vocab, max_pos, window;
    float rms_eps;
    const float *inv_freq; /* [head_dim / 2] */
    struct gpu_weight embed, lm_head;
    const float *final_norm;
    const struct gpu_layer_desc *layers;
    /* A block drafter (DSpark, DFlash): fc [hidden, n_taps * target hidden] and hidden_norm
     * make its context rows from the target's taps (gpu_ctx_append); fc.data NULL otherwise.
     * share: a model on the same device whose embedding and lm_head serve where embed.data
     * or lm_head.data is NULL (it must outlive this one). */
    struct gpu_weight fc;
    const float *hidden_norm;
    const struct gpu_model *share;
    /* DSpark's Markov head (bias(prev) = W2 · W1[prev]): w1 and w2 [vocab, r] each, r at most
     * hidden; data NULL: none. Uploaded where W2 is large enough to pay for a device round
     * trip (else gpu_markov_bias refuses and the caller uses the CPU). */
    struct gpu_weight markov_w1, markov_w2;
    /* bf16 terms per matmul input value: 3 (exact products) or 1 (inputs rounded to bf16,
     * faster for passes of many rows; results move from the CPU's by that rounding); 0: the
     * default, gpu_input_terms() */
    int input_terms;
    /* 1: K/V caches in bf16 (half the device memory and of attention's reads; keys and values
     * rounded as they are stored), -1: float, 0: float unless DSPARK_GPU_KV=bf16 */
    int kv_bf16;
};

int gpu_available(void); /* 1 when a CUDA build finds a device */
const char *gpu_device_name(void);
/* bf16 terms per matmul input value of a model (gpu_model_desc.input_terms): 3 makes every
 * product an exact float32 product, 1 rounds inputs to bf16 as PyTorch's bf16 models do. The
 * default for models that do not choose: 3 where DSPARK_GPU_INPUTS=exact, else 1; 0 without
 * a CUDA build (and for a NULL model). */
int gpu_input_terms(void);
int gpu_model_input_terms(const struct gpu_model *g);
/* bytes of a K/V cache element for models that do not choose (gpu_model_desc.kv_bf16 0): 2
 * where DSPARK_GPU_KV=bf16, else 4; 0 without a CUDA build. Unknown values of DSPARK_GPU_KV
 * and DSPARK_GPU_INPUTS are warned of, once, at a model's load. */
int gpu_kv_default_bytes(void);
/* bytes of an element of the model's device K/V caches: 4 (float) or 2 (bf16,
 * gpu_model_desc.kv_bf16); 0 without a GPU model */
int gpu_model_kv_bytes(const struct gpu_model *g);
/* rows a pass of the model holds: the chunk a prompt is split into (0 without a CUDA build) */
int gpu_model_rows(const struct gpu_model *g);
/* prompt-matmul tiles run split between two blocks each (a short last wave, or every tile
 * with DSPARK_GPU_SPLIT=2) since the process started; 0 without a CUDA build */
long gpu_split_tiles(void);
/* Versions as CUDA numbers them (1000 * major + 10 * minor) and device 0's memory, for
 * `dspark doctor`. ERR_UNSUPPORTED without a CUDA build, ERR_IO when CUDA finds no device. */
int gpu_runtime_info(int *driver_version, int *runtime_version, size_t *mem_bytes);
int gpu_model_new(const struct gpu_model_desc *d, struct gpu_model **out);
void gpu_model_free(struct gpu_model *g);
int gpu_kv_new(struct gpu_model *g, int cap, struct gpu_kv **out);
void gpu_kv_free(struct gpu_kv *kv);
/* A device cache of cap positions whose first nb are base's (read, never written; base has
 * no base of its own and must outlive it). ERR_ARG where base's model keeps the other K/V
 * element type (bf16 or float), as gpu_kv_copy between such caches. */
int gpu_kv_new_shared(struct gpu_model *g, int cap, const struct gpu_kv *base, int nb,
                      struct gpu_kv **out);
/* Rows of every (layer, kv head) of a device cache (heads = n_layers * n_kv_heads, D floats a
 * row), for the prefix cache: positions [from, n) of src (its base's or its own) into dst's
 * own rows (from >= dst's shared positions); positions [0, n) out to the host in the export
 * layout [2][heads][n][D]; positions [0, n) in from that layout written with n_in rows (a
 * cache without a base); growing the cache to cap positions, keeping positions [0, len); and
 * making a shared cache hold its first n positions in rows of its own. */
int gpu_kv_copy(struct gpu_kv *dst, const struct gpu_kv *src, int from, int n, int heads, int D);
int gpu_kv_export(const struct gpu_kv *kv, int n, int heads, int D, float *out);
int gpu_kv_import(struct gpu_kv *kv, const float *in, int n_in, int n, int heads, int D);
int gpu_kv_grow(struct gpu_kv *kv, int cap, int len, int heads, int D);
/* Room for cap positions only (at least the base's, at most the cache's), keeping [0, cap). */
int gpu_kv_shrink(struct gpu_kv *kv, int cap, int heads, int D);
int gpu_kv_unshare(struct gpu_kv *kv, int n, int heads, int D);
/* Runs ids[0..n) at positions pos0.. (the cache holds positions [0, pos0)); logits of every
 * row (all_rows) or of the last one go to the host buffer logits. */
int gpu_forward(struct gpu_model *g, struct gpu_kv *kv, int pos0, const int32_t *ids, int n,
                float *logits, int all_rows);
/* A sampled row's summary in place of its logits: what sample_dist_build_sparse() (sample/
 * dist.h, whose sample_row_summary it mirrors field for field) needs to build the row's
 * truncated distribution with the bits the whole row would give. */
struct gpu_row_summary {
    float max;     /* the largest logit */
    float logit_t; /* the logit of the row's draft (its sequence's next input), else 0 */
    double total;  /* the sum of exp((logit - max) / temperature) over the row, kern_sum's order */
    int n;         /* candidates in ids/logits, in id order; -1: the row itself is needed */
    int in_logits; /* 1: the row's logits came back too (an untruncated row with no draft,
                    * whose draw needs them unless a draft before it is rejected) */
    int32_t drawn; /* the token the device drew for this row with the request's u (the
                    * request's last row, when it asked for a draw), or for a greedy request
                    * (temperature 0, with penalties) every row's argmax; else -1 */
    int32_t *ids;  /* [cap] */
    float *logits; /* [cap] */
};
#define GPU_SAMPLE_CAP 1024 /* candidates a summary holds at most */
/* A sequence's rows summarised (with its logits also given: they come back instead when the
 * pass cannot keep them on the device, and then filled stays 0). */
struct gpu_sample_req {
    float temperature;            /* <= 0: greedy, which asks for summaries only with penalties */
    int top_k;                    /* <= 0 or >= vocab: none */
    float top_p;                  /* >= 1: none */
    struct gpu_row_summary *rows; /* [rows asked for], ids/logits of GPU_SAMPLE_CAP entries */
    int filled;                   /* out: 1 when rows[] hold the pass's summaries */
    int dev_row;                  /* out: where the first row's logits stay on the device */
    unsigned pass;                /* out: the pass that left them there (gpu_logits_row) */
    /* in: without truncation, draw the last row on the device: sample_dist_draw_u() of its
     * distribution at u, into rows[last].drawn, so its logits need not come back */
    int draw;
    double u;
    /* in: presence and frequency penalties, applied on the device to the rows before their
     * summaries (so a row fetched afterwards holds penalised logits). pen_ids/pen_amt: every
     * id the sequence counted before the pass, with penalty_amount() of its count; row r's
     * own entries ext_ids/ext_amt [ext_at[r], + ext_n[r]): the ids among the pass's inputs
     * 1..r with the amounts of their counts then, which replace the base's. */
    int penalised;
    int n_pen;
    const int32_t *pen_ids;
    const float *pen_amt;
    const int *ext_at, *ext_n; /* [rows] */
    const int32_t *ext_ids;
    const float *ext_amt;
};
/* Several sequences in one pass where they fit (continuous batching): sequence i runs
 * ids[0..n) at positions pos0.. of its cache; logits (all rows or the last one, [n or 1, V])
 * and greedy ids (likewise) come back where asked (NULL: not wanted), and taps [n, n_taps * H]
 * of every row when taps were set. Each row's results are the same bits as when its sequence
 * runs alone. */
struct gpu_seq_io {
    struct gpu_kv *kv;
    int pos0;
    const int32_t *ids;
    int n;
    float *logits;
    int32_t *out_ids;
    float *taps;
    int all_rows;
    int noncausal; /* each row attends to all n rows (a drafter's block), not those before it */
    float *hidden; /* drafters: [n, H] every row after the final norm (with all_rows), or NULL */
    struct gpu_sample_req *sample; /* with logits: summaries instead where the pass allows */
};
int gpu_forward_batch(struct gpu_model *g, struct gpu_seq_io *seqs, int n);
/* A drafter's context rows for positions pos0.. of kv from fused[n, fc cols] (host): fc,
 * hidden_norm, then each layer's k (normed, roped) and v written into kv, as the CPU's
 * block_ctx_append() computes them. */
int gpu_ctx_append(struct gpu_model *g, struct gpu_kv *kv, int pos0, const float *fused, int n);
/* DSpark's Markov bias for n previous tokens: bias[i][vocab] = W2 · W1[prev[i]] (host rows).
 * ERR_UNSUPPORTED when the model has no Markov head on the device. */
int gpu_markov_bias(struct gpu_model *g, const int32_t *prev, int n, float *const *bias);
/* Hidden-state taps: the residual stream leaving each of layers[0..n) (n <= 16), reported by
 * gpu_forward_batch() in this order. n = 0 turns them off. */
int gpu_set_taps(struct gpu_model *g, const int *layers, int n);
/* Row `row` of a sequence's summarised rows (req filled by the last gpu_forward_batch): its
 * logits into out[V] while the device still holds them (until the model's next pass), else
 * ERR_UNSUPPORTED. */
int gpu_logits_row(struct gpu_model *g, const struct gpu_sample_req *req, int row, float *out);
/* gpu_forward() that copies back only the greedy token of every row (all_rows) or of the last
 * one: the first index of the largest logit, as sample_greedy() picks it. */
int gpu_forward_greedy(struct gpu_model *g, struct gpu_kv *kv, int pos0, const int32_t *ids, int n,
                       int32_t *out_ids, int all_rows);

/* For benchmarks: each kind of step work timed alone (each matmul over all layers, attention
 * over the caches as they are, a plain HBM read), passes of nseq sequences of n rows each
 * (nseq * n <= gpu_model_rows(g), launched as such a pass launches them) at position pos0 of each
 * sequence's cache. */
struct gpu_op_time {
    char name[16];
    double us;    /* per pass, best of several graph replays */
    double bytes; /* bytes the op must read per pass */
};
int gpu_profile(struct gpu_model *g, struct gpu_kv **kv, int nseq, int pos0, int n,
                struct gpu_op_time *out, int max);

#endif
