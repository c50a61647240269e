/* model/model.c: binds a Hugging Face folder's tensors to struct model. Matmul weights stay
 * in the file's map (F32/F16/BF16, used as stored); norms and biases are copied to float.
 * Every tensor's presence, dtype and shape is checked before the first forward. */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct loader {
    struct model *m;
    const char *dir;
    size_t bytes_total, bytes_done;
    int progress;
};

static const struct st_tensor *need(struct loader *L, const char *name, int64_t d0, int64_t d1) {
    const struct st_tensor *t = st_find(L->m->st, name);
    if (!t) {
        log_error("%s: tensor '%s' is missing", L->dir, name);
        log_hint("the checkpoint does not match its config.json architecture (%s)",
                 L->m->cfg.arch_name);
        return NULL;
    }
    int nd = d1 < 0 ? 1 : 2;
    if (t->n_dims != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[96] = "";
        for (int i = 0; i < t->n_dims && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "",
                     (long long)t->shape[i]);
        log_error("%s: tensor '%s' in %s has shape [%s], config.json implies [%lld%s%lld]", L->dir,
                  name, t->file, got, (long long)d0, nd == 2 ? "," : "",
                  nd == 2 ? (long long)d1 : 0LL);
        return NULL;
    }
    if (!t->dtype_known) {
        log_error("%s: tensor '%s' has dtype %s; dspark reads F32, F16 and BF16", L->dir, name,
                  t->dtype_name);
        return NULL;
    }
    return t;
}

static int bind_weight(struct loader *L, struct weight *w, const char *name, int64_t rows,
                       int64_t cols) {
    const struct st_tensor *t = need(L, name, rows, cols);
    if (!t) return ERR_FORMAT;
    w->data = t->data;
    w->dtype = t->dtype;
    return OK;
}

/* A small vector copied to float; optional ones return OK with *out = NULL when absent. */
static int load_vec(struct loader *L, float **out, const char *name, int64_t n, int optional) {
    *out = NULL;
    if (optional && !st_find(L->m->st, name)) return OK;
    const struct st_tensor *t = need(L, name, n, -1);
    if (!t) return ERR_FORMAT;
    if (!(*out = malloc(sizeof(float) * (size_t)n))) return ERR_NOMEM;
    dtype_to_f32(t->dtype, t->data, *out, (size_t)n);
    return OK;
}

static int load_layer(struct loader *L, int i) {
    const struct hf_config *c = &L->m->cfg;
    struct layer *l = &L->m->layers[i];
    int64_t H = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    char n[256];
    int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix), n)
    if ((rc = bind_weight(L, &l->wq, NAME("self_attn.q_proj.weight"), QD, H)) ||
        (rc = bind_weight(L, &l->wk, NAME("self_attn.k_proj.weight"), KD, H)) ||
        (rc = bind_weight(L, &l->wv, NAME("self_attn.v_proj.weight"), KD, H)) ||
        (rc = bind_weight(L, &l->wo, NAME("self_attn.o_proj.weight"), H, QD)) ||
        (rc = bind_weight(L, &l->wg, NAME("mlp.gate_proj.weight"), I, H)) ||
        (rc = bind_weight(L, &l->wu, NAME("mlp.up_proj.weight"), I, H)) ||
        (rc = bind_weight(L, &l->wd, NAME("mlp.down_proj.weight"), H, I)) ||
        (rc = load_vec(L, &l->attn_norm, NAME("input_layernorm.weight"), H, 0)) ||
        (rc = load_vec(L, &l->ffn_norm, NAME("post_attention_layernorm.weight"), H, 0)) ||
        (rc = load_vec(L, &l->bq, NAME("self_attn.q_proj.bias"), QD, 1)) ||
        (rc = load_vec(L, &l->bk, NAME("self_attn.k_proj.bias"), KD, 1)) ||
        (rc = load_vec(L, &l->bv, NAME("self_attn.v_proj.bias"), KD, 1)))
        return rc;
    if (c->arch == ARCH_QWEN2 && (!l->bq || !l->bk || !l->bv)) {
        log_error("%s: layer %d lacks the q/k/v biases Qwen2 has", L->dir, i);
        return ERR_FORMAT;
    }
    if (c->qk_norm && ((rc = load_vec(L, &l->q_norm, NAME("self_attn.q_norm.weight"), D, 0)) ||
                       (rc = load_vec(L, &l->k_norm, NAME("self_attn.k_norm.weight"), D, 0))))
        return rc;
#undef NAME
    return OK;
}

static void rope_init(struct model *m) {
    const struct hf_config *c = &m->cfg;
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        float f = (float)(1.0 / pow((double)c->rope_theta, (double)(2 * i) / c->head_dim));
        if (c->rope_factor > 0) { /* llama3: stretch low frequencies, blend the middle band */
            double old = c->rope_orig_max_pos;
            double lo_wl = old / c->rope_low_freq_factor, hi_wl = old / c->rope_high_freq_factor;
            double wl = 2 * M_PI / f;
            float scaled = wl > lo_wl ? f / c->rope_factor : f;
            if (!(wl < hi_wl) && !(wl > lo_wl)) {
                float s = (float)((old / wl - c->rope_low_freq_factor) /
                                  (c->rope_high_freq_factor - c->rope_low_freq_factor));
                scaled = (1 - s) * scaled / c->rope_factor + s * scaled;
            }
            f = scaled;
        }
        m->inv_freq[i] = f;
    }
}

