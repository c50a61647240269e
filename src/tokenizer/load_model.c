/* tokenizer/load_model.c: the "model" (BPE vocabulary, merges, options) and "added_tokens"
 * sections of tokenizer.json, plus added_tokens_decoder from tokenizer_config.json. Every token
 * text is copied once into t->blob; the vocabulary hash points into it. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct added_src {
    const char *content;
    const char *file; /* where it was listed */
    int32_t id;
    struct tok_added flags;
};

/* An integer id in [0, TOK_MAX_IDS), or -1. */
static int32_t json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < TOK_MAX_IDS) || floor(d) != d) return -1;
    return (int32_t)d;
}

static int check_text(const char *s, const char *what, const char *file) {
    size_t n = strlen(s);
    if (n > TOK_MAX_TOKEN) {
        log_error("%s: %s of %zu bytes is too long", file, what, n);
        return ERR_FORMAT;
    }
    if (!tok_utf8_valid(s, n)) {
        log_error("%s: %s \"%.40s\" is not valid UTF-8", file, what, s);
        return ERR_FORMAT;
    }
    return OK;
}

static int parse_added(const cJSON *e, int32_t id, struct added_src *a, const char *file) {
    int bad = 0;
    const char *content = cJSON_IsObject(e) ? tok_json_str(e, "content", &bad) : NULL;
    if (!content || id < 0 || bad) {
        log_error("%s: an added token needs an integer \"id\" in [0, %d) and a string "
                  "\"content\"",
                  file, TOK_MAX_IDS);
        return ERR_FORMAT;
    }
    int rc = check_text(content, "added token", file);
    if (rc) return rc;
    a->content = content;
    a->file = file;
    a->id = id;
    a->flags.id = id;
    a->flags.special = (uint8_t)tok_json_bool(e, "special", 0, &bad);
    a->flags.lstrip = (uint8_t)tok_json_bool(e, "lstrip", 0, &bad);
    a->flags.rstrip = (uint8_t)tok_json_bool(e, "rstrip", 0, &bad);
    a->flags.single_word = (uint8_t)tok_json_bool(e, "single_word", 0, &bad);
    a->flags.normalized = (uint8_t)tok_json_bool(e, "normalized", !a->flags.special, &bad);
    if (bad) {
        log_error("%s: added token \"%.40s\" has a flag that is not a boolean", file, content);
        return ERR_FORMAT;
    }
    return OK;
}

/* Gathers added tokens from tokenizer.json, then those of tokenizer_config.json whose id is not
 * listed yet. */
static int gather_added(const cJSON *root, const cJSON *config, const char *file,
                        const char *cfg_file, struct added_src **out, int *n_out) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *dec =
        config ? cJSON_GetObjectItemCaseSensitive(config, "added_tokens_decoder") : NULL;
    if (list && !cJSON_IsNull(list) && !cJSON_IsArray(list)) {
        log_error("%s: \"added_tokens\" is not an array", file);
        return ERR_FORMAT;
    }
    if (dec && !cJSON_IsNull(dec) && !cJSON_IsObject(dec)) {
        log_error("%s: \"added_tokens_decoder\" is not an object", cfg_file);
        return ERR_FORMAT;
    }
    size_t cap = (size_t)cJSON_GetArraySize(list) + (size_t)cJSON_GetArraySize(dec);
    struct added_src *v = calloc(cap ? cap : 1, sizeof *v);
    if (!v) return ERR_NOMEM;
    int n = 0, rc = OK;
    const cJSON *e;
    if (cJSON_IsArray(list)) {
        cJSON_ArrayForEach(e, list) {
            int32_t id =
                cJSON_IsObject(e) ? json_id(cJSON_GetObjectItemCaseSensitive(e, "id")) : -1;
            if ((rc = parse_added(e, id, &v[n], file))) goto fail;
            n++;
        }
    }
    int n_json = n;
    if (cJSON_IsObject(dec)) {
        cJSON_ArrayForEach(e, dec) {
            char *end;
            long id = e->string ? strtol(e->string, &end, 10) : -1;
            if (!e->string || !*e->string || *end || id < 0 || id >= TOK_MAX_IDS) {
                log_error("%s: added_tokens_decoder key \"%.20s\" is not an id", cfg_file,
                          e->string ? e->string : "");
                rc = ERR_FORMAT;
                goto fail;
            }
            int seen = 0;
            for (int i = 0; i < n_json && !seen; i++) seen = v[i].id == (int32_t)id;
            if (seen) continue;
            if ((rc = parse_added(e, (int32_t)id, &v[n], cfg_file))) goto fail;
            n++;
        }
    }
    *out = v;
    *n_out = n;
    return OK;
