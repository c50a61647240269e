/* model/layer.c: see layer.h. */
#include "model/layer.h"

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const struct st_tensor *need(const struct weights_src *src, const char *name, int64_t d0,
                                    int64_t d1) {
    const struct st_tensor *t = st_find(src->st, name);
    if (!t) {
        log_error("%s: tensor '%s' is missing", src->dir, name);
        log_hint("the checkpoint does not match its config.json architecture (%s)", src->arch);
        return NULL;
    }
    int nd = d1 < 0 ? 1 : 2;
    if (t->n_dims != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[96] = "";
        for (int i = 0; i < t->n_dims && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "",
                     (long long)t->shape[i]);
        log_error("%s: tensor '%s' in %s has shape [%s], config.json implies [%lld%s%lld]",
                  src->dir, name, t->file, got, (long long)d0, nd == 2 ? "," : "",
                  nd == 2 ? (long long)d1 : 0LL);
        return NULL;
    }
    if (!t->dtype_known) {
        log_error("%s: tensor '%s' has dtype %s; dspark reads F32, F16 and BF16", src->dir, name,
                  t->dtype_name);
        return NULL;
    }
    return t;
}

int weight_bind(const struct weights_src *src, struct weight *w, const char *name, int64_t rows,
                int64_t cols) {
    const struct st_tensor *t = need(src, name, rows, cols);
    if (!t) return ERR_FORMAT;
    w->data = t->data;
    w->dtype = t->dtype;
    w->tiles = NULL;
    return OK;
}

void weight_matmul(struct pool *pool, float *y, const float *x, const struct weight *w,
                   const float *bias, int n, int cols, int rows) {
    if (w->tiles)
        cpu_matmul_amx(pool, y, x, w->tiles, bias, n, cols, rows);
    else
        cpu_matmul(pool, y, x, w->data, w->dtype, bias, n, cols, rows);
}

void weights_matmul(struct pool *pool, const float *x, int n, int cols, int count,
                    const struct weight *const *ws, float *const *ys, const float *const *biases,
                    const int *rows) {
    struct cpu_amx_out outs[8];
    int tiled = count <= 8;
    for (int i = 0; i < count && tiled; i++) {
        tiled = ws[i]->tiles != NULL;
        outs[i] = (struct cpu_amx_out){ys[i], ws[i]->tiles, biases[i], rows[i]};
    }
    if (tiled) {
        cpu_matmul_amx_multi(pool, x, n, cols, outs, count);
        return;
    }
    for (int i = 0; i < count; i++)
        weight_matmul(pool, ys[i], x, ws[i], biases[i], n, cols, rows[i]);
}

/* A small vector copied to float; optional ones return OK with *out = NULL when absent. */
int weight_vec(const struct weights_src *src, float **out, const char *name, int64_t n,
               int optional) {
    *out = NULL;
    if (optional && !st_find(src->st, name)) return OK;
    const struct st_tensor *t = need(src, name, n, -1);
    if (!t) return ERR_FORMAT;
    if (!(*out = malloc(sizeof(float) * (size_t)n))) return ERR_NOMEM;
    dtype_to_f32(t->dtype, t->data, *out, (size_t)n);
    return OK;
}

