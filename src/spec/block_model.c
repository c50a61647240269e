/* spec/block_model.c: see block_model.h. Shapes: H hidden, D head_dim, QD = n_heads*D,
 * KD = n_kv_heads*D, T = n_taps * H_target, V vocabulary, r Markov rank, B block rows. */
#include "spec/block_model.h"

#include "backend/cpu/cpu.h"
#include "backend/gpu.h"
#include "base/err.h"
#include "base/log.h"
#include "model/layer.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#define CTX_CHUNK 256 /* context rows appended per pass */
#define LOGIT_CHUNK                                                                                \
    32 /* rows per lm_head / Markov pass of a batch (bounds the [rows, V] scratch) */

struct block_model {
    struct hf_config cfg;
    struct st_set *st;
    struct model *target;
    struct pool *pool;
    struct weight fc;          /* [H, T] */
    float *hidden_norm, *norm; /* [H] */
    struct layer *layers;      /* [n_layers] */
    struct weight embed, head; /* own [V, H] copies, or data == NULL: the target's */
    struct weight w1, w2;      /* Markov head [V, r] each, when markov_rank > 0 */
    float *conf_w;             /* [H (+ r)] confidence head */
    float conf_b;
    float *inv_freq; /* [D/2] */
    int n_taps;      /* target layers fused per position */
    void *huge;      /* the matmul weights in 2 MiB pages (weights_place), or NULL */
    size_t huge_bytes;
    uint64_t fingerprint;  /* block_model_fingerprint(), 0 until computed */
    struct gpu_model *gpu; /* the layers on the device, beside a target there; else NULL */
    /* scratch shared by every state of this model (one thread uses it), grown on demand:
     * activations of `rows` rows, and [LOGIT_CHUNK] rows of gathered inputs and outputs */
    int rows;
    float *x, *xn, *q, *kb, *vb, *att, *g, *u, *ctx; /* [rows, H / QD / KD / I] */
    float *gin, *gout;                               /* [LOGIT_CHUNK, max(H, r)], [.., V] */
    float *w1row;                                    /* [r + 1] */
};

struct block_state {
    struct block_model *bm;
    int cap, len;
    float *k, *v;       /* [n_layers][n_kv][cap][D] context K/V (block rows written past len) */
    struct gpu_kv *gkv; /* the same on the device (bm->gpu), k and v then NULL */
};

const struct hf_config *block_model_config(const struct block_model *bm) {
    return &bm->cfg;
}
int block_has_markov(const struct block_model *bm) {
    return bm->cfg.markov_rank > 0;
}
int block_has_confidence(const struct block_model *bm) {
    return bm->conf_w != NULL;
}

void block_model_free(struct block_model *bm) {
    if (!bm) return;
    if (bm->layers)
        for (int i = 0; i < bm->cfg.n_layers; i++) layer_free(&bm->layers[i]);
    free(bm->layers);
    free(bm->hidden_norm), free(bm->norm), free(bm->conf_w), free(bm->inv_freq);
    free(bm->x), free(bm->xn), free(bm->q), free(bm->kb), free(bm->vb), free(bm->att);
    free(bm->g), free(bm->u), free(bm->ctx), free(bm->gin), free(bm->gout), free(bm->w1row);
    if (bm->huge) munmap(bm->huge, bm->huge_bytes);
    gpu_model_free(bm->gpu);
    st_close(bm->st);
    free(bm);
}

static int check_fit(const char *dir, const struct hf_config *c, const struct hf_config *t) {
    if (c->hidden_size != t->hidden_size || c->vocab_size != t->vocab_size ||
        c->n_target_layers != t->n_layers) {
        log_error("%s: drafter for a target with hidden %d, vocabulary %d, %d layers; the "
                  "target has %d, %d, %d",
                  dir, c->hidden_size, c->vocab_size, c->n_target_layers, t->hidden_size,
                  t->vocab_size, t->n_layers);
        log_hint("use the drafter trained for this target model");
        return ERR_ARG;
    }
    return OK;
}