fail:
    free(v);
    return rc;
}

static int put_text(struct tokenizer *t, int32_t id, const char *s, size_t len) {
    uint32_t off = (uint32_t)t->blob_len;
    memcpy(t->blob + off, s, len + 1);
    t->blob_len += len + 1;
    t->tok_off[id] = off;
    t->tok_len[id] = (uint32_t)len;
    return (int)off;
}

static int load_vocab(struct tokenizer *t, const cJSON *vocab, const char *file) {
    const cJSON *e;
    int rc = hash_str_reserve(&t->vocab, (size_t)cJSON_GetArraySize(vocab));
    if (rc) return rc;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        size_t len = strlen(e->string);
        if (t->tok_len[id] != TOK_NO_TOKEN) {
            log_error("%s: id %d is given to both \"%.40s\" and \"%.40s\"", file, id,
                      t->blob + t->tok_off[id], e->string);
            return ERR_FORMAT;
        }
        int off = put_text(t, id, e->string, len);
        int32_t old;
        if ((rc = hash_str_put(&t->vocab, t->blob + off, len, id, &old))) return rc;
        if (old >= 0) {
            log_error("%s: token \"%.40s\" is listed twice in the vocabulary", file, e->string);
            return ERR_FORMAT;
        }
    }
    return OK;
}

static int load_added(struct tokenizer *t, const struct added_src *src, int n) {
    t->added = calloc(n ? (size_t)n : 1, sizeof *t->added);
    if (!t->added) return ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const struct added_src *a = &src[i];
        const char *file = a->file;
        size_t len = strlen(a->content);
        if (!len) continue; /* HF ignores empty added tokens */
        int32_t in_vocab = hash_str_get(&t->vocab, a->content, len);
        if (in_vocab >= 0 && in_vocab != a->id) {
            log_error("%s: added token \"%.40s\" has id %d but the vocabulary gives it id %d", file,
                      a->content, a->id, in_vocab);
            return ERR_FORMAT;
        }
        if (hash_str_get(&t->added_ids, a->content, len) >= 0) {
            log_error("%s: added token \"%.40s\" is listed twice", file, a->content);
            return ERR_FORMAT;
        }
        if (t->tok_len[a->id] != TOK_NO_TOKEN && in_vocab != a->id) {
            log_error("%s: id %d is given to both \"%.40s\" and \"%.40s\"", file, a->id,
                      t->blob + t->tok_off[a->id], a->content);
            return ERR_FORMAT;
        }
        int off = put_text(t, a->id, a->content, len);
        int rc = hash_str_put(&t->added_ids, t->blob + off, len, a->id, NULL);
        if (rc) return rc;
        t->tok_special[a->id] = a->flags.special;
        t->added[t->n_added++] = a->flags;
    }
    return OK;
}

static int merge_parts(const cJSON *e, const char **a, size_t *la, const char **b, size_t *lb) {
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return ERR_FORMAT;
        *a = s, *la = (size_t)(sp - s), *b = sp + 1, *lb = strlen(sp + 1);
        return OK;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2) {
        const cJSON *x = e->child, *y = x->next;
        if (!cJSON_IsString(x) || !cJSON_IsString(y)) return ERR_FORMAT;
        *a = x->valuestring, *la = strlen(*a), *b = y->valuestring, *lb = strlen(*b);
        return OK;
    }
    return ERR_FORMAT;
}

static int load_merges(struct tokenizer *t, const cJSON *merges, const char *file) {
    if (!cJSON_IsArray(merges)) {
        log_error("%s: model \"merges\" is missing or not an array", file);
        return ERR_FORMAT;
    }
    int rc = hash_u64_reserve(&t->merges, (size_t)cJSON_GetArraySize(merges));
    if (rc) return rc;
    struct tok_buf cat = {0};
    uint32_t rank = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t la, lb;
        if (merge_parts(e, &a, &la, &b, &lb)) {
            log_error("%s: merge %u is neither \"left right\" nor [\"left\", \"right\"]", file,
                      rank);
            rc = ERR_FORMAT;
            break;
        }
        int32_t ia = hash_str_get(&t->vocab, a, la), ib = hash_str_get(&t->vocab, b, lb);
        cat.n = 0;
        if ((rc = tok_buf_add(&cat, a, la)) || (rc = tok_buf_add(&cat, b, lb))) break;
        int32_t im = hash_str_get(&t->vocab, cat.p, cat.n);
        if (ia < 0 || ib < 0 || im < 0) {
            log_error("%s: merge %u (\"%.*s\" + \"%.*s\") names a token that is not in the "
                      "vocabulary: \"%.40s\"",
                      file, rank, (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb), b,
                      ia < 0   ? a
                      : ib < 0 ? b
                               : cat.p);
            rc = ERR_FORMAT;
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        if ((rc = hash_u64_put(&t->merges, key, (uint64_t)rank << 32 | (uint32_t)im))) break;
        rank++;
    }
    tok_buf_free(&cat);
    return rc;
}

