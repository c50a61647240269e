/* format/safetensors.c: parsing and validating safetensors headers; sharded folders.
 * File layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {}},
 * then the data section; offsets are relative to its start. */
#include "format/safetensors.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER (100u << 20) /* 100 MiB of JSON is far beyond any real model */

struct st_set {
    struct st_tensor *tensors; /* sorted by name */
    int n_tensors;
    struct fs_map *maps; /* one per file (empty when parsed from memory) */
    int n_maps;
    char **files; /* file labels, owned */
    int n_files;
};

int st_count(const struct st_set *s) {
    return s->n_tensors;
}
const struct st_tensor *st_at(const struct st_set *s, int i) {
    return &s->tensors[i];
}

int64_t st_numel(const struct st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

const struct st_tensor *st_find(const struct st_set *s, const char *name) {
    struct st_tensor key = {.name = (char *)name};
    return bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof key, cmp_tensor);
}

void st_close(struct st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->tensors);
    for (int i = 0; i < s->n_maps; i++) fs_unmap(&s->maps[i]);
    free(s->maps);
    for (int i = 0; i < s->n_files; i++) free(s->files[i]);
    free(s->files);
    free(s);
}

static size_t elem_size(const char *dt, int *known, enum dtype *t) {
    static const struct {
        const char *name;
        size_t size;
        int known;
        enum dtype t;
    } tab[] = {
        {"F32", 4, 1, DTYPE_F32}, {"F16", 2, 1, DTYPE_F16}, {"BF16", 2, 1, DTYPE_BF16},
        {"F64", 8, 0, 0},         {"I64", 8, 0, 0},         {"I32", 4, 0, 0},
        {"I16", 2, 0, 0},         {"I8", 1, 0, 0},          {"U8", 1, 0, 0},
        {"U16", 2, 0, 0},         {"U32", 4, 0, 0},         {"U64", 8, 0, 0},
        {"BOOL", 1, 0, 0},        {"F8_E4M3", 1, 0, 0},     {"F8_E5M2", 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (strcmp(dt, tab[i].name) == 0) {
            *known = tab[i].known;
            *t = tab[i].t;
            return tab[i].size;
        }
    }
    return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int parse_tensor(const cJSON *item, const char *label, const uint8_t *data,
                        uint64_t data_bytes, struct st_tensor *t) {
    const char *name = item->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsObject(item) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        log_error("%s: tensor '%s' needs \"dtype\", \"shape\" and two \"data_offsets\"", label,
                  name);
        return ERR_FORMAT;
    }
    size_t esize = elem_size(dt->valuestring, &t->dtype_known, &t->dtype);
    if (!esize) {
        log_error("%s: tensor '%s' has unknown dtype '%.16s'", label, name, dt->valuestring);
        return ERR_FORMAT;
    }
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS) {
        log_error("%s: tensor '%s' has %d dims (at most %d supported)", label, name, nd,
                  ST_MAX_DIMS);
        return ERR_FORMAT;
    }
    t->n_dims = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_u64(cJSON_GetArrayItem(shape, i), &d) || d > (uint64_t)INT64_MAX) {
            log_error("%s: tensor '%s' has an invalid dimension %d (must be an integer >= 0)",
                      label, name, i);
            return ERR_FORMAT;
        }
        t->shape[i] = (int64_t)d;
        if (d && numel > UINT64_MAX / d) {
            log_error("%s: tensor '%s' shape overflows", label, name);
            return ERR_FORMAT;
        }
        numel *= d;
    }
    uint64_t begin, end;
    if (!json_u64(cJSON_GetArrayItem(offs, 0), &begin) ||
        !json_u64(cJSON_GetArrayItem(offs, 1), &end) || begin > end || end > data_bytes) {
        log_error("%s: tensor '%s' has data_offsets outside the file's %llu data bytes "
                  "(file truncated or header wrong)",
                  label, name, (unsigned long long)data_bytes);
        return ERR_FORMAT;
    }
    if (numel > UINT64_MAX / esize || numel * esize != end - begin) {
        log_error("%s: tensor '%s' is %llu bytes but its shape and dtype need %llu", label, name,
                  (unsigned long long)(end - begin), (unsigned long long)(numel * esize));
        return ERR_FORMAT;
    }
    t->data = data + begin;
    t->n_bytes = (size_t)(end - begin);
    return OK;
}

/* Appends the tensors of one file image to s. */
static int parse_into(struct st_set *s, const void *buf, size_t n_bytes, const char *label) {
    if (n_bytes < 8) {
        log_error("%s: %zu bytes is too short for a safetensors file", label, n_bytes);
        return ERR_FORMAT;
    }
    const uint8_t *b = buf;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    if (hlen > ST_MAX_HEADER || hlen > n_bytes - 8) {
        log_error("%s: header length %llu does not fit in the file (%zu bytes)", label,
                  (unsigned long long)hlen, n_bytes);
        log_hint("the file is truncated or not a safetensors file; download it again");
        return ERR_FORMAT;
    }
    const char *why = "not an object";
    cJSON *root = json_parse((const char *)b + 8, (size_t)hlen, &why);
    if (!cJSON_IsObject(root)) {
        log_error("%s: header is not a JSON object (%s)", label, why);
        cJSON_Delete(root);
        return ERR_FORMAT;
    }
    int n = 0;
    for (cJSON *it = root->child; it; it = it->next) n++;
    struct st_tensor *nt = realloc(s->tensors, sizeof *nt * (size_t)(s->n_tensors + n + 1));
    if (!nt) {
        cJSON_Delete(root);
        return ERR_NOMEM;
    }
    s->tensors = nt;
    const char *file = s->files[s->n_files - 1];
    const uint8_t *data = b + 8 + hlen;
    uint64_t data_bytes = n_bytes - 8 - hlen;
    int rc = OK;
    for (cJSON *it = root->child; it; it = it->next) {
        if (!it->string) continue;
        if (strcmp(it->string, "__metadata__") == 0) continue;
        struct st_tensor *t = &s->tensors[s->n_tensors];
        memset(t, 0, sizeof *t);
        rc = parse_tensor(it, label, data, data_bytes, t);
        if (rc) break;
        t->name = strdup(it->string);
        if (!t->name) {
            rc = ERR_NOMEM;
            break;
        }
        t->file = file;
        s->n_tensors++;
    }
    cJSON_Delete(root);
    return rc;
}

