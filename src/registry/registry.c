/* registry/registry.c: finding model folders and describing each one (see registry.h).
 * Names, matching and the --mode auto choice are in match.c. */
#include "registry/registry.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/log.h"
#include "format/hf_config.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CONFIG_BYTES    ((size_t)4 << 20)
#define MAX_TOKENIZER_BYTES ((size_t)512 << 20)
#define MAX_ST_HEADER_BYTES ((uint64_t)100 << 20)

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_config(const char *dir) {
    char p[PATH_MAX];
    return fs_join(p, sizeof p, dir, "config.json") == OK && fs_exists(p);
}

/* ---- config.json ---- */

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* Estimated parameters of a decoder (embeddings counted once when tied) or of a block drafter
 * (its layers and the fusion of the target's taps; it shares the target's embeddings). */
static int64_t estimate_params(const cJSON *c, enum reg_kind kind) {
    int64_t H = (int64_t)num(c, "hidden_size"), I = (int64_t)num(c, "intermediate_size");
    int64_t L = (int64_t)num(c, "num_hidden_layers"), V = (int64_t)num(c, "vocab_size");
    int64_t nh = (int64_t)num(c, "num_attention_heads"),
            nkv = (int64_t)num(c, "num_key_value_heads");
    int64_t D = (int64_t)num(c, "head_dim");
    if (nkv <= 0) nkv = nh;
    if (D <= 0 && nh > 0) D = H / nh;
    if (H <= 0 || L <= 0) return 0;
    int64_t layer = H * nh * D * 2 + H * nkv * D * 2 + 3 * H * I;
    if (kind != REG_CAUSAL_LM) {
        const cJSON *dc = cJSON_GetObjectItemCaseSensitive(c, "dflash_config");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(dc ? dc : c, "target_layer_ids");
        return L * layer + (int64_t)cJSON_GetArraySize(ids) * H * H;
    }
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
    return L * layer + V * H * (cJSON_IsFalse(tie) ? 2 : 1);
}

/* "4-bit" or "fp8" from quantization_config / quantization, or "" when not quantized. */
static void quant_label(const cJSON *root, char *out, size_t cap) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!cJSON_IsObject(q)) q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    *out = 0;
    if (!cJSON_IsObject(q)) return;
    int bits = (int)num(q, "bits");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    if (bits > 0)
        snprintf(out, cap, "%d-bit", bits);
    else if (cJSON_IsString(m))
        snprintf(out, cap, "%.20s", m->valuestring);
    else
        snprintf(out, cap, "quantized");
}

static int read_config(struct reg_model *m) {
    char path[PATH_MAX], *text = NULL;
    size_t len;
    if (fs_join(path, sizeof path, m->dir, "config.json") ||
        fs_read_file(path, &text, &len, MAX_CONFIG_BYTES))
        return ERR_IO;
    cJSON *root = json_parse(text, len, NULL);
    if (!cJSON_IsObject(root)) {
        snprintf(m->note, sizeof m->note, "config.json is not a JSON object");
        cJSON_Delete(root);
        free(text);
        return OK;
    }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(archs, 0), *mt = cJSON_GetObjectItem(root, "model_type");
    snprintf(m->arch, sizeof m->arch, "%s",
             cJSON_IsString(a0)   ? a0->valuestring
             : cJSON_IsString(mt) ? mt->valuestring
                                  : "?");
    m->kind = !strcmp(m->arch, "Qwen3DSparkModel")   ? REG_DSPARK
              : !strcmp(m->arch, "DFlashDraftModel") ? REG_DFLASH
                                                     : REG_CAUSAL_LM;
    /* multimodal configs keep the language model's fields under text_config */
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsObject(c)) c = root;
    m->vocab_size = (int)num(c, "vocab_size");
    m->hidden_size = (int)num(c, "hidden_size");
    m->n_layers = (int)num(c, "num_hidden_layers");
    m->n_target_layers = (int)num(c, "num_target_layers");
    m->n_params = estimate_params(c, m->kind);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "torch_dtype");
    if (!cJSON_IsString(dt)) dt = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    static const char *dtypes[][2] = {{"bfloat16", "bf16"}, {"float16", "f16"}, {"float32", "f32"}};
    for (size_t i = 0; cJSON_IsString(dt) && i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dt->valuestring, dtypes[i][0]))
            snprintf(m->dtype, sizeof m->dtype, "%s", dtypes[i][1]);
    char q[24];
    quant_label(root, q, sizeof q);
    if (*q) {
        snprintf(m->dtype, sizeof m->dtype, "%s", q);
        snprintf(m->note, sizeof m->note, "%s quantized weights (dspark loads F32, F16, BF16)", q);
    }
    struct hf_config hc;
    int rc = hf_config_parse(text, len, path, &hc);
    if (rc == ERR_UNSUPPORTED && !*m->note)
        snprintf(m->note, sizeof m->note, "architecture %.60s is not supported", m->arch);
    else if (rc && !*m->note)
        snprintf(m->note, sizeof m->note,
                 "config.json is invalid (`dspark generate --model` says why)");
    cJSON_Delete(root);
    free(text);
    return OK;
}

