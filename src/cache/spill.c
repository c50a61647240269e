/* cache/spill.c: see spill.h. File layout (little-endian):
 *   struct file_header (96 bytes) | int32 tokens[n_tokens] | payload[comp_bytes]
 * The payload is zstd(byte planes of float rows[2][n_layers][n_kv_heads][n_tokens][D], then,
 * when ctx_width > 0, the drafter context ctx[n_tokens][ctx_width]): byte 0 of every float,
 * then byte 1, ... (the sign/exponent plane compresses well, the low mantissa bytes hardly at
 * all). header_hash covers the header's bytes before it, tokens_hash the ids, payload_hash the
 * compressed payload as stored. Version 1 (88-byte header, no context) files are rejected.
 * Threads: spill_save() copies the rows into a job; the writer thread turns jobs into files.
 * `mu` guards the index, the statistics and the queue; files are read and written outside it
 * (each thread has its own path buffer and zstd context). */
#include "cache/spill.h"

#include "base/err.h"
#include "base/log.h"
#include "model/model.h"

#include <dirent.h>
#include <pthread.h>
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
#define SPILL_VERSION 2
#define SPILL_LEVEL   1 /* zstd level: KV floats gain little from more effort */
#define MAX_TOKENS    (1 << 24)
#define MAX_CTX_WIDTH (1 << 24) /* floats per position of a drafter context */

struct file_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t fingerprint;
    uint32_t n_tokens;
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t flags;      /* none defined yet: must be 0 */
    uint32_t ctx_width;  /* floats per position of the drafter context (0: none) */
    uint64_t ctx_tag;    /* the drafter that made it: 0 exactly when ctx_width is 0 */
    uint64_t raw_bytes;  /* payload before compression: n_tokens * (row + ctx_width) floats * 4 */
    uint64_t comp_bytes; /* payload as stored */
    uint64_t tokens_hash;
    uint64_t payload_hash;
    uint64_t header_hash;
};
_Static_assert(sizeof(struct file_header) == 96, "the header has no padding");

struct file {
    char name[24]; /* <tokens_hash as 16 hex digits>.kv */
    int32_t *tokens;
    int n;
    uint64_t ctx_tag; /* its drafter context's, or 0 */
    size_t bytes;
    struct timespec mtime; /* last write or hit: eviction order */
};

struct job {
    char name[24]; /* of the file it becomes */
    int32_t *tokens;
    int n;
    uint64_t ctx_tag;
    int ctx_width;
    unsigned char *rows; /* n rows as kv_export() writes them, then ctx[n][ctx_width] */
    size_t raw;
    struct job *next;
};

struct spill {
    char *dir;          /* DIR/<fingerprint> */
    char *path, *wpath; /* scratch paths of the calling thread and of the writer */
    size_t path_cap;
    uint64_t fingerprint;
    struct spill_geometry g;
    size_t max_bytes;
    ZSTD_CCtx *cctx; /* the writer's */
    ZSTD_DCtx *dctx; /* the caller's */
    pthread_t writer;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a job was queued, or the queue drained */
    struct file *f;    /* the index */
    int n, cap;
    struct spill_stats st;
    struct job *head, *tail;
    size_t pending; /* bytes of rows queued or being written */
    int stopping;
};

static size_t row_bytes(const struct spill *sp) {
    return 2 * sizeof(float) * (size_t)sp->g.n_layers * (size_t)sp->g.n_kv_heads *
           (size_t)sp->g.head_dim;
}

static const char *path_of(const struct spill *sp, char *buf, const char *name) {
    snprintf(buf, sp->path_cap, "%s/%s", sp->dir, name);
    return buf;
}

