/* model/forward.c: the decoder layer loop, written once for every supported architecture.
 * Input is processed in chunks of up to MODEL_CHUNK rows; each chunk's K/V are appended to
 * the cache before its attention, so row t sees positions [0, pos0 + t]. Dimensions:
 * T rows in the chunk, H hidden, D head_dim, QD = n_heads*D, KD = n_kv_heads*D, I ffn. */
#include "model/model_impl.h"

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* bf16 reference mode: transformers rounds every op's output to bfloat16. */
static void round_if(const struct model *m, float *x, size_t n) {
    if (m->act_bf16) cpu_round_bf16(x, n);
}

static void residual_add(const struct model *m, float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
    round_if(m, x, n);
}

static void embed_rows(const struct model *m, const int32_t *ids, int T, float *x) {
    size_t H = (size_t)m->cfg.hidden_size, esz = dtype_size(m->embed.dtype);
    for (int t = 0; t < T; t++)
        dtype_to_f32(m->embed.dtype, (const char *)m->embed.data + (size_t)ids[t] * H * esz,
                     x + (size_t)t * H, H);
}

/* Copies this chunk's K and V rows ([T, KD]) into the cache at positions pos0.. */
static void kv_store(struct kv_cache *kv, int layer, int pos0, int T, const float *k,
                     const float *v) {
    int D = kv->head_dim, nkv = kv->n_kv_heads;
    for (int h = 0; h < nkv; h++)
        for (int t = 0; t < T; t++) {
            memcpy(kv_row(kv, 0, layer, h, pos0 + t), k + ((size_t)t * nkv + h) * D,
                   sizeof(float) * D);
            memcpy(kv_row(kv, 1, layer, h, pos0 + t), v + ((size_t)t * nkv + h) * D,
                   sizeof(float) * D);
        }
}

/* Rows [row0, row0 + n) of the step belong to one sequence, at positions pos0.. of kv. */
struct seg {
    struct kv_cache *kv;
    int row0, n, pos0;
};

static void attention_block(struct model *m, const struct seg *sg, int n_seg, int li, int T) {
    const struct hf_config *c = &m->cfg;
    const struct layer *l = &m->layers[li];
    int H = c->hidden_size, D = c->head_dim;
    int QD = c->n_heads * D, KD = c->n_kv_heads * D;
    int bf = m->act_bf16;
    cpu_rmsnorm(m->xn, m->x, l->attn_norm, T, H, c->rms_eps, bf);
    const struct weight *ws[3] = {&l->wq, &l->wk, &l->wv};
    float *ys[3] = {m->q, m->k, m->v};
    const float *bs[3] = {l->bq, l->bk, l->bv};
    const int rows[3] = {QD, KD, KD};
    weights_matmul(m->pool, m->xn, T, H, 3, ws, ys, bs, rows);
    round_if(m, m->q, (size_t)T * QD);
    round_if(m, m->k, (size_t)T * KD);
    round_if(m, m->v, (size_t)T * KD);
    if (l->q_norm) {
        cpu_rmsnorm(m->q, m->q, l->q_norm, T * c->n_heads, D, c->rms_eps, bf);
        cpu_rmsnorm(m->k, m->k, l->k_norm, T * c->n_kv_heads, D, c->rms_eps, bf);
    }
    for (int i = 0; i < n_seg; i++) { /* positions, cache and attention are per sequence */
        const struct seg *g = &sg[i];
        float *q = m->q + (size_t)g->row0 * QD, *k = m->k + (size_t)g->row0 * KD;
        cpu_rope(q, g->n, c->n_heads, D, g->pos0, m->inv_freq, bf);
        cpu_rope(k, g->n, c->n_kv_heads, D, g->pos0, m->inv_freq, bf);
        kv_store(g->kv, li, g->pos0, g->n, k, m->v + (size_t)g->row0 * KD);
        const struct kv_cache *kv = g->kv;
        /* a page's rows: [K/V][layer][kv head][KV_PAGE][D], after the page's header */
        size_t hdr = offsetof(struct kv_page, rows) / sizeof(float);
        struct cpu_attn a = {
            .out = m->att + (size_t)g->row0 * QD,
            .q = q,
            .pages = (const void *const *)kv->pages,
            .k_off = hdr + kv_run_off(kv, 0, li, 0),
            .v_off = hdr + kv_run_off(kv, 1, li, 0),
            .page_shift = KV_PAGE_SHIFT,
            .n = g->n,
            .pos0 = g->pos0,
            .n_heads = c->n_heads,
            .n_kv_heads = c->n_kv_heads,
            .head_dim = D,
            .window = c->sliding_window,
            .scale = 1.0f / sqrtf((float)D),
            .bf16 = bf,
        };
        cpu_attention(m->pool, &a);
    }
    weight_matmul(m->pool, m->xn, m->att, &l->wo, NULL, T, QD, H);
    residual_add(m, m->x, m->xn, (size_t)T * H);
}