static int load_heads(struct block_model *bm, const struct weights_src *src) {
    const struct hf_config *c = &bm->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, r = c->markov_rank;
    int rc = OK;
    /* DSpark checkpoints may carry frozen copies of the target's embedding and head */
    if (st_find(bm->st, "embed_tokens.weight"))
        rc = weight_bind(src, &bm->embed, "embed_tokens.weight", V, H);
    if (!rc && st_find(bm->st, "lm_head.weight"))
        rc = weight_bind(src, &bm->head, "lm_head.weight", V, H);
    if (!rc && r > 0) {
        if ((rc = weight_bind(src, &bm->w1, "markov_head.markov_w1.weight", V, r)) ||
            (rc = weight_bind(src, &bm->w2, "markov_head.markov_w2.weight", V, r)))
            return rc;
    }
    if (!rc && c->confidence_head) {
        int64_t in = H + (c->confidence_with_markov ? r : 0);
        struct weight w;
        float *b = NULL;
        if ((rc = weight_bind(src, &w, "confidence_head.proj.weight", 1, in)) ||
            (rc = weight_vec(src, &b, "confidence_head.proj.bias", 1, 0)))
            return rc;
        if (!(bm->conf_w = malloc(sizeof(float) * (size_t)in)))
            rc = ERR_NOMEM;
        else
            dtype_to_f32(w.dtype, w.data, bm->conf_w, (size_t)in);
        bm->conf_b = b ? b[0] : 0;
        free(b);
    }
    return rc;
}

/* The block's matmul weights into 2 MiB pages, as AMX tiles where the CPU has them (the
 * embedding and the Markov head stay in the map: they are read by rows). */
static void place_weights(struct block_model *bm) {
    const struct hf_config *c = &bm->cfg;
    int64_t H = c->hidden_size;
    struct weight_ref *list = malloc(sizeof *list * ((size_t)c->n_layers * 7 + 2));
    if (!list) return;
    int n = 0;
    list[n++] = (struct weight_ref){&bm->fc, H, H * bm->n_taps};
    if (bm->head.data) list[n++] = (struct weight_ref){&bm->head, c->vocab_size, H};
    for (int i = 0; i < c->n_layers; i++) n += layer_weight_refs(c, &bm->layers[i], list + n);
    bm->huge = weights_place(list, n, &bm->huge_bytes);
    free(list);
}

/* The drafter's layers on the GPU beside its target: the target's embedding and lm_head
 * serve unless the checkpoint ships its own. */
static int upload_gpu(struct block_model *bm) {
    const struct hf_config *c = &bm->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size;
    struct gpu_model_desc d;
    if (model_gpu_desc(c, bm->layers, bm->inv_freq, &d)) return ERR_NOMEM;
    /* its contexts follow the target's sequences (the CPU drafter has no limit either) */
    int most = model_config(bm->target)->max_pos + c->block_size;
    if (d.max_pos < most) d.max_pos = most;
    d.window = 0; /* the block attends to its whole context */
    d.embed = (struct gpu_weight){bm->embed.data, bm->embed.dtype, V, H};
    d.lm_head = (struct gpu_weight){bm->head.data, bm->head.dtype, V, H};
    d.final_norm = bm->norm;
    d.fc = (struct gpu_weight){bm->fc.data, bm->fc.dtype, H, H * bm->n_taps};
    d.hidden_norm = bm->hidden_norm;
    d.share = model_gpu(bm->target);
    d.input_terms = gpu_model_input_terms(d.share); /* the target's: one contract per pair */
    d.kv_bf16 = gpu_model_kv_bytes(d.share) == 2 ? 1 : -1; /* the target's */
    d.markov_w1 = (struct gpu_weight){bm->w1.data, bm->w1.dtype, V, c->markov_rank};
    d.markov_w2 = (struct gpu_weight){bm->w2.data, bm->w2.dtype, V, c->markov_rank};
    int rc = gpu_model_new(&d, &bm->gpu);
    free((void *)d.layers);
    if (rc) log_info("the drafter runs on the CPU beside its GPU target (slower; see above)");
    return rc;
}

