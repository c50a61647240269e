/* model/model.h: a decoder-only transformer loaded from a Hugging Face folder, and its
 * forward pass on the CPU.
 * Ownership: struct model owns its mapped weights and thread pool; struct kv_cache is owned
 * by the caller (one per sequence) and must be used with the model that made it. A model
 * runs one forward at a time (not thread-safe). */
#ifndef DSPARK_MODEL_MODEL_H
#define DSPARK_MODEL_MODEL_H

#include "format/hf_config.h"

#include <stdint.h>

struct model;
struct kv_cache;

#define MODEL_CHUNK_ROWS 256 /* rows per forward step; longer inputs run in chunks */

struct pool;

struct model_opts {
    int n_threads;     /* <= 0: one per CPU */
    struct pool *pool; /* threads shared with another model (not owned); NULL: make one */
    int show_progress; /* progress bar on stderr while reading weights */
    /* Round activations to bfloat16 where transformers' bfloat16 path rounds them, to
     * reproduce a bf16 checkpoint's reference logits. 0 (default): float32 activations. */
    int bf16_activations;
    /* Run the forward on the GPU (a CUDA build with a device); DSpark and DFlash drafters
     * loaded beside the model run there too. Not combinable with bf16_activations. */
    int gpu;
    /* With gpu, bf16 terms per matmul input value: 1 rounds every input to bfloat16 (as
     * PyTorch's bf16 models take them; results move from the CPU's by that rounding), 3 splits
     * it into three terms so that every product is an exact float32 product (slower verify
     * passes and prompts); 0: gpu_input_terms()'s default (1, unless DSPARK_GPU_INPUTS=exact).
     * Drafters follow their target. */
    int gpu_inputs;
    /* With gpu, bytes of a device K/V cache element: 2 keeps keys and values in bfloat16 (half
     * the device memory and of attention's reads; each key and value rounded as it is
     * stored), 4 in float32, 0: float32 unless DSPARK_GPU_KV=bf16. Drafters follow their
     * target. */
    int gpu_kv;
};

int model_load(const char *dir, const struct model_opts *opts, struct model **out);
void model_free(struct model *m);         /* NULL is a no-op */
struct pool *model_pool(struct model *m); /* to share with a draft model */
const struct hf_config *model_config(const struct model *m);
size_t model_weight_bytes(const struct model *m); /* bytes read per decode step */

/* A host cache's pages hold 1 << KV_PAGE_SHIFT positions. 64 gives attention runs of 16-32 KB
 * per head (16-position pages, 4 KB runs at head_dim 64, decoded 8-13% slower at context 1900,
 * docs/perf.md); a sequence copies at most 63 rows of a page it shares. */
#define KV_PAGE_SHIFT 6

/* A KV cache for up to max_ctx positions (<= 0: the model's max_position_embeddings). */
int kv_new(const struct model *m, int max_ctx, struct kv_cache **out);
/* A cache holding src's first n positions without copying them. A host cache shares src's
 * pages (KV_PAGE positions each, reference-counted): any number of caches share one prefix, a
 * cache shares from one that shares itself, and one that writes a page it shares (the prefix's
 * last, partly filled page, a rollback into the prefix) copies that page first, so src's rows
 * never change. A device cache reads src's rows (or those src itself shares) in device memory
 * and keeps src alive until both are freed; src must not change those rows while shared (the
 * prefix cache's entries never do). */
int kv_new_shared(const struct model *m, int max_ctx, struct kv_cache *src, int n,
                  struct kv_cache **out);