/* Copies the residual leaving layer li into its column block of taps[T, n_taps * H]. */
static void copy_tap(const struct model *m, int li, int T, float *taps) {
    int H = m->cfg.hidden_size;
    for (int t = 0; t < m->n_taps; t++) {
        if (m->tap_layers[t] != li) continue;
        for (int r = 0; r < T; r++)
            memcpy(taps + ((size_t)r * m->n_taps + t) * H, m->x + (size_t)r * H,
                   sizeof(float) * (size_t)H);
    }
}

void model_embed(const struct model *m, const int32_t *ids, int n, float *out) {
    embed_rows(m, ids, n, out);
}

void model_lm_head(struct model *m, const float *x, int n, float *logits) {
    weight_matmul(m->pool, logits, x, &m->lm_head, NULL, n, m->cfg.hidden_size, m->cfg.vocab_size);
}

int model_set_taps(struct model *m, const int *layers, int n) {
    if (n > MODEL_MAX_TAPS) return ERR_UNSUPPORTED;
    for (int i = 0; i < n; i++) {
        if (layers[i] < 0 || layers[i] >= m->cfg.n_layers) {
            log_error("tap layer %d does not exist: the model has %d layers", layers[i],
                      m->cfg.n_layers);
            return ERR_ARG;
        }
    }
    if (m->gpu) {
        int rc = gpu_set_taps(m->gpu, layers, n);
        if (rc) return rc;
    }
    for (int i = 0; i < n; i++) m->tap_layers[i] = layers[i];
    if (n && !m->taps_scratch) {
        size_t b = sizeof(float) * MODEL_CHUNK * MODEL_MAX_TAPS * (size_t)m->cfg.hidden_size;
        if (!(m->taps_scratch = malloc(b))) return ERR_NOMEM;
    }
    m->n_taps = n;
    return OK;
}

int model_forward(struct model *m, struct kv_cache *kv, const int32_t *ids, int n, float *logits,
                  int all_rows) {
    return model_forward_taps(m, kv, ids, n, logits, all_rows, NULL);
}

static int check_ids(const struct model *m, struct kv_cache *kv, const int32_t *ids, int n) {
    if (n <= 0) return ERR_ARG;
    if (n > kv->cap - kv->len) {
        log_error("context full: %d positions held, %d more do not fit in %d", kv->len, n, kv->cap);
        return ERR_FULL;
    }
    if (kv->len < kv->nb) { /* a rollback into shared device rows that could not be copied */
        log_error("out of memory: the cache's shared prefix could not be made its own");
        return ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) {
            log_error("token id %d is outside the vocabulary (size %d)", ids[i], m->cfg.vocab_size);
            return ERR_ARG;
        }
    }
    /* the pages this pass writes (the hot loop only stores rows) */
    return m->gpu ? OK : kv_writable(kv, kv->len, kv->len + n);
}

