/* tune/cache.c: the calibration cache: keys and the JSON file. The file is
 *   {"schema": 1, "entries": {KEY: {"created": UNIX_SECONDS, "verify_ms": [w = 1..B+1],
 *    "draft_ms": [k = 0..B], "overhead_ms": X, "batched": [{"sequences": N,
 *    "verify_ms": [w = 1..B+1]}, ...]}}}
 * and is rewritten whole (temporary file, then rename) on every store. */
#include "tune/calib.h"

#include "backend/gpu.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/log.h"
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- key ---- */

int tune_cache_default_path(char *buf, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg     ? snprintf(buf, cap, "%s/dspark/calibration.json", xdg)
            : home && *home ? snprintf(buf, cap, "%s/.cache/dspark/calibration.json", home)
                            : -1;
    return n < 0 || (size_t)n >= cap ? ERR_ARG : OK;
}

static uint64_t mix(uint64_t h, const void *p, size_t n) {
    return hash_bytes(p, n) ^ (h * 0x100000001b3ull + 0x9e3779b97f4a7c15ull);
}

/* "model name" of /proc/cpuinfo and a hash of its flags line. */
static void cpu_id(char *name, size_t cap, uint64_t *flags) {
    snprintf(name, cap, "unknown CPU");
    *flags = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int have_name = 0, have_flags = 0;
    while (f && (!have_name || !have_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!have_name && !strncmp(line, "model name", 10)) {
            snprintf(name, cap, "%s", v);
            have_name = 1;
        } else if (!have_flags && !strncmp(line, "flags", 5)) {
            *flags = hash_bytes(v, strlen(v));
            have_flags = 1;
        }
    }
    if (f) fclose(f);
}

/* This build: a hash of the running executable (any rebuild changes it). */
static uint64_t build_id(void) {
    struct fs_map m;
    if (fs_map("/proc/self/exe", &m)) return 0;
    uint64_t h = hash_bytes(m.data, m.n_bytes);
    fs_unmap(&m);
    return h;
}

static int speed_file(const struct dirent *d) {
    size_t n = strlen(d->d_name);
    return !strcmp(d->d_name, "config.json") ||
           !strcmp(d->d_name, "model.safetensors.index.json") ||
           (n > 12 && !strcmp(d->d_name + n - 12, ".safetensors"));
}

/* config.json and the index by content; each safetensors file by its header, size and mtime. */
static int hash_file(const char *dir, const char *name, uint64_t *h) {
    char path[4096];
    if (fs_join(path, sizeof path, dir, name)) return ERR_ARG;
    struct stat st;
    if (stat(path, &st)) return ERR_IO;
    size_t n = strlen(name);
    *h = mix(*h, name, n);
    if (n <= 12 || strcmp(name + n - 12, ".safetensors")) {
        char *text;
        size_t len;
        if (fs_read_file(path, &text, &len, (size_t)64 << 20)) return ERR_IO;
        *h = mix(*h, text, len);
        free(text);
        return OK;
    }
    int64_t meta[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
    *h = mix(*h, meta, sizeof meta);
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    if (f && fread(len8, 1, 8, f) == 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
        size_t take = hl < ((size_t)16 << 20) ? (size_t)hl : ((size_t)16 << 20);
        char *hdr = malloc(take ? take : 1);
        if (hdr && fread(hdr, 1, take, f) == take) *h = mix(*h, hdr, take);
        free(hdr);
    }
    if (f) fclose(f);
    return OK;
}

int tune_dir_hash(const char *dir, uint64_t *out) {
    struct dirent **list;
    int n = scandir(dir, &list, speed_file, alphasort), rc = OK, have_config = 0;
    if (n < 0) {
        log_error("cannot list %s: %s", dir, strerror(errno));
        return ERR_IO;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        have_config |= !strcmp(list[i]->d_name, "config.json");
        if (!rc) rc = hash_file(dir, list[i]->d_name, &h);
        free(list[i]);
    }
    free(list);
    if (!rc && !have_config) {
        log_error("%s has no config.json", dir);
        rc = ERR_IO;
    }
    *out = h;
    return rc;
}

static const char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *b = dir + n;
    while (b > dir && b[-1] != '/') b--;
    return b;
}