int block_model_load(const char *dir, struct model *target, struct block_model **out) {
    *out = NULL;
    struct block_model *bm = calloc(1, sizeof *bm);
    if (!bm) return ERR_NOMEM;
    bm->target = target;
    bm->pool = model_pool(target);
    int rc = hf_config_load(dir, &bm->cfg);
    const struct hf_config *c = &bm->cfg;
    if (!rc && c->arch != ARCH_DSPARK && c->arch != ARCH_DFLASH) {
        log_error("%s is a %s, not a DSpark or DFlash drafter", dir, c->arch_name);
        rc = ERR_ARG;
    }
    if (!rc) rc = check_fit(dir, c, model_config(target));
    if (!rc) rc = st_open_dir(dir, &bm->st);
    if (rc) goto fail;
    bm->n_taps = c->n_target_layer_ids;
    struct weights_src src = {bm->st, dir, c->arch_name};
    int64_t H = c->hidden_size;
    bm->layers = calloc((size_t)c->n_layers, sizeof *bm->layers);
    bm->inv_freq = malloc(sizeof(float) * (size_t)(c->head_dim / 2));
    if (!bm->layers || !bm->inv_freq) {
        rc = ERR_NOMEM;
        goto fail;
    }
    if ((rc = weight_bind(&src, &bm->fc, "fc.weight", H, H * bm->n_taps)) ||
        (rc = weight_vec(&src, &bm->hidden_norm, "hidden_norm.weight", H, 0)) ||
        (rc = weight_vec(&src, &bm->norm, "norm.weight", H, 0)) || (rc = load_heads(bm, &src)))
        goto fail;
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = layer_load(&src, c, "layers", i, &bm->layers[i]))) goto fail;
    for (int i = 0; i < c->head_dim / 2; i++)
        bm->inv_freq[i] = (float)(1.0 / pow((double)c->rope_theta, (double)(2 * i) / c->head_dim));
    /* beside a GPU target on the device; where that fails (a shape the GPU backend does not
     * take, no device memory left) on the CPU, as it runs beside a CPU target */
    if (!model_on_gpu(target) || upload_gpu(bm)) place_weights(bm);
    int64_t gw = H > c->markov_rank ? H : c->markov_rank;
    bm->gin = malloc(sizeof(float) * LOGIT_CHUNK * (size_t)gw);
    bm->gout = malloc(sizeof(float) * LOGIT_CHUNK * (size_t)c->vocab_size);
    bm->w1row = malloc(sizeof(float) * (size_t)(c->markov_rank + 1));
    if (!bm->gin || !bm->gout || !bm->w1row) {
        rc = ERR_NOMEM;
        goto fail;
    }
    *out = bm;
    return OK;
fail:
    block_model_free(bm);
    return rc;
}

/* Grows the activation scratch to hold R rows. */
static int ensure_rows(struct block_model *bm, int R) {
    if (R <= bm->rows) return OK;
    const struct hf_config *c = &bm->cfg;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size, D = (size_t)c->head_dim;
    size_t QD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    struct {
        float **p;
        size_t width;
    } a[] = {{&bm->x, H},   {&bm->xn, H},   {&bm->ctx, H}, {&bm->q, QD}, {&bm->kb, KD},
             {&bm->vb, KD}, {&bm->att, QD}, {&bm->g, I},   {&bm->u, I}};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        float *p = realloc(*a[i].p, sizeof(float) * a[i].width * (size_t)R);
        if (!p) return ERR_NOMEM; /* the grown buffers stay; rows is unchanged */
        *a[i].p = p;
    }
    bm->rows = R;
    return OK;
}