int spill_file_path(struct spill *sp, int i, char *buf, size_t cap) {
    pthread_mutex_lock(&sp->mu);
    int ok = i >= 0 && i < sp->n;
    if (ok) snprintf(buf, cap, "%s/%s", sp->dir, sp->f[i].name);
    pthread_mutex_unlock(&sp->mu);
    return ok ? OK : ERR_ARG;
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
    if (h->ctx_width > MAX_CTX_WIDTH || !h->ctx_width != !h->ctx_tag) return "bad drafter context";
    if (h->raw_bytes != (uint64_t)h->n_tokens * (row_bytes(sp) + 4 * (uint64_t)h->ctx_width))
        return "bad payload size";
    if (h->comp_bytes > file_bytes ||
        file_bytes != sizeof *h + (uint64_t)h->n_tokens * 4 + h->comp_bytes)
        return "truncated or extended";
    return NULL;
}

static int find(const struct spill *sp, const char *name) {
    for (int i = 0; i < sp->n; i++)
        if (!strcmp(sp->f[i].name, name)) return i;
    return -1;
}

/* Under mu: removes file i from the index. */
static void forget(struct spill *sp, int i) {
    sp->st.bytes -= sp->f[i].bytes;
    free(sp->f[i].tokens);
    memmove(sp->f + i, sp->f + i + 1, sizeof *sp->f * (size_t)(sp->n - i - 1));
    sp->n--;
}