/* ---- weights and tokenizer ---- */

/* Adds up one safetensors file's tensors from its header: elements of float tensors
 * (F32/F16/BF16), and bytes of the others (quantized or integer). */
static void st_header_count(const char *path, int64_t *n_float, int64_t *n_other) {
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    if (!f) return;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
        char *h = n <= MAX_ST_HEADER_BYTES ? malloc(n + 1) : NULL;
        cJSON *root = h && fread(h, 1, n, f) == n ? json_parse(h, n, NULL) : NULL;
        const cJSON *t;
        cJSON_ArrayForEach(t, root) {
            const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
            const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
            if (!cJSON_IsString(dt) || cJSON_GetArraySize(off) != 2) continue;
            int fl = !strcmp(dt->valuestring, "F32") || !strcmp(dt->valuestring, "F16") ||
                     !strcmp(dt->valuestring, "BF16");
            if (!fl) {
                *n_other += (int64_t)(cJSON_GetArrayItem(off, 1)->valuedouble -
                                      cJSON_GetArrayItem(off, 0)->valuedouble);
                continue;
            }
            int64_t numel = 1;
            const cJSON *dim;
            cJSON_ArrayForEach(dim, cJSON_GetObjectItemCaseSensitive(t, "shape")) {
                numel *=
                    cJSON_IsNumber(dim) && dim->valuedouble >= 0 ? (int64_t)dim->valuedouble : 0;
            }
            *n_float += numel;
        }
        cJSON_Delete(root);
        free(h);
    }
    fclose(f);
}

static void read_weights(struct reg_model *m) {
    DIR *d = opendir(m->dir);
    struct dirent *de;
    int64_t n_float = 0, n_other = 0;
    int n_files = 0;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        char path[PATH_MAX];
        struct stat st;
        if (n <= 12 || strcmp(de->d_name + n - 12, ".safetensors") ||
            fs_join(path, sizeof path, m->dir, de->d_name) || stat(path, &st))
            continue;
        m->n_bytes += (int64_t)st.st_size;
        n_files++;
        st_header_count(path, &n_float, &n_other);
    }
    if (d) closedir(d);
    if (n_float && !n_other) m->n_params = n_float; /* exact, where config.json gave an estimate */
    if (*m->note) return;
    if (!n_files)
        snprintf(m->note, sizeof m->note, "no *.safetensors weights");
    else if (n_other)
        snprintf(m->note, sizeof m->note, "weights other than F32, F16, BF16 (quantized?)");
}

static void read_tokenizer(struct reg_model *m) {
    char path[PATH_MAX], *text;
    size_t len;
    if (m->kind != REG_CAUSAL_LM || fs_join(path, sizeof path, m->dir, "tokenizer.json") ||
        !fs_exists(path) || fs_read_file(path, &text, &len, MAX_TOKENIZER_BYTES))
        return;
    m->tok_hash = hash_bytes(text, len) | 1; /* never 0, which means "none" */
    free(text);
}

/* ---- entries ---- */

int registry_find(const struct registry *r, const char *dir) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return -1;
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->m[i].real, real)) return i;
    return -1;
}

int registry_add(struct registry *r, const char *dir, const char *name, int *index) {
    if (!has_config(dir)) return ERR_IO;
    int at = registry_find(r, dir);
    if (at >= 0) {
        if (index) *index = at;
        return OK;
    }
    struct reg_model *grown = realloc(r->m, sizeof *grown * (size_t)(r->n + 1));
    if (!grown) return ERR_NOMEM;
    r->m = grown;
    struct reg_model *m = &r->m[r->n];
    memset(m, 0, sizeof *m);
    char real[PATH_MAX];
    m->dir = strdup(dir);
    m->real = realpath(dir, real) ? strdup(real) : NULL;
    if (!m->dir || !m->real) {
        free(m->dir), free(m->real);
        return ERR_NOMEM;
    }
    if (!name) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') n--;
        const char *b = dir + n;
        while (b > dir && b[-1] != '/') b--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(dir + n - b), b);
    } else {
        snprintf(m->name, sizeof m->name, "%s", name);
    }
    /* a folder dspark cannot load gets a note, not an error message */
    int quiet = log_set_errors_quiet(1);
    int rc = read_config(m);
    if (!rc) read_weights(m), read_tokenizer(m);
    log_set_errors_quiet(quiet);
    if (rc) {
        free(m->dir), free(m->real);
        return rc;
    }
    m->servable = !*m->note;
    registry_stem(m->name, m->stem, sizeof m->stem, m->sizes, sizeof m->sizes);
    if (index) *index = r->n;
    r->n++;
    return OK;
}

