/* model/model.c: binds a Hugging Face folder's tensors to struct model. Matmul weights stay
 * in the file's map (F32/F16/BF16, used as stored); norms and biases are copied to float.
 * Every tensor's presence, dtype and shape is checked before the first forward. */
#include "model/model_impl.h"

#include "backend/cpu/cpu.h"

#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct loader {
    struct model *m;
    struct weights_src src;
    size_t bytes_total, bytes_done;
    int progress;
};

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
    m->inv_freq = malloc(sizeof(float) * (size_t)(c->head_dim / 2));
    if (!m->x || !m->xn || !m->q || !m->k || !m->v || !m->att || !m->g || !m->u ||
        !m->last_logits || !m->inv_freq)
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

/* The matmul weights into 2 MiB pages (AMX tiles where available): see weights_place. */
static void weights_to_hugepages(struct model *m) {
    const struct hf_config *c = &m->cfg;
    struct weight_ref *list = malloc(sizeof *list * ((size_t)c->n_layers * 7 + 1));
    if (!list) return;
    int n = 0;
    for (int i = 0; i < c->n_layers; i++) n += layer_weight_refs(c, &m->layers[i], list + n);
    list[n++] = (struct weight_ref){&m->lm_head, c->vocab_size, c->hidden_size};
    const void *embed_map = m->embed.data;
    m->huge = weights_place(list, n, &m->huge_bytes);
    free(list);
    /* tied: one copy serves the lookup and the head (tiles are not rows, so not then) */
    if (m->huge && c->tie_embeddings && !m->lm_head.tiles && m->lm_head.data != embed_map)
        m->embed.data = m->lm_head.data;
}

#define W(w, r, cl) ((struct gpu_weight){(w).data, (w).dtype, (r), (cl)})

int model_gpu_desc(const struct hf_config *c, const struct layer *layers, const float *inv_freq,
                   struct gpu_model_desc *d) {
    int64_t H = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    struct gpu_layer_desc *ls = calloc((size_t)c->n_layers, sizeof *ls);
    if (!ls) return ERR_NOMEM;
    for (int i = 0; i < c->n_layers; i++) {
        const struct layer *l = &layers[i];
        ls[i] = (struct gpu_layer_desc){
            W(l->wq, QD, H), W(l->wk, KD, H), W(l->wv, KD, H), W(l->wo, H, QD), W(l->wg, I, H),
            W(l->wu, I, H),  W(l->wd, H, I),  l->bq,           l->bk,           l->bv,
            l->attn_norm,    l->ffn_norm,     l->q_norm,       l->k_norm,
        };
    }
    *d = (struct gpu_model_desc){
        .n_layers = c->n_layers,
        .hidden = (int)H,
        .ffn = (int)I,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = (int)D,
        .vocab = c->vocab_size,
        .max_pos = c->max_pos,
        .window = c->sliding_window,
        .rms_eps = c->rms_eps,
        .inv_freq = inv_freq,
        .layers = ls,
    };
    return OK;
}

int model_kv_elem_bytes(const struct model *m) {
    return m->gpu ? gpu_model_kv_bytes(m->gpu) : (int)sizeof(float);
}

struct gpu_model *model_gpu(struct model *m) {
    return m->gpu;
}

int model_pass_rows(struct model *m) {
    return m->gpu ? gpu_model_rows(m->gpu) : MODEL_CHUNK_ROWS;
}

/* Copies the weights to the GPU (they stay mapped on the host for drafters that share the
 * target's embedding and head). */
static int upload_gpu(struct model *m) {
    const struct hf_config *c = &m->cfg;
    if (m->act_bf16) {
        log_error("bf16 activations are not available on the GPU yet");
        return ERR_UNSUPPORTED;
    }
    int64_t H = c->hidden_size;
    struct gpu_model_desc d;
    if (model_gpu_desc(c, m->layers, m->inv_freq, &d)) return ERR_NOMEM;
    d.embed = W(m->embed, c->vocab_size, H);
    d.lm_head = W(m->lm_head, c->vocab_size, H);
    d.final_norm = m->final_norm;
    d.input_terms = m->gpu_inputs;
    d.kv_bf16 = m->gpu_kv == 2 ? 1 : m->gpu_kv == 4 ? -1 : 0;
    int rc = c->head_dim <= 256 ? gpu_model_new(&d, &m->gpu) : ERR_UNSUPPORTED;
    free((void *)d.layers);
    if (rc) log_hint("run on the CPU (without --gpu)");
    return rc;
}
#undef W

int model_load(const char *dir, const struct model_opts *opts, struct model **out) {
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) return ERR_NOMEM;
    struct loader L = {.m = m, .src = {.dir = dir}, .progress = opts && opts->show_progress};
    int rc = hf_config_load(dir, &m->cfg);
    if (!rc) rc = st_open_dir(dir, &m->st);
    if (rc) goto fail;
    L.src.st = m->st;
    L.src.arch = m->cfg.arch_name;
    const struct hf_config *c = &m->cfg;
    m->act_bf16 = opts && opts->bf16_activations;
    m->gpu_inputs = opts ? opts->gpu_inputs : 0;
    m->gpu_kv = opts ? opts->gpu_kv : 0;
    if (m->gpu_kv == 2 && !opts->gpu)
        log_info("bf16 K/V caches apply to --gpu only; the CPU's caches stay float32");
    if (m->gpu_inputs == 1 && !opts->gpu)
        log_info("bf16 GPU matmul inputs apply to --gpu only; the CPU's products stay exact");
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
    if ((rc = weight_bind(&L.src, &m->embed, "model.embed_tokens.weight", V, H)) ||
        (rc = weight_vec(&L.src, &m->final_norm, "model.norm.weight", H, 0)))
        goto fail;
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if ((rc = weight_bind(&L.src, &m->lm_head, "lm_head.weight", V, H))) {
        goto fail;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = layer_load(&L.src, c, "model.layers", i, &m->layers[i]))) goto fail;
    rope_init(m);
    size_t per_layer = ((size_t)c->n_heads * 2 + (size_t)c->n_kv_heads * 2) * c->head_dim * H +
                       (size_t)3 * c->intermediate_size * H;
    m->weight_bytes = 0;
    for (int i = 0; i < c->n_layers; i++)
        m->weight_bytes += per_layer * dtype_size(m->layers[i].wq.dtype);
    m->weight_bytes += (size_t)V * H * dtype_size(m->lm_head.dtype);
    if (opts && opts->gpu && (rc = upload_gpu(m))) goto fail;
    if (!m->gpu) prefault(&L);
    if (!m->gpu) weights_to_hugepages(m);
    *out = m;
    return OK;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m) {
    if (!m) return;
    if (m->layers) {
        for (int i = 0; i < m->cfg.n_layers; i++) layer_free(&m->layers[i]);
        free(m->layers);
    }
    free(m->final_norm);
    free(m->x), free(m->xn), free(m->q), free(m->k), free(m->v), free(m->att);
    free(m->g), free(m->u), free(m->last_logits), free(m->inv_freq);
    free(m->taps_scratch);
    gpu_model_free(m->gpu);
    if (m->huge) munmap(m->huge, m->huge_bytes);
    if (m->owns_pool) pool_free(m->pool);
    st_close(m->st);
    free(m);
}

int model_on_gpu(const struct model *m) {
    return m->gpu != NULL;
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
