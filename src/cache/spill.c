/* cache/spill.c: see spill.h. File layout (little-endian):
 *   struct file_header (88 bytes) | int32 tokens[n_tokens] | payload[comp_bytes]
 * The payload is zstd(byte planes of float rows[2][n_layers][n_kv_heads][n_tokens][D]): byte 0
 * of every float, then byte 1, ... (the sign/exponent plane compresses well, the low mantissa
 * bytes hardly at all). header_hash covers the header's bytes before it, tokens_hash the ids,
 * payload_hash the compressed payload as stored. */
#include "cache/spill.h"

#include "base/err.h"
#include "base/log.h"
#include "model/model.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the spill file format is written for little-endian hosts"
#endif

#define SPILL_MAGIC   "DSPKKV\r\n"
#define SPILL_VERSION 1
#define SPILL_LEVEL   1 /* zstd level: KV floats gain little from more effort */
#define MAX_TOKENS    (1 << 24)

struct file_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t fingerprint;
    uint32_t n_tokens;
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t flags; /* none defined yet: must be 0 */
    uint32_t reserved;
    uint64_t raw_bytes;  /* payload before compression: n_tokens * row floats * 4 */
    uint64_t comp_bytes; /* payload as stored */
    uint64_t tokens_hash;
    uint64_t payload_hash;
    uint64_t header_hash;
};
_Static_assert(sizeof(struct file_header) == 88, "the header has no padding");

struct file {
    char name[24]; /* <tokens_hash as 16 hex digits>.kv */
    int32_t *tokens;
    int n;
    size_t bytes;
    struct timespec mtime; /* last write or hit: eviction order */
};

struct spill {
    char *dir; /* DIR/<fingerprint> */
    char *path;
    size_t path_cap;
    uint64_t fingerprint;
    struct spill_geometry g;
    size_t max_bytes;
    struct file *f;
    int n, cap;
    struct spill_stats st;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
};

static size_t row_bytes(const struct spill *sp) {
    return 2 * sizeof(float) * (size_t)sp->g.n_layers * (size_t)sp->g.n_kv_heads *
           (size_t)sp->g.head_dim;
}

static const char *path_of(struct spill *sp, const char *name) {
    snprintf(sp->path, sp->path_cap, "%s/%s", sp->dir, name);
    return sp->path;
}

const char *spill_path(const struct spill *sp, int i) {
    return path_of((struct spill *)sp, sp->f[i].name);
}

static int mkdir_p(const char *path) {
    char *p = strdup(path);
    if (!p) return ERR_NOMEM;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) {
            log_error("cannot create the prefix cache folder %s: %s", p, strerror(errno));
            log_hint("pass a writable folder to --prefix-cache-dir");
            free(p);
            return ERR_IO;
        }
        if (!(*s = c)) break;
    }
    free(p);
    return OK;
}

static uint64_t header_hash(const struct file_header *h) {
    return XXH64(h, offsetof(struct file_header, header_hash), 0);
}

/* Checks a header against this model; returns NULL or what is wrong. */
static const char *header_problem(const struct spill *sp, const struct file_header *h,
                                  size_t file_bytes) {
    if (memcmp(h->magic, SPILL_MAGIC, 8)) return "not a dspark KV file";
    if (h->version != SPILL_VERSION) return "another format version";
    if (h->header_bytes != sizeof *h || h->header_hash != header_hash(h)) return "bad header";
    if (h->fingerprint != sp->fingerprint) return "made by another model";
    if (h->n_layers != (uint32_t)sp->g.n_layers || h->n_kv_heads != (uint32_t)sp->g.n_kv_heads ||
        h->head_dim != (uint32_t)sp->g.head_dim || h->flags)
        return "another cache geometry";
    if (!h->n_tokens || h->n_tokens > MAX_TOKENS) return "bad token count";
    if (h->raw_bytes != (uint64_t)h->n_tokens * row_bytes(sp)) return "bad payload size";
    if (h->comp_bytes > file_bytes ||
        file_bytes != sizeof *h + (uint64_t)h->n_tokens * 4 + h->comp_bytes)
        return "truncated or extended";
    return NULL;
}

static void drop_file(struct spill *sp, int i) {
    unlink(path_of(sp, sp->f[i].name));
    sp->st.bytes -= sp->f[i].bytes;
    free(sp->f[i].tokens);
    memmove(sp->f + i, sp->f + i + 1, sizeof *sp->f * (size_t)(sp->n - i - 1));
    sp->n--;
}