/* One pass of the layer stack over T rows (x holds their embeddings), the rows split into
 * sequences by sg; taps of row r go to taps[r] when taps != NULL. */
static void layers_pass(struct model *m, const struct seg *sg, int n_seg, int T, float *taps) {
    const struct hf_config *c = &m->cfg;
    round_if(m, m->x, (size_t)T * c->hidden_size);
    for (int li = 0; li < c->n_layers; li++) {
        attention_block(m, sg, n_seg, li, T);
        layer_mlp(m->pool, &m->layers[li], c, m->x, m->xn, m->g, m->u, T, m->act_bf16);
        if (taps) copy_tap(m, li, T, taps);
    }
}

/* logits[n, V] of the rows x[row0 .. row0 + n) */
static void head_rows(struct model *m, int row0, int n, float *logits) {
    const struct hf_config *c = &m->cfg;
    int H = c->hidden_size, V = c->vocab_size;
    cpu_rmsnorm(m->xn, m->x + (size_t)row0 * H, m->final_norm, n, H, c->rms_eps, m->act_bf16);
    weight_matmul(m->pool, logits, m->xn, &m->lm_head, NULL, n, H, V);
    round_if(m, logits, (size_t)n * V);
}

/* first index of the largest value; NaN never wins; 0 when nothing beats -inf */
static int32_t first_max(const float *x, int n) {
    float best = -INFINITY;
    int32_t at = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > best) best = x[i], at = i;
    return at;
}

static int forward_batch_gpu(struct model *m, struct model_batch_item *items, int n_items) {
    struct gpu_seq_io *io = malloc(sizeof *io * (size_t)n_items);
    if (!io) return ERR_NOMEM;
    for (int i = 0; i < n_items; i++) {
        struct model_batch_item *it = &items[i];
        io[i] = (struct gpu_seq_io){.kv = it->kv->gpu,
                                    .pos0 = it->kv->len,
                                    .ids = it->ids,
                                    .n = it->n,
                                    .logits = it->logits,
                                    .out_ids = it->out_ids,
                                    .taps = it->taps,
                                    .all_rows = !it->last_only,
                                    .sample = it->logits ? it->sample : NULL};
    }
    int rc = gpu_forward_batch(m->gpu, io, n_items);
    free(io);
    if (rc) return rc;
    for (int i = 0; i < n_items; i++) items[i].kv->len += items[i].n;
    return OK;
}

/* the outputs item it asked for, of its rows [row0, row0 + n) of the pass */
static void batch_outputs(struct model *m, struct model_batch_item *it, int row0) {
    int V = m->cfg.vocab_size;
    int first = it->last_only ? it->n - 1 : 0;
    if (it->logits) head_rows(m, row0 + first, it->n - first, it->logits);
    if (!it->out_ids) return;
    for (int t = first; t < it->n; t++) {
        const float *row = it->logits ? it->logits + (size_t)(t - first) * V : m->last_logits;
        if (!it->logits) head_rows(m, row0 + t, 1, m->last_logits);
        it->out_ids[t - first] = first_max(row, V);
    }
}

int model_logits_row(struct model *m, const struct gpu_sample_req *sample, int row, float *out) {
    return m->gpu ? gpu_logits_row(m->gpu, sample, row, out) : ERR_UNSUPPORTED;
}

