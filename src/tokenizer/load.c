/* tokenizer/load.c: tokenizer_load() and tokenizer_load_json(): reads tokenizer.json (and
 * tokenizer_config.json), checks it, and builds the tables; plus the small accessors. Every
 * problem is logged with the file it was found in. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- JSON helpers ---- */

const char *tok_json_str(const cJSON *obj, const char *key, int *bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v) || !v->valuestring) {
        *bad = 1;
        return NULL;
    }
    return v->valuestring;
}

int tok_json_bool(const cJSON *obj, const char *key, int dflt, int *bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) {
        *bad = 1;
        return dflt;
    }
    return cJSON_IsTrue(v);
}

/* ---- building ---- */

static int parse_json(const char *text, size_t len, const char *file, cJSON **out) {
    *out = NULL;
    if (!tok_utf8_valid(text, len)) {
        log_error("%s: the file is not valid UTF-8", file);
        return ERR_FORMAT;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        log_error("%s: not valid JSON (near byte %zu)", file, at);
        return ERR_FORMAT;
    }
    if (!cJSON_IsObject(j)) {
        log_error("%s: the top level is not a JSON object", file);
        cJSON_Delete(j);
        return ERR_FORMAT;
    }
    *out = j;
    return OK;
}

/* Added tokens go into the trie for raw text, or (normalized = true) into the trie for
 * normalized text under their normalized form. */
static int build_tries(struct tokenizer *t) {
    struct tok_buf norm = {0};
    int rc = OK;
    for (int i = 0; i < t->n_added && !rc; i++) {
        const struct tok_added *a = &t->added[i];
        const char *s = t->blob + t->tok_off[a->id];
        size_t n = t->tok_len[a->id];
        if (!a->normalized) {
            rc = tok_trie_add(&t->trie_raw, s, n, i);
        } else if (!(rc = tok_normalize(t->norm, t->n_norm, s, n, &norm))) {
            rc = tok_trie_add(&t->trie_norm, norm.p, norm.n, i);
        }
    }
    tok_buf_free(&norm);
    return rc;
}

/* bos_token / eos_token: a string, an AddedToken object with "content", or null. */
static int32_t config_token(const struct tokenizer *t, const cJSON *cfg, const char *key,
                            const char *file) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v) || !v->valuestring) return -1;
    int32_t id = tokenizer_find(t, v->valuestring);
    if (id < 0) log_info("%s: %s \"%.40s\" is not a token; ignoring it", file, key, v->valuestring);
    return id;
}

static int load(const char *json, size_t len, const char *file, const char *config,
                size_t config_len, const char *config_file, struct tokenizer **out) {
    *out = NULL;
    if (len > TOK_MAX_JSON) {
        log_error("%s: %zu bytes is too large for a tokenizer", file, len);
        return ERR_FORMAT;
    }
    cJSON *root = NULL, *cfg = NULL;
    int rc = parse_json(json, len, file, &root);
    if (!rc && config) rc = parse_json(config, config_len, config_file, &cfg);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        rc = ERR_NOMEM;
        goto done;
    }
    t->bos_id = t->eos_id = -1;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    t->has_decoder = dec && !cJSON_IsNull(dec);
    if ((rc = tok_load_model(t, root, cfg, file, config_file))) goto done;
    if ((rc = tok_norm_parse(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &t->norm,
                             &t->n_norm, file)))
        goto done;
    if ((rc = tok_pretok_parse(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &t->pretok,
                               &t->n_pretok, file)))
        goto done;
    if ((rc = tok_dec_parse(dec, &t->dec, &t->n_dec, file))) goto done;
    if ((rc = build_tries(t))) goto done;
    if (cfg) {
        t->bos_id = config_token(t, cfg, "bos_token", config_file);
        t->eos_id = config_token(t, cfg, "eos_token", config_file);
    }
done:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (rc) {
        if (rc == ERR_NOMEM) log_error("%s: out of memory while loading", file);
        tokenizer_free(t);
        return rc;
    }
    *out = t;
    return OK;
}

int tokenizer_load_json(const char *json, size_t len, const char *config, size_t config_len,
                        struct tokenizer **out) {
    return load(json, len, "tokenizer.json", config, config_len, "tokenizer_config.json", out);
}

int tokenizer_load(const char *dir, struct tokenizer **out) {
    *out = NULL;
    char path[4096], cpath[4096];
    int rc = fs_join(path, sizeof path, dir, "tokenizer.json");
    if (!rc) rc = fs_join(cpath, sizeof cpath, dir, "tokenizer_config.json");
    if (rc) return rc;
    if (!fs_exists(path)) {
        log_error("%s: no such file", path);
        log_hint("the model folder needs a Hugging Face tokenizer.json; models that ship only "
                 "tokenizer.model (SentencePiece) are not supported");
        return ERR_IO;
    }
    char *json = NULL, *config = NULL;
    size_t len = 0, config_len = 0;
    if ((rc = fs_read_file(path, &json, &len, TOK_MAX_JSON))) return rc;
    if (fs_exists(cpath) && (rc = fs_read_file(cpath, &config, &config_len, 64u << 20))) {
        free(json);
        return rc;
    }
    rc = load(json, len, path, config, config_len, cpath, out);
    free(json);
    free(config);
    return rc;
}

void tokenizer_free(struct tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_special);
    hash_str_free(&t->vocab);
    hash_str_free(&t->added_ids);
    hash_u64_free(&t->merges);
    free(t->added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    tok_norm_free(t->norm, t->n_norm);
    tok_pretok_free(t->pretok, t->n_pretok);
    tok_dec_free(t->dec, t->n_dec);
    free(t);
}

/* ---- accessors ---- */

int tokenizer_n_vocab(const struct tokenizer *t) {
    return t->n_vocab;
}
int32_t tokenizer_bos_id(const struct tokenizer *t) {
    return t->bos_id;
}
int32_t tokenizer_eos_id(const struct tokenizer *t) {
    return t->eos_id;
}

int32_t tokenizer_find(const struct tokenizer *t, const char *token_text) {
    size_t n = strlen(token_text);
    int32_t id = hash_str_get(&t->added_ids, token_text, n);
    return id >= 0 ? id : hash_str_get(&t->vocab, token_text, n);
}

const char *tokenizer_token(const struct tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] == TOK_NO_TOKEN) return NULL;
    if (len) *len = t->tok_len[id];
    return t->blob + t->tok_off[id];
}

int tokenizer_is_special(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->tok_special[id];
}