static void reject(struct spill *sp, const char *path, const char *why) {
    log_error("prefix cache file %s is unusable (%s): deleted", path, why);
    unlink(path);
    sp->st.rejects++;
}

static int add_file(struct spill *sp, struct file *f) {
    if (sp->n == sp->cap) {
        int cap = sp->cap ? sp->cap * 2 : 16;
        struct file *nf = realloc(sp->f, sizeof *nf * (size_t)cap);
        if (!nf) return ERR_NOMEM;
        sp->f = nf, sp->cap = cap;
    }
    sp->f[sp->n++] = *f;
    sp->st.bytes += f->bytes;
    return OK;
}

static int read_all(int fd, void *buf, size_t n, off_t off) {
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r <= 0) return ERR_IO;
        got += (size_t)r;
    }
    return OK;
}

/* Indexes one file found in the folder: header and tokens are checked, the payload later. */
static int index_file(struct spill *sp, const char *name) {
    const char *path = path_of(sp, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return OK; /* gone meanwhile */
    struct stat stt;
    struct file_header h;
    struct file f = {0};
    const char *why = NULL;
    if (fstat(fd, &stt) || read_all(fd, &h, sizeof h, 0)) {
        why = "shorter than a header";
    } else if (!(why = header_problem(sp, &h, (size_t)stt.st_size))) {
        f.n = (int)h.n_tokens;
        if (!(f.tokens = malloc(sizeof(int32_t) * (size_t)f.n))) {
            close(fd);
            return ERR_NOMEM;
        }
        char want[24];
        snprintf(want, sizeof want, "%016llx.kv", (unsigned long long)h.tokens_hash);
        if (read_all(fd, f.tokens, sizeof(int32_t) * (size_t)f.n, sizeof h) ||
            XXH64(f.tokens, sizeof(int32_t) * (size_t)f.n, 0) != h.tokens_hash)
            why = "bad token ids";
        else if (strcmp(want, name))
            why = "renamed";
    }
    close(fd);
    if (why) {
        free(f.tokens);
        reject(sp, path, why);
        return OK;
    }
    snprintf(f.name, sizeof f.name, "%s", name);
    f.bytes = (size_t)stt.st_size;
    f.mtime = stt.st_mtim;
    int rc = add_file(sp, &f);
    if (rc) free(f.tokens);
    return rc;
}

static int older(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec != b->tv_sec ? a->tv_sec < b->tv_sec : a->tv_nsec < b->tv_nsec;
}

static void enforce_budget(struct spill *sp) {
    while (sp->max_bytes && sp->st.bytes > sp->max_bytes && sp->n) {
        int old = 0;
        for (int i = 1; i < sp->n; i++)
            if (older(&sp->f[i].mtime, &sp->f[old].mtime)) old = i;
        drop_file(sp, old);
        sp->st.evicted++;
    }
}

int spill_open(const char *dir, uint64_t fingerprint, const struct spill_geometry *g,
               size_t max_bytes, struct spill **out) {
    *out = NULL;
    struct spill *sp = calloc(1, sizeof *sp);
    if (!sp) return ERR_NOMEM;
    sp->fingerprint = fingerprint;
    sp->g = *g;
    sp->max_bytes = max_bytes;
    size_t n = strlen(dir) + 18;
    sp->path_cap = n + 32;
    sp->dir = malloc(n);
    sp->path = malloc(sp->path_cap);
    sp->cctx = ZSTD_createCCtx();
    sp->dctx = ZSTD_createDCtx();
    int rc = ERR_NOMEM;
    if (!sp->dir || !sp->path || !sp->cctx || !sp->dctx) goto fail;
    snprintf(sp->dir, n, "%s/%016llx", dir, (unsigned long long)fingerprint);
    ZSTD_CCtx_setParameter(sp->cctx, ZSTD_c_compressionLevel, SPILL_LEVEL);
    ZSTD_CCtx_setParameter(sp->cctx, ZSTD_c_checksumFlag, 1);
    if ((rc = mkdir_p(sp->dir))) goto fail;
    DIR *d = opendir(sp->dir);
    if (!d) {
        log_error("cannot read the prefix cache folder %s: %s", sp->dir, strerror(errno));
        rc = ERR_IO;
        goto fail;
    }
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".tmp"))
            unlink(path_of(sp, e->d_name)); /* a write that never finished */
        else if (len > 3 && !strcmp(e->d_name + len - 3, ".kv"))
            rc = index_file(sp, e->d_name);
    }
    closedir(d);
    if (rc) goto fail;
    enforce_budget(sp);
    *out = sp;
    return OK;