int block_state_new(struct block_model *bm, int cap, struct block_state **out) {
    *out = NULL;
    const struct hf_config *c = &bm->cfg;
    struct block_state *st = calloc(1, sizeof *st);
    if (!st) return ERR_NOMEM;
    st->bm = bm;
    st->cap = cap;
    if (bm->gpu) {
        int rc = gpu_kv_new(bm->gpu, cap, &st->gkv);
        if (rc) {
            free(st);
            return rc;
        }
        *out = st;
        return OK;
    }
    size_t kv = (size_t)c->n_layers * c->n_kv_heads * (size_t)cap * (size_t)c->head_dim;
    st->k = malloc(sizeof(float) * kv);
    st->v = malloc(sizeof(float) * kv);
    if (!st->k || !st->v) {
        block_state_free(st);
        return ERR_NOMEM;
    }
    *out = st;
    return OK;
}

void block_state_free(struct block_state *st) {
    if (!st) return;
    free(st->k), free(st->v);
    gpu_kv_free(st->gkv);
    free(st);
}

void block_state_reset(struct block_state *st) {
    st->len = 0;
}
int block_state_len(const struct block_state *st) {
    return st->len;
}

/* A batched pass's rows [row0, row0 + n) belong to state st, at its positions pos0.. */
struct seg {
    struct block_state *st;
    int row0, n, pos0;
};

/* K (normed, roped) and V of the segments' rows src[T, H] into layer li's cache of each
 * segment's state at its positions. */
static void project_kv(struct block_model *bm, int li, const float *src, const struct seg *sg,
                       int n_seg, int T) {
    const struct hf_config *c = &bm->cfg;
    const struct layer *l = &bm->layers[li];
    int H = c->hidden_size, D = c->head_dim, nkv = c->n_kv_heads, KD = nkv * D;
    weight_matmul(bm->pool, bm->kb, src, &l->wk, l->bk, T, H, KD);
    weight_matmul(bm->pool, bm->vb, src, &l->wv, l->bv, T, H, KD);
    if (l->k_norm) cpu_rmsnorm(bm->kb, bm->kb, l->k_norm, T * nkv, D, c->rms_eps, 0);
    for (int s = 0; s < n_seg; s++) {
        const struct seg *g = &sg[s];
        struct block_state *st = g->st;
        const float *kb = bm->kb + (size_t)g->row0 * KD, *vb = bm->vb + (size_t)g->row0 * KD;
        cpu_rope(bm->kb + (size_t)g->row0 * KD, g->n, nkv, D, g->pos0, bm->inv_freq, 0);
        for (int h = 0; h < nkv; h++) {
            size_t base = (((size_t)li * nkv + h) * st->cap + (size_t)g->pos0) * D;
            for (int t = 0; t < g->n; t++) {
                memcpy(st->k + base + (size_t)t * D, kb + ((size_t)t * nkv + h) * D,
                       sizeof(float) * D);
                memcpy(st->v + base + (size_t)t * D, vb + ((size_t)t * nkv + h) * D,
                       sizeof(float) * D);
            }
        }
    }
}

int block_ctx_append(struct block_state *st, const float *fused, int n, float *ctx_rows) {
    struct block_model *bm = st->bm;
    const struct hf_config *c = &bm->cfg;
    int H = c->hidden_size, T = bm->n_taps * H;
    if (st->len + n > st->cap) return ERR_FULL;
    if (st->gkv) {
        if (ctx_rows) return ERR_UNSUPPORTED; /* the rows stay on the device */
        int rc = gpu_ctx_append(bm->gpu, st->gkv, st->len, fused, n);
        if (!rc) st->len += n;
        return rc;
    }
    if (ensure_rows(bm, n < CTX_CHUNK ? n : CTX_CHUNK)) return ERR_NOMEM;
    for (int done = 0; done < n; done += CTX_CHUNK) {
        int m = n - done < CTX_CHUNK ? n - done : CTX_CHUNK;
        weight_matmul(bm->pool, bm->ctx, fused + (size_t)done * T, &bm->fc, NULL, m, T, H);
        cpu_rmsnorm(bm->ctx, bm->ctx, bm->hidden_norm, m, H, c->rms_eps, 0);
        if (ctx_rows) memcpy(ctx_rows + (size_t)done * H, bm->ctx, sizeof(float) * m * H);
        struct seg g = {st, 0, m, st->len};
        for (int li = 0; li < c->n_layers; li++) project_kv(bm, li, bm->ctx, &g, 1, m);
        st->len += m;
    }
    return OK;
}