int kv_shared(const struct kv_cache *kv); /* positions whose rows another cache holds too */
int kv_paged(const struct kv_cache *kv);  /* 1 for a (paged) host cache, 0 for a device one */
/* The device cache whose rows kv reads for its shared positions, or NULL (host caches too). */
const struct kv_cache *kv_base(const struct kv_cache *kv);
void kv_free(struct kv_cache *kv);
int kv_len(const struct kv_cache *kv); /* positions held */
int kv_capacity(const struct kv_cache *kv);
/* Rolls back to the first n positions (a device cache copies shared rows below n first). */
void kv_truncate(struct kv_cache *kv, int n);
/* Makes room for at least cap positions (keeping the contents), up to max_position_embeddings.
 * ERR_NOMEM leaves the cache as it was. A host cache's memory follows the positions written,
 * so capacity costs it only a page-table slot per KV_PAGE positions. */
int kv_reserve(struct kv_cache *kv, int cap);
/* Memory held: a host cache's pages (shared ones too), a device cache's own rows. */
size_t kv_bytes(const struct kv_cache *kv);
/* The memory KV_PAGE positions of a cache's own rows take. */
size_t kv_page_bytes(const struct kv_cache *kv);
/* The memory a set of caches keeps alive, each page (or device base) counted once. */
size_t kv_set_bytes(struct kv_cache *const *kvs, int n);
/* Gives up a device cache's room past kv_len() unless another cache reads its rows (host
 * caches hold no room: a no-op). */
int kv_fit(struct kv_cache *kv);
/* Drops up to max_pages of a cache's last pages of KV_PAGE positions, from the end, and returns
 * the positions kept (a multiple of KV_PAGE, a device cache's base's positions, or kv_len()
 * when no position was dropped). A host cache stops at a page another cache holds; a device
 * cache keeps its base's positions, and all of them while another cache reads its rows (its
 * room goes with the positions). */
int kv_trim_own(struct kv_cache *kv, int max_pages);
/* kv's positions in pages that a cache of set holds too (0 for a device cache). */
int kv_shared_with(const struct kv_cache *kv, struct kv_cache *const *set, int n);
/* Makes kv hold `from`'s pages for the whole pages of positions [0, n) where the two hold the
 * same rows in different pages (two sequences that computed one prefix each): memory for one
 * copy instead of two, the same bits. Returns the positions adopted (0 for device caches). */
int kv_adopt(struct kv_cache *kv, const struct kv_cache *from, int n);
/* ---- moving rows between caches (a host and a device cache: ERR_UNSUPPORTED) ---- */
size_t kv_row_floats(const struct kv_cache *kv); /* K and V floats of one position */
/* dst (same model, capacity >= n) gets src's first n positions and holds exactly those. */
int kv_copy_prefix(struct kv_cache *dst, const struct kv_cache *src, int n);
/* The first n positions as out[2][n_layers][n_kv_heads][n][head_dim] (K, then V), and back:
 * kv_import() makes kv hold exactly the first n of the n_in positions exported in `in`
 * (n <= n_in, capacity >= n). */
int kv_export(const struct kv_cache *kv, int n, float *out);
int kv_import(struct kv_cache *kv, const float *in, int n_in, int n);
/* Frees a host cache's pages past the positions held (rolled-back drafts), for a cache that
 * only gets read from now on. */
void kv_compact(struct kv_cache *kv);
/* A 64-bit digest of everything that determines a cache's contents: the config, RoPE tables,
 * every weight byte, and how activations are computed (bf16 rounding, GPU). Two models with
 * the same fingerprint give bit-identical caches for the same tokens. Computed on first use
 * (a pass over the weights), then remembered. */
uint64_t model_fingerprint(struct model *m);

/* Runs ids[0..n) at positions kv_len(kv).. and appends them to the cache. Writes the logits of
 * every row to logits[n, vocab] when all_rows, else only the last row to logits[vocab].
 * logits may be NULL (prefill of a prefix whose logits nobody needs).
 * Returns ERR_FULL, leaving the cache as it was, when n positions do not fit. */
int model_forward(struct model *m, struct kv_cache *kv, const int32_t *ids, int n, float *logits,
                  int all_rows);
