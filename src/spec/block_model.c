/* spec/block_model.c: see block_model.h. Shapes: H hidden, D head_dim, QD = n_heads*D,
 * KD = n_kv_heads*D, T = n_taps * H_target, V vocabulary, r Markov rank, B block rows. */
#include "spec/block_model.h"

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/log.h"
#include "model/layer.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
};

struct block_state {
    struct block_model *bm;
    int cap, len;
    float *k, *v; /* [n_layers][n_kv][cap][D] context K/V (block rows written past len) */
    float *x, *xn, *q, *kb, *vb, *att, *g, *u, *ctx, *w1row;
    int max_rows; /* rows the scratch holds */
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
    if (bm->huge) munmap(bm->huge, bm->huge_bytes);
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
    place_weights(bm);
    *out = bm;
    return OK;
fail:
    block_model_free(bm);
    return rc;
}

int block_state_new(struct block_model *bm, int cap, struct block_state **out) {
    *out = NULL;
    const struct hf_config *c = &bm->cfg;
    struct block_state *st = calloc(1, sizeof *st);
    if (!st) return ERR_NOMEM;
    st->bm = bm;
    st->cap = cap;
    int R = c->block_size > 256 ? c->block_size : 256; /* rows: a block or a context chunk */
    st->max_rows = R;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size, D = (size_t)c->head_dim;
    size_t QD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    size_t kv = (size_t)c->n_layers * c->n_kv_heads * (size_t)cap * D;
    st->k = malloc(sizeof(float) * kv);
    st->v = malloc(sizeof(float) * kv);
    st->x = malloc(sizeof(float) * R * H);
    st->xn = malloc(sizeof(float) * R * H);
    st->ctx = malloc(sizeof(float) * R * H);
    st->q = malloc(sizeof(float) * R * QD);
    st->kb = malloc(sizeof(float) * R * KD);
    st->vb = malloc(sizeof(float) * R * KD);
    st->att = malloc(sizeof(float) * R * QD);
    st->g = malloc(sizeof(float) * R * I);
    st->u = malloc(sizeof(float) * R * I);
    st->w1row = malloc(sizeof(float) * (size_t)(c->markov_rank + 1));
    if (!st->k || !st->v || !st->x || !st->xn || !st->ctx || !st->q || !st->kb || !st->vb ||
        !st->att || !st->g || !st->u || !st->w1row) {
        block_state_free(st);
        return ERR_NOMEM;
    }
    *out = st;
    return OK;
}

void block_state_free(struct block_state *st) {
    if (!st) return;
    free(st->k), free(st->v), free(st->x), free(st->xn), free(st->ctx), free(st->q);
    free(st->kb), free(st->vb), free(st->att), free(st->g), free(st->u);
    free(st->w1row);
    free(st);
}

void block_state_reset(struct block_state *st) {
    st->len = 0;
}
int block_state_len(const struct block_state *st) {
    return st->len;
}

/* K (normed, roped) and V of rows src[n, H] into layer li's cache at positions pos0.. */
static void project_kv(struct block_state *st, int li, const float *src, int n, int pos0) {
    const struct hf_config *c = &st->bm->cfg;
    const struct layer *l = &st->bm->layers[li];
    int H = c->hidden_size, D = c->head_dim, nkv = c->n_kv_heads, KD = nkv * D;
    weight_matmul(st->bm->pool, st->kb, src, &l->wk, l->bk, n, H, KD);
    weight_matmul(st->bm->pool, st->vb, src, &l->wv, l->bv, n, H, KD);
    if (l->k_norm) cpu_rmsnorm(st->kb, st->kb, l->k_norm, n * nkv, D, c->rms_eps, 0);
    cpu_rope(st->kb, n, nkv, D, pos0, st->bm->inv_freq, 0);
    for (int h = 0; h < nkv; h++) {
        size_t base = (((size_t)li * nkv + h) * st->cap + (size_t)pos0) * D;
        for (int t = 0; t < n; t++) {
            memcpy(st->k + base + (size_t)t * D, st->kb + ((size_t)t * nkv + h) * D,
                   sizeof(float) * D);
            memcpy(st->v + base + (size_t)t * D, st->vb + ((size_t)t * nkv + h) * D,
                   sizeof(float) * D);
        }
    }
}