/* The newest snapshot of a hub cache folder models--ORG--NAME, added as ORG/NAME. */
static int add_hub(struct registry *r, const char *dir, const char *entry) {
    char snaps[PATH_MAX], best[PATH_MAX] = "", path[PATH_MAX];
    if (fs_join(snaps, sizeof snaps, dir, "snapshots")) return OK;
    DIR *d = opendir(snaps);
    struct dirent *de;
    time_t newest = 0;
    while (d && (de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fs_join(path, sizeof path, snaps, de->d_name) ||
            !has_config(path) || stat(path, &st) || (*best && st.st_mtime <= newest))
            continue;
        newest = st.st_mtime;
        snprintf(best, sizeof best, "%s", path);
    }
    if (d) closedir(d);
    if (!*best) return OK;
    char name[256];
    size_t j = 0;
    for (const char *s = entry + 8; *s && j + 1 < sizeof name; s++) { /* "--" -> "/" */
        if (s[0] == '-' && s[1] == '-') {
            name[j++] = '/';
            s++;
        } else {
            name[j++] = *s;
        }
    }
    name[j] = 0;
    int rc = registry_add(r, best, name, NULL);
    return rc == ERR_NOMEM ? rc : OK;
}

static int add_root(struct registry *r, const char *root) {
    char **grown = realloc(r->roots, sizeof *grown * (size_t)(r->n_roots + 1));
    if (!grown) return ERR_NOMEM;
    r->roots = grown;
    if (!(r->roots[r->n_roots] = strdup(root))) return ERR_NOMEM;
    r->n_roots++;
    return OK;
}

/* Folders of dir (sorted) with config.json, added as PREFIX/ENTRY; depth 0 also looks one
 * level further down (ORG/NAME) and into hub cache folders. */
static int scan_dir(struct registry *r, const char *dir, const char *prefix, int depth) {
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort), rc = OK;
    for (int i = 0; i < n; i++) {
        const char *e = list[i]->d_name;
        char path[PATH_MAX], name[256];
        if (rc || e[0] == '.' || fs_join(path, sizeof path, dir, e) || !is_dir(path) ||
            snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "/" : "", e) >=
                (int)sizeof name)
            continue;
        if (has_config(path)) {
            int a = registry_add(r, path, name, NULL);
            if (a == ERR_NOMEM) rc = a;
        } else if (depth == 0 && !strncmp(e, "models--", 8)) {
            rc = add_hub(r, path, e);
        } else if (depth == 0) {
            rc = scan_dir(r, path, name, 1);
        }
    }
    for (int i = 0; i < n; i++) free(list[i]);
    if (n >= 0) free(list);
    return rc;
}

int registry_scan(struct registry *r, const char *root) {
    int rc = add_root(r, root);
    if (rc || !is_dir(root)) return rc;
    if (has_config(root)) { /* a model folder given as the root */
        rc = registry_add(r, root, NULL, NULL);
        return rc == ERR_NOMEM ? rc : OK;
    }
    return scan_dir(r, root, "", 0);
}

int registry_scan_default(struct registry *r, const char *models_dir) {
    int rc = OK;
    if (models_dir) {
        if (!is_dir(models_dir)) {
            log_error("--models-dir %s is not a folder", models_dir);
            log_hint("pass a folder that holds model folders (each with a config.json)");
            return ERR_ARG;
        }
        rc = registry_scan(r, models_dir);
    }
    const char *env = getenv("DSPARK_MODELS");
    for (const char *s = env; !rc && s && *s;) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        char dir[PATH_MAX];
        if (len && len < sizeof dir) {
            memcpy(dir, s, len);
            dir[len] = 0;
            rc = registry_scan(r, dir);
        }
        s = colon ? colon + 1 : s + len;
    }
    if (!rc) rc = registry_scan(r, "models");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char cache[PATH_MAX];
    int n = xdg && *xdg     ? snprintf(cache, sizeof cache, "%s/dspark/models", xdg)
            : home && *home ? snprintf(cache, sizeof cache, "%s/.cache/dspark/models", home)
                            : -1;
    if (!rc && n > 0 && n < (int)sizeof cache) rc = registry_scan(r, cache);
    return rc;
}

void registry_free(struct registry *r) {
    for (int i = 0; i < r->n; i++) free(r->m[i].dir), free(r->m[i].real);
    for (int i = 0; i < r->n_roots; i++) free(r->roots[i]);
    free(r->m);
    free(r->roots);
    memset(r, 0, sizeof *r);
}
