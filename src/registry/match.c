/* registry/match.c: name stems, which drafter fits which target, and the --mode auto choice
 * (see registry.h). */
#include "registry/registry.h"

#include "base/err.h"
#include "base/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* "4b", "0.6b", "135m", "8x7b", "a3b": a parameter count. */
static int is_size(const char *t) {
    if (*t == 'a') t++; /* active parameters of a mixture of experts, e.g. 30b-a3b */
    const char *x = strchr(t, 'x');
    if (x) {
        char head[16];
        size_t n = (size_t)(x - t);
        if (!n || n >= sizeof head) return 0;
        memcpy(head, t, n);
        head[n] = 0;
        if (!all_digits(head)) return 0;
        t = x + 1;
    }
    size_t n = strlen(t);
    if (n < 2 || (t[n - 1] != 'b' && t[n - 1] != 'm' && t[n - 1] != 'k')) return 0;
    int dots = 0, digits = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (t[i] == '.') {
            if (dots++ || !digits) return 0;
        } else if (isdigit((unsigned char)t[i])) {
            digits++;
        } else {
            return 0;
        }
    }
    return digits && t[n - 2] != '.';
}

/* A prefix followed only by digits: "block7" with prefix "block". */
static int prefix_num(const char *t, const char *prefix) {
    size_t n = strlen(prefix);
    return !strncmp(t, prefix, n) && all_digits(t + n);
}

static int is_drafter_marker(const char *t) {
    return !strcmp(t, "dspark") || !strcmp(t, "dflash") || !strcmp(t, "draft") ||
           !strcmp(t, "drafter") || prefix_num(t, "block");
}

/* Quantization and file-format suffixes: the same weights in another encoding. */
static int is_quant_marker(const char *t) {
    static const char *words[] = {"mlx",  "gguf", "awq",  "gptq", "exl2",  "bnb",
                                  "fp8",  "fp16", "bf16", "f16",  "f32",   "fp32",
                                  "int4", "int8", "nf4",  "hqq",  "quant", "quantized"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcmp(t, words[i])) return 1;
    size_t n = strlen(t);
    if (n > 3 && !strcmp(t + n - 3, "bit")) { /* 4bit, 8bit */
        char head[16];
        if (n - 3 >= sizeof head) return 0;
        memcpy(head, t, n - 3);
        head[n - 3] = 0;
        return all_digits(head);
    }
    if ((t[0] == 'q' && isdigit((unsigned char)t[1])) || /* q4, q4_k_m, q8_0 */
        (t[0] == 'i' && t[1] == 'q' && isdigit((unsigned char)t[2])))
        return 1;
    return t[0] == 'w' && isdigit((unsigned char)t[1]) && strchr(t, 'a'); /* w4a16 */
}

static void append(char *out, size_t cap, const char *tok, size_t n) {
    size_t len = strlen(out);
    if (len + (len ? 1 : 0) + n + 1 > cap) return;
    if (len) out[len++] = ' ';
    memcpy(out + len, tok, n);
    out[len + n] = 0;
}

void registry_stem(const char *name, char *stem, size_t stem_cap, char *sizes, size_t sizes_cap) {
    char tok[32][32];
    int n = 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    *stem = 0, *sizes = 0;
    /* lower-case tokens split at '-', '_' and spaces */
    for (const char *s = base; *s && n < 32;) {
        while (*s == '-' || *s == '_' || *s == ' ') s++;
        size_t len = 0;
        while (s[len] && s[len] != '-' && s[len] != '_' && s[len] != ' ') len++;
        if (!len) break;
        size_t k = len < sizeof tok[0] - 1 ? len : sizeof tok[0] - 1;
        for (size_t i = 0; i < k; i++) tok[n][i] = (char)tolower((unsigned char)s[i]);
        tok[n++][k] = 0;
        s += len;
    }
    int first = 0;
    while (first < n && is_drafter_marker(tok[first])) first++; /* dspark_qwen3_4b_block7 */
    int end = first;
    while (end < n && !is_drafter_marker(tok[end]) && !is_quant_marker(tok[end])) end++;
    for (int i = first; i < end; i++) {
        const char *t = tok[i];
        if (is_size(t)) {
            append(sizes, sizes_cap, t, strlen(t));
            continue;
        }
        /* split where letters meet digits: qwen3 -> qwen 3, gemma4 -> gemma 4 */
        size_t a = 0, len = strlen(t);
        for (size_t j = 1; j <= len; j++) {
            if (j == len || (isalpha((unsigned char)t[j - 1]) && isdigit((unsigned char)t[j]))) {
                append(stem, stem_cap, t + a, j - a);
                a = j;
            }
        }
    }
}

/* ---- matching ---- */

/* 1 when the tokens of d appear as one run in the tokens of t. */
static int stem_within(const char *t, const char *d) {
    char tt[160], dd[160];
    if (!*d || snprintf(tt, sizeof tt, " %s ", t) >= (int)sizeof tt ||
        snprintf(dd, sizeof dd, " %s ", d) >= (int)sizeof dd)
        return 0;
    return strstr(tt, dd) != NULL;
}