/* Bytes of memory the system can still give (MemAvailable), 0 when unknown. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static size_t placed_size(const struct weight_ref *r, int amx) {
    if (amx && r->w->dtype == DTYPE_BF16) return cpu_amx_packed_size(r->rows, r->cols);
    return (size_t)r->rows * (size_t)r->cols * dtype_size(r->w->dtype);
}

void *weights_place(struct weight_ref *list, int n, size_t *bytes) {
    *bytes = 0;
    const int amx = cpu_amx_available();
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (placed_size(&list[i], amx) + 63) & ~(size_t)63;
    size_t avail = mem_available(), huge = (size_t)2 << 20;
    size_t len = (total + huge - 1) / huge * huge;
    if (!avail || !total || len > avail / 4) return NULL;
    void *buf = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return NULL;
    char *base = (char *)(((uintptr_t)buf + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(base, len, MADV_HUGEPAGE);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        struct weight_ref *r = &list[i];
        size_t sz = placed_size(r, amx);
        if (amx && r->w->dtype == DTYPE_BF16) {
            cpu_amx_pack(base + off, r->w->data, r->rows, r->cols);
            r->w->tiles = base + off;
        } else {
            memcpy(base + off, r->w->data, sz);
            r->w->data = base + off;
        }
        off += (sz + 63) & ~(size_t)63;
    }
    *bytes = len + huge;
    return buf;
}

int layer_weight_refs(const struct hf_config *c, struct layer *l, struct weight_ref *out) {
    int64_t H = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    out[0] = (struct weight_ref){&l->wq, QD, H};
    out[1] = (struct weight_ref){&l->wk, KD, H};
    out[2] = (struct weight_ref){&l->wv, KD, H};
    out[3] = (struct weight_ref){&l->wo, H, QD};
    out[4] = (struct weight_ref){&l->wg, I, H};
    out[5] = (struct weight_ref){&l->wu, I, H};
    out[6] = (struct weight_ref){&l->wd, H, I};
    return 7;
}

int layer_load(const struct weights_src *src, const struct hf_config *c, const char *prefix, int i,
               struct layer *l) {
    int64_t H = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    char n[256];
    int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%d.%s", prefix, i, suffix), n)
    if ((rc = weight_bind(src, &l->wq, NAME("self_attn.q_proj.weight"), QD, H)) ||
        (rc = weight_bind(src, &l->wk, NAME("self_attn.k_proj.weight"), KD, H)) ||
        (rc = weight_bind(src, &l->wv, NAME("self_attn.v_proj.weight"), KD, H)) ||
        (rc = weight_bind(src, &l->wo, NAME("self_attn.o_proj.weight"), H, QD)) ||
        (rc = weight_bind(src, &l->wg, NAME("mlp.gate_proj.weight"), I, H)) ||
        (rc = weight_bind(src, &l->wu, NAME("mlp.up_proj.weight"), I, H)) ||
        (rc = weight_bind(src, &l->wd, NAME("mlp.down_proj.weight"), H, I)) ||
        (rc = weight_vec(src, &l->attn_norm, NAME("input_layernorm.weight"), H, 0)) ||
        (rc = weight_vec(src, &l->ffn_norm, NAME("post_attention_layernorm.weight"), H, 0)) ||
        (rc = weight_vec(src, &l->bq, NAME("self_attn.q_proj.bias"), QD, 1)) ||
        (rc = weight_vec(src, &l->bk, NAME("self_attn.k_proj.bias"), KD, 1)) ||
        (rc = weight_vec(src, &l->bv, NAME("self_attn.v_proj.bias"), KD, 1)))
        return rc;
    if (c->arch == ARCH_QWEN2 && (!l->bq || !l->bk || !l->bv)) {
        log_error("%s: layer %d lacks the q/k/v biases Qwen2 has", src->dir, i);
        return ERR_FORMAT;
    }
    if (c->qk_norm && ((rc = weight_vec(src, &l->q_norm, NAME("self_attn.q_norm.weight"), D, 0)) ||
                       (rc = weight_vec(src, &l->k_norm, NAME("self_attn.k_norm.weight"), D, 0))))
        return rc;
#undef NAME
    return OK;
}

void layer_free(struct layer *l) {
    free(l->bq), free(l->bk), free(l->bv), free(l->attn_norm), free(l->ffn_norm);
    free(l->q_norm), free(l->k_norm);
    memset(l, 0, sizeof *l);
}

void layer_mlp(struct pool *pool, const struct layer *l, const struct hf_config *c, float *x,
               float *xn, float *g, float *u, int T, int bf16) {
    int H = c->hidden_size, I = c->intermediate_size;
    cpu_rmsnorm(xn, x, l->ffn_norm, T, H, c->rms_eps, bf16);
    const struct weight *ws[2] = {&l->wg, &l->wu};
    float *ys[2] = {g, u};
    const float *bs[2] = {NULL, NULL};
    const int rows[2] = {I, I};
    weights_matmul(pool, xn, T, H, 2, ws, ys, bs, rows);
    if (bf16) cpu_round_bf16(g, (size_t)T * I), cpu_round_bf16(u, (size_t)T * I);
    cpu_silu_mul(g, u, (size_t)T * I, bf16);
    weight_matmul(pool, xn, g, &l->wd, NULL, T, I, H);
    for (size_t i = 0; i < (size_t)T * H; i++) x[i] += xn[i];
    if (bf16) cpu_round_bf16(x, (size_t)T * H);
}