int block_ctx_width(const struct block_model *bm) {
    return 2 * bm->cfg.n_layers * bm->cfg.n_kv_heads * bm->cfg.head_dim;
}

/* Between rows (below) and the device cache's export layout [2][n_layers * n_kv][n][D]:
 * to_rows 1 from dev into rows, 0 back. */
static void permute_rows(const struct hf_config *c, float *dev, float *rows, int n, int to_rows) {
    int D = c->head_dim, nkv = c->n_kv_heads, W = 2 * c->n_layers * nkv * D;
    size_t per = (size_t)n * D, half = (size_t)c->n_layers * nkv * per;
    for (int li = 0; li < c->n_layers; li++)
        for (int h = 0; h < nkv; h++)
            for (int kv = 0; kv < 2; kv++) {
                float *d = dev + kv * half + ((size_t)li * nkv + h) * per;
                float *r = rows + ((size_t)(li * 2 + kv) * nkv + h) * D;
                for (int p = 0; p < n; p++)
                    if (to_rows)
                        memcpy(r + (size_t)p * W, d + (size_t)p * D, sizeof(float) * D);
                    else
                        memcpy(d + (size_t)p * D, r + (size_t)p * W, sizeof(float) * D);
            }
}

/* The device cache's first n positions through host memory, in or out */
static int gpu_ctx_rows(const struct block_state *st, float *rows, int n, int save) {
    const struct hf_config *c = &st->bm->cfg;
    int heads = c->n_layers * c->n_kv_heads;
    float *tmp = malloc(sizeof(float) * (size_t)block_ctx_width(st->bm) * (size_t)(n ? n : 1));
    if (!tmp) return ERR_NOMEM;
    int rc = OK;
    if (save) {
        rc = gpu_kv_export(st->gkv, n, heads, c->head_dim, tmp);
        if (!rc) permute_rows(c, tmp, rows, n, 1);
    } else {
        permute_rows(c, tmp, rows, n, 0);
        rc = gpu_kv_import(st->gkv, tmp, n, n, heads, c->head_dim);
    }
    free(tmp);
    return rc;
}

/* rows[p] holds, layer by layer, position p's keys [n_kv][D] and then its values */
int block_ctx_save(const struct block_state *st, float *rows, int n) {
    const struct hf_config *c = &st->bm->cfg;
    int D = c->head_dim, nkv = c->n_kv_heads, W = block_ctx_width(st->bm);
    if (n > st->len) n = st->len;
    if (st->gkv) return gpu_ctx_rows(st, rows, n, 1) ? 0 : n;
    for (int li = 0; li < c->n_layers; li++)
        for (int h = 0; h < nkv; h++) {
            size_t base = ((size_t)li * nkv + h) * st->cap * D;
            float *dk = rows + ((size_t)li * 2 * nkv + h) * D, *dv = dk + (size_t)nkv * D;
            for (int p = 0; p < n; p++) {
                memcpy(dk + (size_t)p * W, st->k + base + (size_t)p * D, sizeof(float) * D);
                memcpy(dv + (size_t)p * W, st->v + base + (size_t)p * D, sizeof(float) * D);
            }
        }
    return n;
}

int block_ctx_load(struct block_state *st, const float *rows, int n) {
    const struct hf_config *c = &st->bm->cfg;
    int D = c->head_dim, nkv = c->n_kv_heads, W = block_ctx_width(st->bm);
    if (n < 0 || n > st->cap) return ERR_FULL;
    if (st->gkv) {
        int rc = gpu_ctx_rows(st, (float *)rows, n, 0);
        st->len = rc ? 0 : n;
        return rc;
    }
    for (int li = 0; li < c->n_layers; li++)
        for (int h = 0; h < nkv; h++) {
            size_t base = ((size_t)li * nkv + h) * st->cap * D;
            const float *sk = rows + ((size_t)li * 2 * nkv + h) * D, *sv = sk + (size_t)nkv * D;
            for (int p = 0; p < n; p++) {
                memcpy(st->k + base + (size_t)p * D, sk + (size_t)p * W, sizeof(float) * D);
                memcpy(st->v + base + (size_t)p * D, sv + (size_t)p * W, sizeof(float) * D);
            }
        }
    st->len = n;
    return OK;
}