int block_ctx_append(struct block_state *st, const float *fused, int n, float *ctx_rows) {
    const struct hf_config *c = &st->bm->cfg;
    int H = c->hidden_size, T = st->bm->n_taps * H;
    if (st->len + n > st->cap) return ERR_FULL;
    for (int done = 0; done < n; done += st->max_rows) {
        int m = n - done < st->max_rows ? n - done : st->max_rows;
        weight_matmul(st->bm->pool, st->ctx, fused + (size_t)done * T, &st->bm->fc, NULL, m, T, H);
        cpu_rmsnorm(st->ctx, st->ctx, st->bm->hidden_norm, m, H, c->rms_eps, 0);
        if (ctx_rows) memcpy(ctx_rows + (size_t)done * H, st->ctx, sizeof(float) * m * H);
        for (int li = 0; li < c->n_layers; li++) project_kv(st, li, st->ctx, m, st->len);
        st->len += m;
    }
    return OK;
}

static void embed(struct block_state *st, const int32_t *ids, int B, float *x) {
    const struct block_model *bm = st->bm;
    if (!bm->embed.data) {
        model_embed(bm->target, ids, B, x);
        return;
    }
    size_t H = (size_t)bm->cfg.hidden_size, es = dtype_size(bm->embed.dtype);
    for (int i = 0; i < B; i++)
        dtype_to_f32(bm->embed.dtype, (const char *)bm->embed.data + (size_t)ids[i] * H * es,
                     x + (size_t)i * H, H);
}

int block_forward(struct block_state *st, const int32_t *ids, int B, float *hidden,
                  float *layer_out) {
    struct block_model *bm = st->bm;
    const struct hf_config *c = &bm->cfg;
    int H = c->hidden_size, D = c->head_dim, QD = c->n_heads * D;
    if (B > st->max_rows || st->len + B > st->cap) return ERR_FULL;
    embed(st, ids, B, st->x);
    for (int li = 0; li < c->n_layers; li++) {
        const struct layer *l = &bm->layers[li];
        cpu_rmsnorm(st->xn, st->x, l->attn_norm, B, H, c->rms_eps, 0);
        weight_matmul(bm->pool, st->q, st->xn, &l->wq, l->bq, B, H, QD);
        if (l->q_norm) cpu_rmsnorm(st->q, st->q, l->q_norm, B * c->n_heads, D, c->rms_eps, 0);
        cpu_rope(st->q, B, c->n_heads, D, st->len, bm->inv_freq, 0);
        project_kv(st, li, st->xn, B, st->len); /* block K/V after the context; not kept */
        size_t off = (size_t)li * c->n_kv_heads * st->cap * D;
        struct cpu_attn a = {
            .out = st->att,
            .q = st->q,
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
        weight_matmul(bm->pool, st->xn, st->att, &l->wo, NULL, B, QD, H);
        for (size_t i = 0; i < (size_t)B * H; i++) st->x[i] += st->xn[i];
        layer_mlp(bm->pool, l, c, st->x, st->xn, st->g, st->u, B, 0);
        if (layer_out) memcpy(layer_out + (size_t)li * B * H, st->x, sizeof(float) * B * H);
    }
    cpu_rmsnorm(hidden, st->x, bm->norm, B, H, c->rms_eps, 0);
    return OK;
}

void block_logits(struct block_state *st, const float *hidden, int n, float *logits) {
    struct block_model *bm = st->bm;
    if (!bm->head.data) {
        model_lm_head(bm->target, hidden, n, logits);
        return;
    }
    weight_matmul(bm->pool, logits, hidden, &bm->head, NULL, n, bm->cfg.hidden_size,
                  bm->cfg.vocab_size);
}

static const float *w1_row(struct block_state *st, int32_t prev) {
    const struct block_model *bm = st->bm;
    size_t r = (size_t)bm->cfg.markov_rank, es = dtype_size(bm->w1.dtype);
    dtype_to_f32(bm->w1.dtype, (const char *)bm->w1.data + (size_t)prev * r * es, st->w1row, r);
    return st->w1row;
}

void block_markov_bias(struct block_state *st, int32_t prev, float *bias) {
    struct block_model *bm = st->bm;
    cpu_matmul(bm->pool, bias, w1_row(st, prev), bm->w2.data, bm->w2.dtype, NULL, 1,
               bm->cfg.markov_rank, bm->cfg.vocab_size);
}

float block_confidence_logit(struct block_state *st, const float *h, int32_t prev) {
    const struct block_model *bm = st->bm;
    int H = bm->cfg.hidden_size;
    double s = bm->conf_b;
    for (int i = 0; i < H; i++) s += (double)bm->conf_w[i] * h[i];
    if (bm->cfg.confidence_with_markov && bm->cfg.markov_rank > 0) {
        const float *w = w1_row(st, prev);
        for (int i = 0; i < bm->cfg.markov_rank; i++) s += (double)bm->conf_w[H + i] * w[i];
    }
    return (float)s;
}