fail:
    spill_close(sp);
    return rc;
}

void spill_close(struct spill *sp) {
    if (!sp) return;
    for (int i = 0; i < sp->n; i++) free(sp->f[i].tokens);
    free(sp->f);
    ZSTD_freeCCtx(sp->cctx);
    ZSTD_freeDCtx(sp->dctx);
    free(sp->dir);
    free(sp->path);
    free(sp);
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = na < nb ? na : nb, l = 0;
    while (l < m && a[l] == b[l]) l++;
    return l;
}

static void touch(struct spill *sp, int i) {
    utimensat(AT_FDCWD, path_of(sp, sp->f[i].name), NULL, 0);
    clock_gettime(CLOCK_REALTIME, &sp->f[i].mtime);
}

/* Byte planes: plane b holds byte b of every 4-byte value. */
static void to_planes(const unsigned char *in, unsigned char *out, size_t n_values) {
    for (size_t i = 0; i < n_values; i++)
        for (int b = 0; b < 4; b++) out[(size_t)b * n_values + i] = in[i * 4 + (size_t)b];
}

static void from_planes(const unsigned char *in, unsigned char *out, size_t n_values) {
    for (int b = 0; b < 4; b++)
        for (size_t i = 0; i < n_values; i++) out[i * 4 + (size_t)b] = in[(size_t)b * n_values + i];
}

static int write_all(int fd, const void *buf, size_t n) {
    for (size_t put = 0; put < n;) {
        ssize_t w = write(fd, (const char *)buf + put, n - put);
        if (w <= 0) return ERR_IO;
        put += (size_t)w;
    }
    return OK;
}