/* model_forward() that reports only the greedy token of every row (all_rows) or of the last
 * one in out[n] / out[1]: the first index of the largest logit, as sample_greedy() picks it.
 * On the GPU only those ids come back to the host. */
int model_forward_greedy(struct model *m, struct kv_cache *kv, const int32_t *ids, int n,
                         int32_t *out, int all_rows);
int model_on_gpu(const struct model *m); /* 1 when the forward runs on the GPU */
/* The device model (NULL on the CPU), and the GPU description of a model of config c with
 * layers[0..c->n_layers) (its shape, inv_freq and layers, d->layers calloc'd for the caller
 * to free; embedding, head and norms are the caller's to fill): for this model and for
 * models that run beside it, such as block drafters. */
struct gpu_model *model_gpu(struct model *m);
/* bytes of an element of the model's K/V caches: 4, or 2 for bf16 device caches */
int model_kv_elem_bytes(const struct model *m);
/* rows one forward pass holds: longer inputs run in passes of this many (MODEL_CHUNK_ROWS on
 * the CPU; the GPU's chunk with --gpu) */
int model_pass_rows(struct model *m);
struct layer;
struct gpu_model_desc;
int model_gpu_desc(const struct hf_config *c, const struct layer *layers, const float *inv_freq,
                   struct gpu_model_desc *d);
/* For benchmarks of a model on the GPU: gpu_profile() of passes of n rows after the contents
 * of each of nseq caches (all as long as the first). ERR_UNSUPPORTED on the CPU. */
struct gpu_op_time;
int model_gpu_profile(struct model *m, struct kv_cache **kv, int nseq, int n,
                      struct gpu_op_time *out, int max);

/* Several sequences in one pass, so each weight is read once for all of them (continuous
 * batching). Item i runs ids[0..n) after its cache's contents, like model_forward_taps(), and
 * every row's result is bit-identical to running the item alone. logits and out_ids (the
 * greedy token: first index of the largest logit) cover every row, or with last_only the
 * last one; taps every row. Any of them may be NULL. On the CPU items wider than MODEL_CHUNK
 * rows are refused (ERR_ARG); the GPU takes any width. */
struct gpu_sample_req;
struct model_batch_item {
    struct kv_cache *kv;
    const int32_t *ids;
    int n;
    float *logits;    /* [n or 1, vocab] */
    float *taps;      /* [n, n_taps * H] */
    int32_t *out_ids; /* [n or 1] */
    int last_only;
    /* GPU targets, with logits: sampling summaries of the rows instead, where the pass allows
     * (backend/gpu.h; the logits come back otherwise, and sample->filled says which) */
    struct gpu_sample_req *sample;
};
int model_forward_batch(struct model *m, struct model_batch_item *items, int n_items);
/* Row `row` of an item's summarised rows (sample filled by the last model_forward_batch), its
 * logits into out[vocab], while the device still holds them: until the model's next pass. */
int model_logits_row(struct model *m, const struct gpu_sample_req *sample, int row, float *out);

/* ---- for drafters that read the target (DSpark, DFlash) ---- */

#define MODEL_MAX_TAPS 16

/* Chooses the layers whose output (the residual stream leaving the layer, before the final
 * norm) model_forward_taps() reports, in this order. n = 0 turns taps off. */
int model_set_taps(struct model *m, const int *layers, int n);
/* model_forward() that also writes taps[n, n_taps * H]: row t holds the tapped layers' outputs
 * for input t, concatenated in model_set_taps() order. taps may be NULL. */
int model_forward_taps(struct model *m, struct kv_cache *kv, const int32_t *ids, int n,
                       float *logits, int all_rows, float *taps);
/* The token embedding rows of ids[0..n) as float: out[n, H]. */
void model_embed(const struct model *m, const int32_t *ids, int n, float *out);
/* logits[n, vocab] = x[n, H] · lm_head^T (no final norm: x is already normalised). */
void model_lm_head(struct model *m, const float *x, int n, float *logits);

#endif