static void embed(struct block_model *bm, const int32_t *ids, int B, float *x) {
    if (!bm->embed.data) {
        model_embed(bm->target, ids, B, x);
        return;
    }
    size_t H = (size_t)bm->cfg.hidden_size, es = dtype_size(bm->embed.dtype);
    for (int i = 0; i < B; i++)
        dtype_to_f32(bm->embed.dtype, (const char *)bm->embed.data + (size_t)ids[i] * H * es,
                     x + (size_t)i * H, H);
}

/* The blocks on the GPU: every state's block is a sequence of the pass that attends to all
 * its rows; the hidden rows and, when asked, the logits of every row come back. */
static int forward_gpu(struct block_state *const *sts, const int32_t *const *ids, int n, int B,
                       float *const *hidden, float *const *logits) {
    struct gpu_seq_io io[BLOCK_MAX_BATCH];
    for (int i = 0; i < n; i++)
        io[i] = (struct gpu_seq_io){.kv = sts[i]->gkv,
                                    .pos0 = sts[i]->len,
                                    .ids = ids[i],
                                    .n = B,
                                    .logits = logits ? logits[i] : NULL,
                                    .all_rows = 1,
                                    .noncausal = 1,
                                    .hidden = hidden[i]};
    return gpu_forward_batch(sts[0]->bm->gpu, io, n);
}

/* The blocks of n states in one pass: every matmul, norm and activation runs over all n * B
 * rows, RoPE, the K/V writes and attention per state. Each kernel is batch-invariant, so a
 * block's rows are what it gets alone. logits (GPU only): every row's too. */
static int forward(struct block_state *const *sts, const int32_t *const *ids, int n, int B,
                   float *const *hidden, float *layer_out, float *const *logits) {
    struct block_model *bm = sts[0]->bm;
    const struct hf_config *c = &bm->cfg;
    int H = c->hidden_size, D = c->head_dim, QD = c->n_heads * D, T = n * B;
    struct seg sg[BLOCK_MAX_BATCH];
    if (n < 1 || n > BLOCK_MAX_BATCH) return ERR_ARG;
    for (int i = 0; i < n; i++) {
        if (sts[i]->bm != bm) return ERR_ARG;
        if (sts[i]->len + B > sts[i]->cap) return ERR_FULL;
        sg[i] = (struct seg){sts[i], i * B, B, sts[i]->len};
    }
    if (bm->gpu) return layer_out ? ERR_UNSUPPORTED : forward_gpu(sts, ids, n, B, hidden, logits);
    if (logits) return ERR_UNSUPPORTED;
    if (ensure_rows(bm, T)) return ERR_NOMEM;
    for (int i = 0; i < n; i++) embed(bm, ids[i], B, bm->x + (size_t)i * B * H);
    for (int li = 0; li < c->n_layers; li++) {
        const struct layer *l = &bm->layers[li];
        cpu_rmsnorm(bm->xn, bm->x, l->attn_norm, T, H, c->rms_eps, 0);
        weight_matmul(bm->pool, bm->q, bm->xn, &l->wq, l->bq, T, H, QD);
        if (l->q_norm) cpu_rmsnorm(bm->q, bm->q, l->q_norm, T * c->n_heads, D, c->rms_eps, 0);
        for (int i = 0; i < n; i++)
            cpu_rope(bm->q + (size_t)sg[i].row0 * QD, B, c->n_heads, D, sg[i].pos0, bm->inv_freq,
                     0);
        project_kv(bm, li, bm->xn, sg, n, T); /* block K/V after the context; not kept */
        for (int i = 0; i < n; i++) {
            const struct block_state *st = sts[i];
            size_t off = (size_t)li * c->n_kv_heads * st->cap * D;
            struct cpu_attn a = {
                .out = bm->att + (size_t)sg[i].row0 * QD,
                .q = bm->q + (size_t)sg[i].row0 * QD,
                .k = st->k + off,
                .v = st->v + off,
                .n = B,
                .pos0 = st->len,
                .cap = st->cap,
                .n_heads = c->n_heads,
                .n_kv_heads = c->n_kv_heads,
                .head_dim = D,
                .scale = 1.0f / sqrtf((float)D),
                .noncausal = 1,
            };
            cpu_attention(bm->pool, &a);
        }
        weight_matmul(bm->pool, bm->xn, bm->att, &l->wo, NULL, T, QD, H);
        for (size_t i = 0; i < (size_t)T * H; i++) bm->x[i] += bm->xn[i];
        layer_mlp(bm->pool, l, c, bm->x, bm->xn, bm->g, bm->u, T, 0);
        if (layer_out) memcpy(layer_out + (size_t)li * T * H, bm->x, sizeof(float) * T * H);
    }
    for (int i = 0; i < n; i++)
        cpu_rmsnorm(hidden[i], bm->x + (size_t)i * B * H, bm->norm, B, H, c->rms_eps, 0);
    return OK;
}