static int alloc_scratch(struct model *m) {
    const struct hf_config *c = &m->cfg;
    size_t T = MODEL_CHUNK, H = c->hidden_size, I = c->intermediate_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    m->x = malloc(sizeof(float) * T * H);
    m->xn = malloc(sizeof(float) * T * H);
    m->q = malloc(sizeof(float) * T * QD);
    m->k = malloc(sizeof(float) * T * KD);
    m->v = malloc(sizeof(float) * T * KD);
    m->att = malloc(sizeof(float) * T * QD);
    m->g = malloc(sizeof(float) * T * I);
    m->u = malloc(sizeof(float) * T * I);
    m->last_logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    m->attn_scratch = malloc(sizeof(float) * (size_t)pool_size(m->pool) * (size_t)c->max_pos);
    m->inv_freq = malloc(sizeof(float) * (size_t)(c->head_dim / 2));
    if (!m->x || !m->xn || !m->q || !m->k || !m->v || !m->att || !m->g || !m->u ||
        !m->last_logits || !m->attn_scratch || !m->inv_freq)
        return ERR_NOMEM;
    return OK;
}

/* Reads every weight page once so the first tokens do not pay for page faults, with a bar. */
static void prefault(struct loader *L) {
    int n = st_count(L->m->st);
    for (int i = 0; i < n; i++) L->bytes_total += st_at(L->m->st, i)->n_bytes;
    long page = sysconf(_SC_PAGESIZE);
    volatile unsigned char sink = 0;
    int last_pct = -1;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = st_at(L->m->st, i);
        const unsigned char *p = t->data;
        for (size_t off = 0; off < t->n_bytes; off += (size_t)page) sink ^= p[off];
        L->bytes_done += t->n_bytes;
        int pct = L->bytes_total ? (int)(100 * L->bytes_done / L->bytes_total) : 100;
        if (L->progress && pct != last_pct) {
            last_pct = pct;
            int w = pct * 30 / 100;
            fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% %.0f MB", w,
                    "==============================", 30 - w, "", pct, L->bytes_done / 1e6);
        }
    }
    if (L->progress) fprintf(stderr, "\n");
    (void)sink;
}

int model_load(const char *dir, const struct model_opts *opts, struct model **out) {
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) return ERR_NOMEM;
    struct loader L = {.m = m, .dir = dir, .progress = opts && opts->show_progress};
    int rc = hf_config_load(dir, &m->cfg);
    if (!rc) rc = st_open_dir(dir, &m->st);
    if (rc) goto fail;
    const struct hf_config *c = &m->cfg;
    m->act_bf16 = opts && opts->bf16_activations;
    if (opts && opts->pool) {
        m->pool = opts->pool;
    } else {
        m->pool = pool_new(opts ? opts->n_threads : 0);
        m->owns_pool = 1;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->pool || !m->layers || (rc = alloc_scratch(m))) {
        rc = ERR_NOMEM;
        goto fail;
    }
    int64_t V = c->vocab_size, H = c->hidden_size;
    if ((rc = bind_weight(&L, &m->embed, "model.embed_tokens.weight", V, H)) ||
        (rc = load_vec(&L, &m->final_norm, "model.norm.weight", H, 0)))
        goto fail;
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if ((rc = bind_weight(&L, &m->lm_head, "lm_head.weight", V, H))) {
        goto fail;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(&L, i))) goto fail;
    rope_init(m);
    size_t per_layer = ((size_t)c->n_heads * 2 + (size_t)c->n_kv_heads * 2) * c->head_dim * H +
                       (size_t)3 * c->intermediate_size * H;
    m->weight_bytes = 0;
    for (int i = 0; i < c->n_layers; i++)
        m->weight_bytes += per_layer * dtype_size(m->layers[i].wq.dtype);
    m->weight_bytes += (size_t)V * H * dtype_size(m->lm_head.dtype);
    prefault(&L);
    *out = m;
    return OK;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    if (!m) return;
    if (m->layers) {
        for (int i = 0; i < m->cfg.n_layers; i++) {
            struct layer *l = &m->layers[i];
            free(l->bq), free(l->bk), free(l->bv), free(l->attn_norm), free(l->ffn_norm);
            free(l->q_norm), free(l->k_norm);
        }
        free(m->layers);
    }
    free(m->final_norm);
    free(m->x), free(m->xn), free(m->q), free(m->k), free(m->v), free(m->att);
    free(m->g), free(m->u), free(m->last_logits), free(m->attn_scratch), free(m->inv_freq);
    if (m->owns_pool) pool_free(m->pool);
    st_close(m->st);
    free(m);
}

const struct hf_config *model_config(const struct model *m) {
    return &m->cfg;
}
struct pool *model_pool(struct model *m) {
    return m->pool;
}
size_t model_weight_bytes(const struct model *m) {
    return m->weight_bytes;
}