enum reg_mode registry_match(const struct reg_model *t, const struct reg_model *d) {
    if (t == d || t->kind != REG_CAUSAL_LM || (t->real && d->real && !strcmp(t->real, d->real)))
        return REG_MODE_LOOKUP;
    if (d->kind == REG_CAUSAL_LM) {
        /* a draft model: the target's tokenizer, at most a quarter of its parameters */
        int same_tok = t->tok_hash && t->tok_hash == d->tok_hash;
        int smaller = d->n_params > 0 && t->n_params > 0 && d->n_params * 4 <= t->n_params;
        return same_tok && smaller ? REG_MODE_DRAFT : REG_MODE_LOOKUP;
    }
    /* a block drafter: the target's name (sizes included) and shapes */
    if (strcmp(t->sizes, d->sizes) || !stem_within(t->stem, d->stem)) return REG_MODE_LOOKUP;
    if ((d->hidden_size && t->hidden_size && d->hidden_size != t->hidden_size) ||
        (d->vocab_size && t->vocab_size && d->vocab_size != t->vocab_size) ||
        (d->n_target_layers && t->n_layers && d->n_target_layers != t->n_layers))
        return REG_MODE_LOOKUP;
    return d->kind == REG_DSPARK ? REG_MODE_DSPARK : REG_MODE_DFLASH;
}

static const char *basename_of(const struct reg_model *m) {
    const char *b = strrchr(m->name, '/');
    return b ? b + 1 : m->name;
}

/* 2 when d is the target's own drafter folder (DIR-draft, DIR-dspark, DIR-dflash next to DIR),
 * 1 when it is only named so (elsewhere), else 0. */
static int beside(const struct reg_model *t, const struct reg_model *d, enum reg_mode mode) {
    static const char *suffix[] = {"", "-draft", "-dflash", "-dspark"};
    const char *tb = basename_of(t), *db = basename_of(d);
    size_t n = strlen(tb), rn = t->real ? strlen(t->real) : 0;
    if (rn && d->real && !strncmp(d->real, t->real, rn) && !strcmp(d->real + rn, suffix[mode]))
        return 2;
    return !strncmp(db, tb, n) && !strcmp(db + n, suffix[mode]);
}

/* Sort context for registry_drafters (qsort has none). */
static const struct registry *sort_r;
static const struct reg_model *sort_t;
static enum reg_mode sort_mode;

static int better(const void *pa, const void *pb) {
    const struct reg_model *a = &sort_r->m[*(const int *)pa], *b = &sort_r->m[*(const int *)pb];
    int ba = beside(sort_t, a, sort_mode), bb = beside(sort_t, b, sort_mode);
    if (ba != bb) return bb - ba;
    if (a->servable != b->servable) return b->servable - a->servable;
    if (sort_mode == REG_MODE_DRAFT && a->n_params != b->n_params)
        return a->n_params < b->n_params ? -1 : 1;
    return strcmp(a->name, b->name);
}

int registry_drafters(const struct registry *r, int t, enum reg_mode mode, int *out, int cap) {
    int n = 0;
    for (int i = 0; i < r->n && n < cap; i++)
        if (mode != REG_MODE_LOOKUP && registry_match(&r->m[t], &r->m[i]) == mode) out[n++] = i;
    sort_r = r, sort_t = &r->m[t], sort_mode = mode;
    qsort(out, (size_t)n, sizeof *out, better);
    return n;
}

int registry_choose(const struct registry *r, int t, int given, int block_ok,
                    struct reg_choice *out) {
    *out = (struct reg_choice){REG_MODE_LOOKUP, -1};
    if (given >= 0) {
        const struct reg_model *tm = &r->m[t], *d = &r->m[given];
        if (d->kind == REG_DSPARK || d->kind == REG_DFLASH) {
            *out = (struct reg_choice){d->kind == REG_DSPARK ? REG_MODE_DSPARK : REG_MODE_DFLASH,
                                       given};
            return OK;
        }
        /* a given draft model needs only the target's tokenizer, not a quarter of its size */
        if (given == t || (tm->real && d->real && !strcmp(tm->real, d->real))) {
            log_error("--drafter %s is the target model itself", d->dir);
            log_hint("give a DSpark or DFlash drafter or a smaller model, or use --mode lookup");
            return ERR_ARG;
        }
        if (tm->tok_hash && d->tok_hash && tm->tok_hash != d->tok_hash) {
            log_error("--drafter %s does not share the tokenizer of %s", d->dir, tm->dir);
            log_hint("a draft model needs the target's tokenizer.json; or use --mode lookup");
            return ERR_ARG;
        }
        *out = (struct reg_choice){REG_MODE_DRAFT, given};
        return OK;
    }
    static const enum reg_mode order[] = {REG_MODE_DSPARK, REG_MODE_DFLASH, REG_MODE_DRAFT};
    for (size_t k = block_ok ? 0 : 2; k < sizeof order / sizeof order[0]; k++) {
        /* a drafter dspark cannot load is listed by `dspark models` but never chosen */
        int cand[64], n = registry_drafters(r, t, order[k], cand, 64);
        for (int i = 0; i < n; i++) {
            if (!r->m[cand[i]].servable) continue;
            *out = (struct reg_choice){order[k], cand[i]};
            return OK;
        }
    }
    return OK;
}

const char *registry_mode_name(enum reg_mode m) {
    static const char *names[] = {"lookup", "draft", "dflash", "dspark"};
    return (unsigned)m < 4 ? names[m] : "?";
}

const char *registry_kind_name(enum reg_kind k) {
    return k == REG_DSPARK ? "dspark drafter" : k == REG_DFLASH ? "dflash drafter" : "model";
}