int block_forward(struct block_state *st, const int32_t *ids, int B, float *hidden,
                  float *layer_out) {
    return forward(&st, &ids, 1, B, &hidden, layer_out, NULL);
}

int block_forward_batch(struct block_state *const *sts, const int32_t *const *ids, int n, int B,
                        float *const *hidden, float *const *logits) {
    return forward(sts, ids, n, B, hidden, NULL, logits);
}

int block_logits_in_forward(const struct block_model *bm) {
    return bm->gpu != NULL;
}

static void lm_head(struct block_model *bm, const float *hidden, int n, float *logits) {
    if (!bm->head.data) {
        model_lm_head(bm->target, hidden, n, logits);
        return;
    }
    weight_matmul(bm->pool, logits, hidden, &bm->head, NULL, n, bm->cfg.hidden_size,
                  bm->cfg.vocab_size);
}

void block_logits(struct block_state *st, const float *hidden, int n, float *logits) {
    lm_head(st->bm, hidden, n, logits);
}

void block_logits_batch(struct block_model *bm, const float *const *hidden, const int *rows,
                        float *const *logits, int n) {
    size_t H = (size_t)bm->cfg.hidden_size, V = (size_t)bm->cfg.vocab_size;
    int total = 0;
    for (int i = 0; i < n; i++) total += rows[i];
    int gi = 0, gr = 0, si = 0, sr = 0; /* gather and scatter cursors: row gr of sequence gi */
    for (int done = 0, m; done < total; done += m) {
        m = total - done < LOGIT_CHUNK ? total - done : LOGIT_CHUNK;
        for (int k = 0; k < m; k++, gr++) {
            while (gr == rows[gi]) gi++, gr = 0;
            memcpy(bm->gin + (size_t)k * H, hidden[gi] + (size_t)gr * H, sizeof(float) * H);
        }
        lm_head(bm, bm->gin, m, bm->gout);
        for (int k = 0; k < m; k++, sr++) {
            while (sr == rows[si]) si++, sr = 0;
            memcpy(logits[si] + (size_t)sr * V, bm->gout + (size_t)k * V, sizeof(float) * V);
        }
    }
}

static const float *w1_row(struct block_model *bm, int32_t prev, float *out) {
    size_t r = (size_t)bm->cfg.markov_rank, es = dtype_size(bm->w1.dtype);
    dtype_to_f32(bm->w1.dtype, (const char *)bm->w1.data + (size_t)prev * r * es, out, r);
    return out;
}