static int add_file_label(struct st_set *s, const char *label) {
    char **f = realloc(s->files, sizeof *f * (size_t)(s->n_files + 1));
    if (!f) return ERR_NOMEM;
    s->files = f;
    if (!(f[s->n_files] = strdup(label))) return ERR_NOMEM;
    s->n_files++;
    return OK;
}

/* Sorts by name and rejects duplicates (a name in two shards is ambiguous). */
static int finish(struct st_set *s) {
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_tensor);
    for (int i = 1; i < s->n_tensors; i++) {
        if (strcmp(s->tensors[i - 1].name, s->tensors[i].name) == 0) {
            log_error("tensor '%s' appears twice (%s and %s)", s->tensors[i].name,
                      s->tensors[i - 1].file, s->tensors[i].file);
            return ERR_FORMAT;
        }
    }
    return OK;
}

int st_parse(const void *buf, size_t n_bytes, const char *label, struct st_set **out) {
    *out = NULL;
    struct st_set *s = calloc(1, sizeof *s);
    if (!s) return ERR_NOMEM;
    int rc = add_file_label(s, label);
    if (!rc) rc = parse_into(s, buf, n_bytes, label);
    if (!rc) rc = finish(s);
    if (rc) {
        st_close(s);
        return rc;
    }
    *out = s;
    return OK;
}

static int add_mapped_file(struct st_set *s, const char *path) {
    struct fs_map *m = realloc(s->maps, sizeof *m * (size_t)(s->n_maps + 1));
    if (!m) return ERR_NOMEM;
    s->maps = m;
    int rc = fs_map(path, &m[s->n_maps]);
    if (rc) return rc;
    s->n_maps++;
    if ((rc = add_file_label(s, path))) return rc;
    return parse_into(s, m[s->n_maps - 1].data, m[s->n_maps - 1].n_bytes, path);
}

int st_open_file(const char *path, struct st_set **out) {
    *out = NULL;
    struct st_set *s = calloc(1, sizeof *s);
    if (!s) return ERR_NOMEM;
    int rc = add_mapped_file(s, path);
    if (!rc) rc = finish(s);
    if (rc) {
        st_close(s);
        return rc;
    }
    *out = s;
    return OK;
}

/* The shard names are the distinct values of index.json's "weight_map". */
static int open_sharded(const char *dir, const char *index_path, struct st_set *s) {
    char *text = NULL;
    size_t len = 0;
    int rc = fs_read_file(index_path, &text, &len, 64u << 20);
    if (rc) return rc;
    cJSON *root = json_parse(text, len, NULL);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        log_error("%s: no \"weight_map\" object", index_path);
        cJSON_Delete(root);
        return ERR_FORMAT;
    }
    for (const cJSON *it = wm->child; it && !rc; it = it->next) {
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || it->valuestring[0] == '.') {
            log_error("%s: weight_map entry for '%s' is not a plain file name", index_path,
                      it->string ? it->string : "?");
            rc = ERR_FORMAT;
            break;
        }
        char path[4096];
        if ((rc = fs_join(path, sizeof path, dir, it->valuestring))) break;
        int seen = 0;
        for (int i = 0; i < s->n_files && !seen; i++) seen = strcmp(s->files[i], path) == 0;
        if (!seen) rc = add_mapped_file(s, path);
    }
    if (!rc) rc = finish(s);
    /* Every tensor the index names must exist in the shard it names. */
    for (const cJSON *it = wm->child; it && !rc; it = it->next) {
        const struct st_tensor *t = st_find(s, it->string);
        if (!t || strcmp(strrchr(t->file, '/') + 1, it->valuestring) != 0) {
            log_error("%s lists tensor '%s' in %s, but that file does not hold it", index_path,
                      it->string, it->valuestring);
            rc = ERR_FORMAT;
        }
    }
    cJSON_Delete(root);
    return rc;
}

int st_open_dir(const char *dir, struct st_set **out) {
    *out = NULL;
    char path[4096];
    int rc = fs_join(path, sizeof path, dir, "model.safetensors");
    if (rc) return rc;
    if (fs_exists(path)) return st_open_file(path, out);
    if ((rc = fs_join(path, sizeof path, dir, "model.safetensors.index.json"))) return rc;
    if (!fs_exists(path)) {
        log_error("%s holds neither model.safetensors nor model.safetensors.index.json", dir);
        log_hint("point --model at a Hugging Face model folder with safetensors weights");
        return ERR_IO;
    }
    struct st_set *s = calloc(1, sizeof *s);
    if (!s) return ERR_NOMEM;
    rc = open_sharded(dir, path, s);
    if (rc) {
        st_close(s);
        return rc;
    }
    *out = s;
    return OK;
}