static int load_options(struct tokenizer *t, const cJSON *model, const char *file) {
    int bad = 0;
    t->byte_fallback = tok_json_bool(model, "byte_fallback", 0, &bad);
    t->fuse_unk = tok_json_bool(model, "fuse_unk", 0, &bad);
    t->ignore_merges = tok_json_bool(model, "ignore_merges", 0, &bad);
    const char *unk = tok_json_str(model, "unk_token", &bad);
    const char *pre = tok_json_str(model, "continuing_subword_prefix", &bad);
    const char *suf = tok_json_str(model, "end_of_word_suffix", &bad);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (bad || (dropout && !cJSON_IsNull(dropout) && !cJSON_IsNumber(dropout))) {
        log_error("%s: a BPE model option has the wrong type", file);
        return ERR_FORMAT;
    }
    if ((pre && *pre) || (suf && *suf)) {
        log_error("%s: BPE continuing_subword_prefix / end_of_word_suffix are not supported", file);
        return ERR_UNSUPPORTED;
    }
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0 && dropout->valuedouble < 1) {
        log_error("%s: BPE dropout is not supported", file);
        return ERR_UNSUPPORTED;
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = hash_str_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0) {
            log_error("%s: unk_token \"%.40s\" is not in the vocabulary", file, unk);
            return ERR_FORMAT;
        }
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = hash_str_get(&t->vocab, name, 6);
    }
    return OK;
}

int tok_load_model(struct tokenizer *t, const cJSON *root, const cJSON *config, const char *file,
                   const char *config_file) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    int bad = 0;
    const char *type = cJSON_IsObject(model) ? tok_json_str(model, "type", &bad) : NULL;
    if (!cJSON_IsObject(model) || bad) {
        log_error("%s: \"model\" is missing or not an object", file);
        return ERR_FORMAT;
    }
    if (type && strcmp(type, "BPE")) {
        log_error("%s: model type \"%s\" is not supported", file, type);
        log_hint("dspark handles BPE tokenizers (byte-level or with byte fallback)");
        return ERR_UNSUPPORTED;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        log_error("%s: model \"vocab\" is missing or not an object", file);
        return ERR_FORMAT;
    }
    /* First pass: check entries, size the blob and find the largest id. */
    size_t blob = 0, n_entries = 0;
    int32_t max_id = -1;
    const cJSON *e;
    int rc;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        if (id < 0) {
            log_error("%s: vocabulary entry \"%.40s\" has no integer id in [0, %d)", file,
                      e->string, TOK_MAX_IDS);
            return ERR_FORMAT;
        }
        if ((rc = check_text(e->string, "vocabulary entry", file))) return rc;
        blob += strlen(e->string) + 1;
        if (id > max_id) max_id = id;
        n_entries++;
    }
    struct added_src *added = NULL;
    int n_added = 0;
    if ((rc = gather_added(root, config, file, config_file, &added, &n_added))) return rc;
    for (int i = 0; i < n_added; i++) {
        blob += strlen(added[i].content) + 1;
        if (added[i].id > max_id) max_id = added[i].id;
    }
    n_entries += (size_t)n_added;
    if (max_id < 0) {
        log_error("%s: the vocabulary is empty", file);
        rc = ERR_FORMAT;
        goto done;
    }
    if ((size_t)max_id >= 2 * n_entries + 1024 || blob >= UINT32_MAX) {
        log_error("%s: id %d is far beyond the %zu tokens listed", file, max_id, n_entries);
        rc = ERR_FORMAT;
        goto done;
    }
    t->n_vocab = max_id + 1;
    t->blob = malloc(blob ? blob : 1);
    t->tok_off = calloc((size_t)t->n_vocab, sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_vocab * sizeof *t->tok_len);
    t->tok_special = calloc((size_t)t->n_vocab, 1);
    if (!t->blob || !t->tok_off || !t->tok_len || !t->tok_special) {
        rc = ERR_NOMEM;
        goto done;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) t->tok_len[i] = TOK_NO_TOKEN;
    if ((rc = load_vocab(t, vocab, file))) goto done;
    if ((rc = load_added(t, added, n_added))) goto done;
    if ((rc = load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), file))) goto done;
    rc = load_options(t, model, file);
done:
    free(added);
    return rc;
}