/* Under mu: removes file i from the index and the disk; buf is the calling thread's path. */
static void drop_file(struct spill *sp, int i, char *buf) {
    unlink(path_of(sp, buf, sp->f[i].name));
    forget(sp, i);
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

/* Indexes one file found in the folder (before the writer starts): header and tokens are
 * checked, the payload when it is loaded. */
static int index_file(struct spill *sp, const char *name) {
    const char *path = path_of(sp, sp->path, name);
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
    f.ctx_tag = h.ctx_tag;
    f.bytes = (size_t)stt.st_size;
    f.mtime = stt.st_mtim;
    int rc = add_file(sp, &f);
    if (rc) free(f.tokens);
    return rc;
}

static int older(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec != b->tv_sec ? a->tv_sec < b->tv_sec : a->tv_nsec < b->tv_nsec;
}

/* Under mu. */
static void enforce_budget(struct spill *sp, char *buf) {
    while (sp->max_bytes && sp->st.bytes > sp->max_bytes && sp->n) {
        int old = 0;
        for (int i = 1; i < sp->n; i++)
            if (older(&sp->f[i].mtime, &sp->f[old].mtime)) old = i;
        drop_file(sp, old, buf);
        sp->st.evicted++;
    }
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = na < nb ? na : nb, l = 0;
    while (l < m && a[l] == b[l]) l++;
    return l;
}

/* Whether a file with a drafter context of tag `have` serves whatever one with `need` serves
 * (a file without a context serves only requests that need none). */
static int covers(uint64_t have, uint64_t need) {
    return !need || have == need;
}

/* Under mu. */
static void touch(struct spill *sp, int i, char *buf) {
    utimensat(AT_FDCWD, path_of(sp, buf, sp->f[i].name), NULL, 0);
    clock_gettime(CLOCK_REALTIME, &sp->f[i].mtime);
}

/* Byte planes: plane b holds byte b of every 4-byte value (one pass, four streams). */
static void to_planes(const unsigned char *in, unsigned char *out, size_t n) {
    unsigned char *o0 = out, *o1 = out + n, *o2 = out + 2 * n, *o3 = out + 3 * n;
    for (size_t i = 0; i < n; i++) {
        o0[i] = in[4 * i], o1[i] = in[4 * i + 1], o2[i] = in[4 * i + 2], o3[i] = in[4 * i + 3];
    }
}

static void from_planes(const unsigned char *in, unsigned char *out, size_t n) {
    const unsigned char *p0 = in, *p1 = in + n, *p2 = in + 2 * n, *p3 = in + 3 * n;
    for (size_t i = 0; i < n; i++) {
        out[4 * i] = p0[i], out[4 * i + 1] = p1[i], out[4 * i + 2] = p2[i], out[4 * i + 3] = p3[i];
    }
}

static int write_all(int fd, const void *buf, size_t n) {
    for (size_t put = 0; put < n;) {
        ssize_t w = write(fd, (const char *)buf + put, n - put);
        if (w <= 0) return ERR_IO;
        put += (size_t)w;
    }
    return OK;
}

/* On the writer thread: turns a job into a file and indexes it. */
static int write_job(struct spill *sp, struct job *j) {
    size_t bound = ZSTD_compressBound(j->raw);
    struct file f = {.n = j->n, .ctx_tag = j->ctx_tag};
    struct file_header h = {.version = SPILL_VERSION,
                            .header_bytes = sizeof h,
                            .fingerprint = sp->fingerprint,
                            .n_tokens = (uint32_t)j->n,
                            .n_layers = (uint32_t)sp->g.n_layers,
                            .n_kv_heads = (uint32_t)sp->g.n_kv_heads,
                            .head_dim = (uint32_t)sp->g.head_dim,
                            .ctx_width = (uint32_t)j->ctx_width,
                            .ctx_tag = j->ctx_tag,
                            .raw_bytes = j->raw};
    memcpy(h.magic, SPILL_MAGIC, 8);
    char tmp[40], *final = NULL;
    unsigned char *planes = malloc(j->raw), *comp = malloc(bound);
    int rc = ERR_NOMEM, fd = -1;
    if (!planes || !comp) goto out;
    to_planes(j->rows, planes, j->raw / 4);
    size_t c = ZSTD_compress2(sp->cctx, comp, bound, planes, j->raw);
    if (ZSTD_isError(c)) {
        log_error("compressing a prefix cache entry failed: %s", ZSTD_getErrorName(c));
        rc = ERR_FORMAT;
        goto out;
    }
    h.comp_bytes = c;
    h.tokens_hash = XXH64(j->tokens, sizeof(int32_t) * (size_t)j->n, 0); /* j->name's */
    h.payload_hash = XXH64(comp, c, 0);
    h.header_hash = header_hash(&h);
    snprintf(f.name, sizeof f.name, "%016llx.kv", (unsigned long long)h.tokens_hash);
    snprintf(tmp, sizeof tmp, "%s.tmp", f.name);
    if (!(final = strdup(path_of(sp, sp->wpath, f.name)))) goto out;
    fd = open(path_of(sp, sp->wpath, tmp), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    rc = fd < 0 ? ERR_IO : OK;
    if (!rc) rc = write_all(fd, &h, sizeof h);
    if (!rc) rc = write_all(fd, j->tokens, sizeof(int32_t) * (size_t)j->n);
    if (!rc) rc = write_all(fd, comp, c);
    if (fd >= 0 && close(fd)) rc = ERR_IO;
    fd = -1;
    if (!rc && rename(path_of(sp, sp->wpath, tmp), final)) rc = ERR_IO;
    if (rc) {
        log_error("cannot write a prefix cache file in %s: %s", sp->dir, strerror(errno));
        log_hint("check the free space of --prefix-cache-dir, or lower --prefix-cache-dir-mb");
        unlink(path_of(sp, sp->wpath, tmp));
        goto out;
    }
    f.bytes = sizeof h + sizeof(int32_t) * (size_t)j->n + c;
    clock_gettime(CLOCK_REALTIME, &f.mtime);
    f.tokens = j->tokens;
    pthread_mutex_lock(&sp->mu);
    /* files holding a prefix of these tokens (or, on a hash collision, the same name) go */
    for (int i = sp->n - 1; i >= 0; i--) {
        if (!strcmp(sp->f[i].name, f.name))
            forget(sp, i); /* the new file has taken its name */
        else if (covers(f.ctx_tag, sp->f[i].ctx_tag) &&
                 common_prefix(sp->f[i].tokens, sp->f[i].n, f.tokens, f.n) == sp->f[i].n)
            drop_file(sp, i, sp->wpath);
    }
    if (!(rc = add_file(sp, &f))) {
        j->tokens = NULL; /* the index has them */
        sp->st.writes++;
        enforce_budget(sp, sp->wpath);
    }
    pthread_mutex_unlock(&sp->mu);
out:
    if (fd >= 0) close(fd);
    free(final), free(planes), free(comp);
    return rc;
}

static void *writer_main(void *arg) {
    struct spill *sp = arg;
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        while (!sp->head && !sp->stopping) pthread_cond_wait(&sp->cv, &sp->mu);
        struct job *j = sp->head;
        if (!j) break; /* stopping, and nothing left to write */
        pthread_mutex_unlock(&sp->mu);
        int rc = write_job(sp, j);
        pthread_mutex_lock(&sp->mu);
        if (rc) sp->st.dropped++;
        sp->head = j->next; /* popped only now: spill_flush() waits for the write itself */
        if (!sp->head) sp->tail = NULL;
        sp->pending -= j->raw;
        free(j->tokens), free(j->rows), free(j);
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

int spill_open(const char *dir, uint64_t fingerprint, const struct spill_geometry *g,
               size_t max_bytes, struct spill **out) {
    *out = NULL;
    struct spill *sp = calloc(1, sizeof *sp);
    if (!sp) return ERR_NOMEM;
    sp->fingerprint = fingerprint;
    sp->g = *g;
    sp->max_bytes = max_bytes;
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    size_t n = strlen(dir) + 18;
    sp->path_cap = n + 32;
    sp->dir = malloc(n);
    sp->path = malloc(sp->path_cap);
    sp->wpath = malloc(sp->path_cap);
    sp->cctx = ZSTD_createCCtx();
    sp->dctx = ZSTD_createDCtx();
    int rc = ERR_NOMEM;
    if (!sp->dir || !sp->path || !sp->wpath || !sp->cctx || !sp->dctx) goto fail;
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
            unlink(path_of(sp, sp->path, e->d_name)); /* a write that never finished */
        else if (len > 3 && !strcmp(e->d_name + len - 3, ".kv"))
            rc = index_file(sp, e->d_name);
    }
    closedir(d);
    if (rc) goto fail;
    enforce_budget(sp, sp->path);
    if (pthread_create(&sp->writer, NULL, writer_main, sp)) {
        rc = ERR_NOMEM;
        goto fail;
    }
    sp->started = 1;
    *out = sp;
    return OK;
fail:
    spill_close(sp);
    return rc;
}

void spill_close(struct spill *sp) {
    if (!sp) return;
    if (sp->started) {
        pthread_mutex_lock(&sp->mu);
        sp->stopping = 1;
        pthread_cond_broadcast(&sp->cv);
        pthread_mutex_unlock(&sp->mu);
        pthread_join(sp->writer, NULL);
    }
    for (int i = 0; i < sp->n; i++) free(sp->f[i].tokens);
    free(sp->f);
    ZSTD_freeCCtx(sp->cctx);
    ZSTD_freeDCtx(sp->dctx);
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv);
    free(sp->dir), free(sp->path), free(sp->wpath);
    free(sp);
}

int spill_save(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv) {
    return spill_save_ctx(sp, tokens, n, kv, 0, 0, NULL);
}

int spill_save_ctx(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv,
                   uint64_t ctx_tag, int ctx_width, const float *ctx_rows) {
    if (n <= 0 || n > MAX_TOKENS || n > kv_len(kv)) return ERR_ARG;
    if (!ctx_tag || !ctx_rows || ctx_width <= 0 || ctx_width > MAX_CTX_WIDTH)
        ctx_tag = 0, ctx_width = 0;
    size_t kv_raw = (size_t)n * row_bytes(sp);
    size_t raw = kv_raw + (size_t)n * (size_t)ctx_width * sizeof(float);
    pthread_mutex_lock(&sp->mu);
    int rc = OK;
    for (int i = 0; i < sp->n; i++)
        if (sp->f[i].n >= n && covers(sp->f[i].ctx_tag, ctx_tag) &&
            common_prefix(sp->f[i].tokens, sp->f[i].n, tokens, n) == n) {
            touch(sp, i, sp->path); /* already saved, maybe with more after it */
            rc = 1;
            break;
        }
    if (!rc && sp->pending && sp->pending + raw > SPILL_MAX_PENDING) {
        sp->st.dropped++;
        rc = ERR_FULL;
    }
    if (!rc) sp->pending += raw; /* reserved while the rows are copied */
    pthread_mutex_unlock(&sp->mu);
    if (rc) return rc > 0 ? OK : rc;
    struct job *j = calloc(1, sizeof *j);
    if (j) {
        j->n = n, j->raw = raw, j->ctx_tag = ctx_tag, j->ctx_width = ctx_width;
        j->tokens = malloc(sizeof(int32_t) * (size_t)n);
        j->rows = malloc(raw);
    }
    rc = !j || !j->tokens || !j->rows ? ERR_NOMEM : kv_export(kv, n, (float *)j->rows);
    if (!rc && ctx_width) memcpy(j->rows + kv_raw, ctx_rows, raw - kv_raw);
    pthread_mutex_lock(&sp->mu);
    if (rc) {
        sp->pending -= raw;
        sp->st.dropped++;
    } else {
        memcpy(j->tokens, tokens, sizeof(int32_t) * (size_t)n);
        snprintf(j->name, sizeof j->name, "%016llx.kv",
                 (unsigned long long)XXH64(tokens, sizeof(int32_t) * (size_t)n, 0));
        if (sp->tail)
            sp->tail->next = j;
        else
            sp->head = j;
        sp->tail = j;
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    if (rc && j) free(j->tokens), free(j->rows), free(j);
    return rc;
}

void spill_flush(struct spill *sp) {
    pthread_mutex_lock(&sp->mu);
    while (sp->head) pthread_cond_wait(&sp->cv, &sp->mu);
    pthread_mutex_unlock(&sp->mu);
}

void spill_match(struct spill *sp, const int32_t *prompt, int n, int max_len,
                 struct spill_hit *hit) {
    spill_match_ctx(sp, prompt, n, max_len, 0, hit);
}

void spill_match_ctx(struct spill *sp, const int32_t *prompt, int n, int max_len, uint64_t ctx_tag,
                     struct spill_hit *hit) {
    hit->n = 0;
    hit->name[0] = 0;
    hit->ctx_tag = ctx_tag;
    if (max_len > n) max_len = n;
    pthread_mutex_lock(&sp->mu);
    for (int i = 0; i < sp->n; i++) {
        if (!covers(sp->f[i].ctx_tag, ctx_tag)) continue;
        int l = common_prefix(sp->f[i].tokens, sp->f[i].n, prompt, max_len);
        if (l > hit->n) {
            hit->n = l;
            snprintf(hit->name, sizeof hit->name, "%s", sp->f[i].name);
        }
    }
    for (const struct job *j = sp->head; j; j = j->next) { /* entries still on their way */
        if (!covers(j->ctx_tag, ctx_tag)) continue;
        int l = common_prefix(j->tokens, j->n, prompt, max_len);
        if (l > hit->n) {
            hit->n = l;
            snprintf(hit->name, sizeof hit->name, "%s", j->name);
        }
    }
    pthread_mutex_unlock(&sp->mu);
}

/* What a load asks for: hit, and where the context of its positions goes. */
struct want_ctx {
    float *rows; /* [hit->n, width] */
    int width;
};

/* The context rows of hit's positions (of n_rows stored after the KV rows) to w. */
static int ctx_out(const struct spill *sp, const unsigned char *rows, int n_rows, int width,
                   uint64_t tag, const struct spill_hit *hit, const struct want_ctx *w) {
    if (!hit->ctx_tag) return OK;
    if (tag != hit->ctx_tag || width != w->width) return ERR_FORMAT;
    memcpy(w->rows, rows + (size_t)n_rows * row_bytes(sp),
           sizeof(float) * (size_t)width * (size_t)hit->n);
    return OK;
}

/* Under mu: a queued entry's rows go straight into kv. 1 when hit named one, else 0. */
static int load_queued(struct spill *sp, const struct spill_hit *hit, const int32_t *prompt,
                       struct kv_cache *kv, const struct want_ctx *w, int *rc) {
    for (const struct job *j = sp->head; j; j = j->next) {
        if (strcmp(j->name, hit->name) || j->n < hit->n ||
            memcmp(j->tokens, prompt, sizeof(int32_t) * (size_t)hit->n))
            continue;
        *rc = ctx_out(sp, j->rows, j->n, j->ctx_width, j->ctx_tag, hit, w);
        if (!*rc && !(*rc = kv_import(kv, (const float *)j->rows, j->n, hit->n))) sp->st.reads++;
        return 1;
    }
    return 0;
}

int spill_load(struct spill *sp, const struct spill_hit *hit, const int32_t *prompt,
               struct kv_cache *kv) {
    struct spill_hit plain = *hit;
    plain.ctx_tag = 0;
    return spill_load_ctx(sp, &plain, prompt, kv, NULL, 0);
}

int spill_load_ctx(struct spill *sp, const struct spill_hit *hit, const int32_t *prompt,
                   struct kv_cache *kv, float *ctx, int ctx_width) {
    if (hit->n <= 0 || (hit->ctx_tag && (!ctx || ctx_width <= 0))) return ERR_ARG;
    const struct want_ctx w = {ctx, ctx_width};
    int rc = OK;
    pthread_mutex_lock(&sp->mu);
    int queued = load_queued(sp, hit, prompt, kv, &w, &rc);
    pthread_mutex_unlock(&sp->mu);
    if (queued) return rc;
    const char *path = path_of(sp, sp->path, hit->name);
    const char *why = NULL;
    struct file_header h;
    struct stat stt;
    unsigned char *buf = NULL, *planes = NULL, *rows = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ERR_IO; /* replaced or evicted since it was matched */
    if (fstat(fd, &stt) || read_all(fd, &h, sizeof h, 0)) {
        why = "shorter than a header";
    } else if (!(why = header_problem(sp, &h, (size_t)stt.st_size))) {
        size_t body = (size_t)stt.st_size - sizeof h, tok = sizeof(int32_t) * h.n_tokens;
        buf = malloc(body);
        planes = malloc(h.raw_bytes);
        rows = malloc(h.raw_bytes);
        if (!buf || !planes || !rows) {
            rc = ERR_NOMEM;
        } else if (read_all(fd, buf, body, sizeof h)) {
            why = "cannot be read";
        } else if (h.n_tokens < (uint32_t)hit->n || XXH64(buf, tok, 0) != h.tokens_hash ||
                   memcmp(buf, prompt, sizeof(int32_t) * (size_t)hit->n)) {
            why = "token ids changed";
        } else if (XXH64(buf + tok, h.comp_bytes, 0) != h.payload_hash) {
            why = "payload checksum mismatch";
        } else if (hit->ctx_tag &&
                   (h.ctx_tag != hit->ctx_tag || h.ctx_width != (uint32_t)ctx_width)) {
            why = "drafter context changed";
        } else {
            size_t d = ZSTD_decompressDCtx(sp->dctx, planes, h.raw_bytes, buf + tok, h.comp_bytes);
            if (ZSTD_isError(d) || d != h.raw_bytes) why = "payload does not decompress";
        }
    }
    close(fd);
    if (!rc && !why) {
        from_planes(planes, rows, h.raw_bytes / 4);
        rc = ctx_out(sp, rows, (int)h.n_tokens, (int)h.ctx_width, h.ctx_tag, hit, &w);
        if (!rc) rc = kv_import(kv, (const float *)rows, (int)h.n_tokens, hit->n);
    }
    free(buf), free(planes), free(rows);
    pthread_mutex_lock(&sp->mu);
    int i = find(sp, hit->name);
    if (why) {
        log_error("prefix cache file %s is unusable (%s): deleted", path, why);
        sp->st.rejects++;
        if (i >= 0)
            drop_file(sp, i, sp->path);
        else
            unlink(path);
        rc = ERR_FORMAT;
    } else if (!rc) {
        sp->st.reads++;
        if (i >= 0) touch(sp, i, sp->path);
    }
    pthread_mutex_unlock(&sp->mu);
    return rc;
}

struct spill_stats spill_stats(struct spill *sp) {
    pthread_mutex_lock(&sp->mu);
    struct spill_stats s = sp->st;
    s.files = sp->n;
    s.pending = sp->pending;
    pthread_mutex_unlock(&sp->mu);
    return s;
}