int tune_cache_key(const struct tune_subject *s, char *key, size_t cap) {
    char device[256];
    uint64_t flags = 0, target = 0, drafter = 0;
    if (s->gpu) {
        struct gpu_model *g = s->target ? model_gpu(s->target) : NULL;
        snprintf(device, sizeof device, "cuda:%s%s%s", gpu_device_name() ? gpu_device_name() : "?",
                 gpu_model_input_terms(g) == 1 ? ";inputs=bf16" : "",
                 gpu_model_kv_bytes(g) == 2 ? ";kv=bf16" : ""); /* other costs */
    } else {
        char cpu[200];
        cpu_id(cpu, sizeof cpu, &flags);
        snprintf(device, sizeof device, "cpu:%s;flags=%016llx", cpu, (unsigned long long)flags);
    }
    if (tune_dir_hash(s->target_dir, &target)) return ERR_IO;
    if (s->drafter_dir && tune_dir_hash(s->drafter_dir, &drafter)) return ERR_IO;
    const char *tb = base_name(s->target_dir),
               *db = s->drafter_dir ? base_name(s->drafter_dir) : "-";
    int tl = (int)strcspn(tb, "/"), dl = (int)strcspn(db, "/");
    int n = snprintf(key, cap,
                     "v%d|%s|build=%016llx|target=%.*s@%016llx|%s=%.*s@%016llx|acts=%s|"
                     "threads=%d|caps=%d|batch=%d",
                     TUNE_CACHE_SCHEMA, device, (unsigned long long)build_id(), tl, tb,
                     (unsigned long long)target, s->mode, dl, db, (unsigned long long)drafter,
                     s->bf16_activations ? "bf16" : "f32", s->n_threads, s->max_cap,
                     s->max_batch > 1 ? s->max_batch : 1);
    return n < 0 || (size_t)n >= cap ? ERR_ARG : OK;
}

/* ---- file ---- */

/* Reads a non-negative finite array of exactly n numbers into out (in seconds). */
static int read_ms(const cJSON *a, int n, double *out, int positive) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return -1;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < 0 ||
            (positive && x->valuedouble <= 0))
            return -1;
        out[i++] = x->valuedouble * 1e-3;
    }
    return 0;
}

static int read_entry(const cJSON *e, int max_cap, struct tune_costs *c) {
    memset(c, 0, sizeof *c);
    c->max_cap = max_cap;
    const cJSON *ov = cJSON_GetObjectItem(e, "overhead_ms"), *b = cJSON_GetObjectItem(e, "batched");
    if (read_ms(cJSON_GetObjectItem(e, "verify_ms"), max_cap + 1, c->verify + 1, 1) ||
        read_ms(cJSON_GetObjectItem(e, "draft_ms"), max_cap + 1, c->draft, 0) ||
        !cJSON_IsNumber(ov) || !isfinite(ov->valuedouble) || ov->valuedouble < 0)
        return -1;
    c->overhead = ov->valuedouble * 1e-3;
    if (!b) return 0;
    if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) > TUNE_MAX_BATCHES) return -1;
    const cJSON *x;
    cJSON_ArrayForEach(x, b) {
        const cJSON *ns = cJSON_GetObjectItem(x, "sequences");
        int i = c->n_batches;
        if (!cJSON_IsNumber(ns) || ns->valuedouble < 2 || ns->valuedouble > 1024 ||
            (i && ns->valuedouble <= c->batch[i - 1]) ||
            read_ms(cJSON_GetObjectItem(x, "verify_ms"), max_cap + 1, c->grid[i] + 1, 1))
            return -1;
        c->batch[i] = (int)ns->valuedouble;
        c->n_batches++;
    }
    return 0;
}

/* The file's JSON, or NULL (missing: *damaged = 0; unreadable or not ours: *damaged = 1). */
static cJSON *read_cache(const char *path, int *damaged) {
    *damaged = 0;
    if (!fs_exists(path)) return NULL;
    char *text;
    size_t len;
    const char *why = NULL;
    if (fs_read_file(path, &text, &len, (size_t)16 << 20)) {
        *damaged = 1;
        return NULL;
    }
    cJSON *j = json_parse(text, len, &why);
    free(text);
    const cJSON *schema = cJSON_GetObjectItem(j, "schema");
    if (!j || !cJSON_IsObject(cJSON_GetObjectItem(j, "entries")) || !cJSON_IsNumber(schema) ||
        schema->valuedouble != TUNE_CACHE_SCHEMA) {
        log_error("ignoring the calibration cache %s: %s", path,
                  !j ? (why ? why : "not JSON") : "not a schema-1 calibration file");
        log_hint("it is rewritten after this calibration; --calibration-file picks another file");
        cJSON_Delete(j);
        *damaged = 1;
        return NULL;
    }
    return j;
}