int model_forward_batch(struct model *m, struct model_batch_item *items, int n_items) {
    const struct hf_config *c = &m->cfg;
    int H = c->hidden_size, nt = m->n_taps;
    struct seg sg[MODEL_CHUNK];
    for (int i = 0; i < n_items; i++) {
        int rc = check_ids(m, items[i].kv, items[i].ids, items[i].n);
        if (rc) return rc;
    }
    if (m->gpu) return forward_batch_gpu(m, items, n_items);
    for (int first = 0; first < n_items;) {
        /* as many whole items as fit in one step's rows */
        int T = 0, k = 0;
        while (first + k < n_items && k < MODEL_CHUNK && T + items[first + k].n <= MODEL_CHUNK)
            T += items[first + k++].n;
        if (k == 0) return ERR_ARG; /* an item wider than a step: use model_forward_taps */
        for (int i = 0; i < k; i++) {
            struct model_batch_item *it = &items[first + i];
            int row0 = i ? sg[i - 1].row0 + sg[i - 1].n : 0;
            sg[i] = (struct seg){it->kv, row0, it->n, it->kv->len};
            embed_rows(m, it->ids, it->n, m->x + (size_t)row0 * H);
        }
        float *taps = nt ? m->taps_scratch : NULL;
        layers_pass(m, sg, k, T, taps);
        for (int i = 0; i < k; i++) {
            struct model_batch_item *it = &items[first + i];
            it->kv->len += it->n;
            batch_outputs(m, it, sg[i].row0);
            if (it->taps && taps)
                memcpy(it->taps, taps + (size_t)sg[i].row0 * nt * H,
                       sizeof(float) * (size_t)it->n * nt * H);
        }
        first += k;
    }
    return OK;
}

int model_forward_taps(struct model *m, struct kv_cache *kv, const int32_t *ids, int n,
                       float *logits, int all_rows, float *taps) {
    int rc = check_ids(m, kv, ids, n);
    if (rc) return rc;
    if (m->gpu) {
        struct model_batch_item it = {kv, ids, n, logits, taps, NULL, !all_rows, NULL};
        return forward_batch_gpu(m, &it, 1);
    }
    int H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    for (int done = 0; done < n; done += MODEL_CHUNK) {
        int T = n - done < MODEL_CHUNK ? n - done : MODEL_CHUNK;
        struct seg sg = {kv, 0, T, kv->len};
        embed_rows(m, ids + done, T, m->x);
        layers_pass(m, &sg, 1, T, taps ? taps + (size_t)done * m->n_taps * H : NULL);
        kv->len += T;
        if (!logits) continue;
        if (all_rows)
            head_rows(m, 0, T, logits + (size_t)done * V);
        else if (done + T == n)
            head_rows(m, T - 1, 1, logits);
    }
    return OK;
}

int model_forward_greedy(struct model *m, struct kv_cache *kv, const int32_t *ids, int n,
                         int32_t *out, int all_rows) {
    int rc = check_ids(m, kv, ids, n);
    if (rc) return rc;
    if (m->gpu) {
        if ((rc = gpu_forward_greedy(m->gpu, kv->gpu, kv->len, ids, n, out, all_rows))) return rc;
        kv->len += n;
        return OK;
    }
    int V = m->cfg.vocab_size;
    for (int done = 0; done < n; done += MODEL_CHUNK) {
        int T = n - done < MODEL_CHUNK ? n - done : MODEL_CHUNK;
        struct seg sg = {kv, 0, T, kv->len};
        embed_rows(m, ids + done, T, m->x);
        layers_pass(m, &sg, 1, T, NULL);
        kv->len += T;
        for (int t = all_rows ? 0 : T - 1; t < T && (all_rows || done + T == n); t++) {
            head_rows(m, t, 1, m->last_logits);
            out[all_rows ? done + t : 0] = first_max(m->last_logits, V);
        }
    }
    return OK;
}

int model_gpu_profile(struct model *m, struct kv_cache **kv, int nseq, int n,
                      struct gpu_op_time *out, int max) {
    struct gpu_kv *g[64]; /* gpu_profile takes at most GPU_SEQS */
    if (!m->gpu) return ERR_UNSUPPORTED;
    if (nseq < 1 || nseq > 64) return ERR_ARG;
    for (int i = 0; i < nseq; i++) {
        if (!kv[i]->gpu || kv[i]->len != kv[0]->len) return ERR_ARG;
        g[i] = kv[i]->gpu;
    }
    return gpu_profile(m->gpu, g, nseq, kv[0]->len, n, out, max);
}