int spill_save(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv) {
    if (n <= 0 || n > MAX_TOKENS || n > kv_len(kv)) return ERR_ARG;
    for (int i = 0; i < sp->n; i++)
        if (sp->f[i].n >= n && common_prefix(sp->f[i].tokens, sp->f[i].n, tokens, n) == n) {
            touch(sp, i); /* already saved, maybe with more after it */
            return OK;
        }
    size_t raw = (size_t)n * row_bytes(sp), bound = ZSTD_compressBound(raw);
    struct file f = {.n = n};
    struct file_header h = {.version = SPILL_VERSION,
                            .header_bytes = sizeof h,
                            .fingerprint = sp->fingerprint,
                            .n_tokens = (uint32_t)n,
                            .n_layers = (uint32_t)sp->g.n_layers,
                            .n_kv_heads = (uint32_t)sp->g.n_kv_heads,
                            .head_dim = (uint32_t)sp->g.head_dim,
                            .raw_bytes = raw};
    memcpy(h.magic, SPILL_MAGIC, 8);
    char tmp[40];
    unsigned char *rows = malloc(raw), *planes = malloc(raw), *comp = malloc(bound);
    f.tokens = malloc(sizeof(int32_t) * (size_t)n);
    int rc = ERR_NOMEM, fd = -1;
    if (!rows || !planes || !comp || !f.tokens) goto out;
    if ((rc = kv_export(kv, n, (float *)rows))) goto out;
    to_planes(rows, planes, raw / 4);
    size_t c = ZSTD_compress2(sp->cctx, comp, bound, planes, raw);
    if (ZSTD_isError(c)) {
        log_error("compressing a prefix cache entry failed: %s", ZSTD_getErrorName(c));
        rc = ERR_FORMAT;
        goto out;
    }
    memcpy(f.tokens, tokens, sizeof(int32_t) * (size_t)n);
    h.comp_bytes = c;
    h.tokens_hash = XXH64(tokens, sizeof(int32_t) * (size_t)n, 0);
    h.payload_hash = XXH64(comp, c, 0);
    h.header_hash = header_hash(&h);
    snprintf(f.name, sizeof f.name, "%016llx.kv", (unsigned long long)h.tokens_hash);
    snprintf(tmp, sizeof tmp, "%s.tmp", f.name);
    char *final = strdup(path_of(sp, f.name));
    if (!final) goto out;
    fd = open(path_of(sp, tmp), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    rc = fd < 0 ? ERR_IO : OK;
    if (!rc) rc = write_all(fd, &h, sizeof h);
    if (!rc) rc = write_all(fd, tokens, sizeof(int32_t) * (size_t)n);
    if (!rc) rc = write_all(fd, comp, c);
    if (fd >= 0 && close(fd)) rc = ERR_IO;
    fd = -1;
    if (!rc && rename(path_of(sp, tmp), final)) rc = ERR_IO;
    free(final);
    if (rc) {
        log_error("cannot write a prefix cache file in %s: %s", sp->dir, strerror(errno));
        log_hint("check the free space of --prefix-cache-dir, or lower --prefix-cache-dir-mb");
        unlink(path_of(sp, tmp));
        goto out;
    }
    /* files holding a prefix of these tokens (or, on a hash collision, the same name) go */
    for (int i = sp->n - 1; i >= 0; i--)
        if (!strcmp(sp->f[i].name, f.name) ||
            common_prefix(sp->f[i].tokens, sp->f[i].n, tokens, n) == sp->f[i].n) {
            if (strcmp(sp->f[i].name, f.name)) unlink(path_of(sp, sp->f[i].name));
            sp->st.bytes -= sp->f[i].bytes;
            free(sp->f[i].tokens);
            memmove(sp->f + i, sp->f + i + 1, sizeof *sp->f * (size_t)(sp->n - i - 1));
            sp->n--;
        }
    f.bytes = sizeof h + sizeof(int32_t) * (size_t)n + c;
    clock_gettime(CLOCK_REALTIME, &f.mtime);
    if ((rc = add_file(sp, &f))) goto out;
    f.tokens = NULL;
    sp->st.writes++;
    enforce_budget(sp);
out:
    if (fd >= 0) close(fd);
    free(f.tokens);
    free(rows), free(planes), free(comp);
    return rc;
}

int spill_match(const struct spill *sp, const int32_t *prompt, int n, int max_len, int *file) {
    int best = 0;
    *file = -1;
    if (max_len > n) max_len = n;
    for (int i = 0; i < sp->n; i++) {
        int l = common_prefix(sp->f[i].tokens, sp->f[i].n, prompt, max_len);
        if (l > best) best = l, *file = i;
    }
    return best;
}

int spill_load(struct spill *sp, int i, int n, struct kv_cache *kv) {
    if (i < 0 || i >= sp->n || n <= 0 || n > sp->f[i].n) return ERR_ARG;
    struct file *f = &sp->f[i];
    const char *path = path_of(sp, f->name);
    const char *why = NULL;
    struct file_header h;
    struct stat stt;
    unsigned char *buf = NULL, *planes = NULL, *rows = NULL;
    int rc = OK, fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &stt) || read_all(fd, &h, sizeof h, 0)) {
        why = fd < 0 ? "cannot be opened" : "shorter than a header";
    } else if (!(why = header_problem(sp, &h, (size_t)stt.st_size))) {
        size_t body = (size_t)stt.st_size - sizeof h, tok = sizeof(int32_t) * h.n_tokens;
        buf = malloc(body);
        planes = malloc(h.raw_bytes);
        rows = malloc(h.raw_bytes);
        if (!buf || !planes || !rows) {
            rc = ERR_NOMEM;
        } else if (read_all(fd, buf, body, sizeof h)) {
            why = "cannot be read";
        } else if (h.n_tokens != (uint32_t)f->n || memcmp(buf, f->tokens, tok) ||
                   XXH64(buf, tok, 0) != h.tokens_hash) {
            why = "token ids changed";
        } else if (XXH64(buf + tok, h.comp_bytes, 0) != h.payload_hash) {
            why = "payload checksum mismatch";
        } else {
            size_t d = ZSTD_decompressDCtx(sp->dctx, planes, h.raw_bytes, buf + tok, h.comp_bytes);
            if (ZSTD_isError(d) || d != h.raw_bytes) why = "payload does not decompress";
        }
    }
    if (fd >= 0) close(fd);
    if (!rc && !why) {
        from_planes(planes, rows, h.raw_bytes / 4);
        rc = kv_import(kv, (const float *)rows, f->n, n);
        if (!rc) {
            sp->st.reads++;
            touch(sp, i);
        }
    }
    free(buf), free(planes), free(rows);
    if (why) {
        log_error("prefix cache file %s is unusable (%s): deleted", path, why);
        sp->st.rejects++;
        drop_file(sp, i);
        return ERR_FORMAT;
    }
    return rc;
}

struct spill_stats spill_stats(const struct spill *sp) {
    struct spill_stats s = sp->st;
    s.files = sp->n;
    return s;
}