int tune_cache_load(const char *path, const char *key, int max_cap, struct tune_costs *out) {
    int damaged;
    cJSON *j = read_cache(path, &damaged);
    if (!j) return ERR_IO;
    const cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "entries"), key);
    int rc = ERR_IO;
    if (e && !read_entry(e, max_cap, out))
        rc = OK;
    else if (e)
        log_error("the calibration cache %s has a damaged entry for this setup: recalibrating",
                  path);
    cJSON_Delete(j);
    return rc;
}

static cJSON *ms_array(const double *s, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(round(s[i] * 1e9) * 1e-6)); /* ns precision */
    return a;
}

static cJSON *entry_json(const struct tune_costs *c) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "created", (double)time(NULL));
    cJSON_AddItemToObject(e, "verify_ms", ms_array(c->verify + 1, c->max_cap + 1));
    cJSON_AddItemToObject(e, "draft_ms", ms_array(c->draft, c->max_cap + 1));
    cJSON_AddNumberToObject(e, "overhead_ms", round(c->overhead * 1e9) * 1e-6);
    if (c->n_batches) {
        cJSON *b = cJSON_AddArrayToObject(e, "batched");
        for (int i = 0; i < c->n_batches; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "sequences", c->batch[i]);
            cJSON_AddItemToObject(x, "verify_ms", ms_array(c->grid[i] + 1, c->max_cap + 1));
            cJSON_AddItemToArray(b, x);
        }
    }
    return e;
}

/* mkdir -p of path's folder. */
static int make_parents(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return ERR_ARG;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return OK;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) && errno != EEXIST) return ERR_IO;
        *p = '/';
    }
    return mkdir(dir, 0755) && errno != EEXIST ? ERR_IO : OK;
}

static double created(const cJSON *e) {
    const cJSON *t = cJSON_GetObjectItem(e, "created");
    return cJSON_IsNumber(t) ? t->valuedouble : -1; /* undated entries go first */
}

/* Drops the oldest entries beyond TUNE_CACHE_ENTRIES - 1, making room for one more. */
static void prune(cJSON *entries) {
    while (cJSON_GetArraySize(entries) >= TUNE_CACHE_ENTRIES) {
        cJSON *oldest = NULL, *e;
        cJSON_ArrayForEach(e, entries) {
            if (!oldest || created(e) < created(oldest)) oldest = e;
        }
        cJSON_Delete(cJSON_DetachItemViaPointer(entries, oldest));
    }
}

int tune_cache_store(const char *path, const char *key, const struct tune_costs *c) {
    int damaged;
    cJSON *j = read_cache(path, &damaged);
    if (!j) {
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "schema", TUNE_CACHE_SCHEMA);
        cJSON_AddObjectToObject(j, "entries");
    }
    cJSON *entries = cJSON_GetObjectItem(j, "entries");
    cJSON_DeleteItemFromObjectCaseSensitive(entries, key);
    prune(entries);
    cJSON_AddItemToObject(entries, key, entry_json(c));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    char tmp[4200];
    int rc = text ? OK : ERR_NOMEM;
    if (!rc && snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp)
        rc = ERR_ARG;
    if (!rc) rc = make_parents(path);
    FILE *f = rc ? NULL : fopen(tmp, "w");
    if (!rc && !f) rc = ERR_IO;
    if (f) {
        if (fputs(text, f) < 0 || fputc('\n', f) == EOF) rc = ERR_IO;
        if (fclose(f)) rc = ERR_IO;
        if (!rc && rename(tmp, path)) rc = ERR_IO;
        if (rc) unlink(tmp);
    }
    if (rc) log_error("could not write the calibration cache %s: %s", path, strerror(errno));
    free(text);
    return rc;
}