void block_markov_bias(struct block_state *st, int32_t prev, float *bias) {
    struct block_model *bm = st->bm;
    if (bm->gpu && !gpu_markov_bias(bm->gpu, &prev, 1, &bias)) return;
    cpu_matmul(bm->pool, bias, w1_row(bm, prev, bm->w1row), bm->w2.data, bm->w2.dtype, NULL, 1,
               bm->cfg.markov_rank, bm->cfg.vocab_size);
}

void block_markov_bias_batch(struct block_model *bm, const int32_t *prev, int n,
                             float *const *bias) {
    int r = bm->cfg.markov_rank, V = bm->cfg.vocab_size;
    if (bm->gpu && !gpu_markov_bias(bm->gpu, prev, n, bias)) return; /* else on the CPU */
    for (int done = 0; done < n; done += LOGIT_CHUNK) {
        int m = n - done < LOGIT_CHUNK ? n - done : LOGIT_CHUNK;
        for (int i = 0; i < m; i++) w1_row(bm, prev[done + i], bm->gin + (size_t)i * r);
        cpu_matmul(bm->pool, bm->gout, bm->gin, bm->w2.data, bm->w2.dtype, NULL, m, r, V);
        for (int i = 0; i < m; i++)
            memcpy(bias[done + i], bm->gout + (size_t)i * V, sizeof(float) * (size_t)V);
    }
}

float block_confidence_logit(struct block_state *st, const float *h, int32_t prev) {
    struct block_model *bm = st->bm;
    int H = bm->cfg.hidden_size;
    double s = bm->conf_b;
    for (int i = 0; i < H; i++) s += (double)bm->conf_w[i] * h[i];
    if (bm->cfg.confidence_with_markov && bm->cfg.markov_rank > 0) {
        const float *w = w1_row(bm, prev, bm->w1row);
        for (int i = 0; i < bm->cfg.markov_rank; i++) s += (double)bm->conf_w[H + i] * w[i];
    }
    return (float)s;
}

static void hash_weight(XXH3_state_t *h, const struct weight *w, int64_t rows, int64_t cols) {
    XXH3_64bits_update(h, &w->dtype, sizeof w->dtype);
    int tiled = w->tiles != NULL; /* the AMX kernel rounds differently from the plain one */
    XXH3_64bits_update(h, &tiled, sizeof tiled);
    if (w->data) XXH3_64bits_update(h, w->data, (size_t)(rows * cols) * dtype_size(w->dtype));
}

static void hash_vec(XXH3_state_t *h, const float *v, int64_t n) {
    if (v) XXH3_64bits_update(h, v, sizeof(float) * (size_t)n);
}

uint64_t block_model_fingerprint(struct block_model *bm) {
    if (bm->fingerprint) return bm->fingerprint;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    const struct hf_config *c = &bm->cfg;
    int64_t H = c->hidden_size, KD = (int64_t)c->n_kv_heads * c->head_dim;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, "dspark-block-ctx-f32", 20); /* what block_ctx_save writes */
    int64_t ints[] = {H, c->n_layers, c->n_kv_heads, c->head_dim, bm->n_taps};
    XXH3_64bits_update(h, ints, sizeof ints);
    XXH3_64bits_update(h, c->target_layer_ids, sizeof(int) * (size_t)bm->n_taps);
    float eps = c->rms_eps;
    XXH3_64bits_update(h, &eps, sizeof eps);
    int on_gpu = bm->gpu != NULL; /* the device sums in other orders */
    XXH3_64bits_update(h, &on_gpu, sizeof on_gpu);
    XXH3_64bits_update(h, bm->inv_freq, sizeof(float) * (size_t)(c->head_dim / 2));
    hash_weight(h, &bm->fc, H, H * bm->n_taps);
    hash_vec(h, bm->hidden_norm, H);
    for (int i = 0; i < c->n_layers; i++) {
        const struct layer *l = &bm->layers[i];
        hash_weight(h, &l->wk, KD, H);
        hash_weight(h, &l->wv, KD, H);
        hash_vec(h, l->bk, KD), hash_vec(h, l->bv, KD), hash_vec(h, l->k_norm, c->head_dim);
    }
    uint64_t f = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return bm->fingerprint = f ? f : 1;
}
