/* bench/bench_forward.c: end-to-end CPU speed through the public model API (model.h), at a
 * fixed thread count, every figure the minimum over several runs:
 *   - read bandwidth (streaming sum over a 1 GiB buffer, 4 KiB and huge pages, and over the
 *     model file's own map) and the decode roofline it implies;
 *   - prefill tokens/s for 64 and 512 tokens from an empty cache;
 *   - decode tokens/s over 32 single-token steps after a 64-token prompt (--ctx N: N tokens),
 *     as % of roofline;
 *   - one forward over k = 1, 2, 4, 8, 16 new tokens at context 64 (all rows' logits, as a
 *     speculative verify pass needs), as a ratio to k = 1.
 *
 *   bench_forward MODEL_DIR [--threads 1,2] [--reps N] [--decode N] [--ctx N]
 */
#include "bench.h"
#include "model/model.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CTX 64

struct opts {
    const char *dir;
    int threads[4], n_threads;
    int reps, n_decode, ctx;
};

/* Best-of read bandwidth over the model file map (the pages the forward pass reads). */
static double bw_file(struct pool *pool, const char *dir, int prefetch, int reps) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return 0;
    }
    size_t n = (size_t)sb.st_size & ~(size_t)4095;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return 0;
    double r = bw_measure_buf(pool, p, n, prefetch, reps);
    munmap(p, n);
    return r;
}

static void fill_ids(int32_t *ids, int n, int vocab, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
    }
}

/* One timed forward: n ids (or n_steps single-token steps) after a cache of ctx positions. */
struct fwd {
    struct model *m;
    struct kv_cache *kv;
    const int32_t *ids; /* the prompt, then the ids to time */
    int ctx, n, n_steps, all_rows;
    float *logits;
};

static int fwd_prep(void *arg) {
    struct fwd *f = arg;
    if (kv_len(f->kv) < f->ctx) {
        kv_truncate(f->kv, 0);
        if (model_forward(f->m, f->kv, f->ids, f->ctx, NULL, 0)) return -1;
    }
    kv_truncate(f->kv, f->ctx);
    return 0;
}

static int fwd_run(void *arg) {
    struct fwd *f = arg;
    if (f->n_steps) {
        for (int s = 0; s < f->n_steps; s++)
            if (model_forward(f->m, f->kv, f->ids + f->ctx + s, 1, f->logits, 0)) return -1;
        return 0;
    }
    return model_forward(f->m, f->kv, f->ids + f->ctx, f->n, f->logits, f->all_rows);
}

/* Min seconds over reps undisturbed runs; notes on stdout when other processes interfered. */
static double timed(struct fwd *f, int reps) {
    int clean;
    double t = bench_min(fwd_prep, fwd_run, f, reps, &clean);
    if (t >= 0 && clean < reps) printf("  (only %d of %d runs undisturbed)\n", clean, reps);
    return t;
}

static int run(const struct opts *o, int th) {
    printf("\n== %d thread%s\n", th, th > 1 ? "s" : "");
    struct pool *pool = pool_new(th);
    /* [page kind][prefetch]: 4 KiB anonymous, huge anonymous, the model file's map */
    double r[3][2], bw = 0;
    for (int pf = 0; pf < 2; pf++) {
        r[0][pf] = bw_measure(pool, (size_t)1 << 30, 0, pf, o->reps);
        r[1][pf] = bw_measure(pool, (size_t)1 << 30, 1, pf, o->reps);
        r[2][pf] = bw_file(pool, o->dir, pf, o->reps);
    }
    pool_free(pool);
    for (int i = 0; i < 3; i++)
        for (int pf = 0; pf < 2; pf++) bw = r[i][pf] > bw ? r[i][pf] : bw;
    printf("read bandwidth, GB/s (plain / with prefetch): 4 KiB pages %.1f / %.1f, huge pages "
           "%.1f / %.1f, model file map %.1f / %.1f; roofline uses the best, %.1f\n",
           r[0][0] / 1e9, r[0][1] / 1e9, r[1][0] / 1e9, r[1][1] / 1e9, r[2][0] / 1e9, r[2][1] / 1e9,
           bw / 1e9);
    bench_quiesce();

    struct model_opts mo = {.n_threads = th};
    struct model *m;
    if (model_load(o->dir, &mo, &m)) return 1;
    const struct hf_config *c = model_config(m);
    size_t wbytes = model_weight_bytes(m);
    int V = c->vocab_size, maxn = o->ctx > 512 ? o->ctx : 512;
    struct kv_cache *kv;
    if (kv_new(m, maxn + o->n_decode + 16 > 1024 ? maxn + o->n_decode + 16 : 1024, &kv)) return 1;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(maxn + o->n_decode + 16));
    float *logits = malloc(sizeof(float) * (size_t)V * 16);
    if (!ids || !logits) return 1;
    fill_ids(ids, maxn + o->n_decode + 16, V, 12345);

    double roof = bw / (double)wbytes;
    printf("weights read per decode step: %.3f GB -> roofline %.1f tok/s (%.2f ms/token)\n",
           wbytes / 1e9, roof, 1e3 / roof);

    /* prefill from an empty cache (a first, untimed pass warms the page cache) */
    struct fwd f = {.m = m, .kv = kv, .ids = ids, .logits = logits};
    f.n = 64;
    if (fwd_prep(&f) || fwd_run(&f)) return 1;
    const int pre[] = {64, 512};
    for (int i = 0; i < 2; i++) {
        f.n = pre[i];
        double t = timed(&f, pre[i] > 64 ? (o->reps + 1) / 2 : o->reps);
        if (t < 0) return 1;
        printf("prefill %4d tokens: %8.1f ms  %7.1f tok/s\n", pre[i], t * 1e3, pre[i] / t);
    }

    /* decode: n_decode single steps after a ctx-token prompt */
    f = (struct fwd){
        .m = m, .kv = kv, .ids = ids, .logits = logits, .ctx = o->ctx, .n_steps = o->n_decode};
    double best = timed(&f, o->reps);
    if (best < 0) return 1;
    double tps = o->n_decode / best;
    printf(
        "decode %d steps at context %d: %.2f ms/token  %.1f tok/s  = %.1f%% of roofline (%.1f GB/s "
        "effective)\n",
        o->n_decode, o->ctx, best / o->n_decode * 1e3, tps, 100 * tps / roof, tps * wbytes / 1e9);

    /* verify-style passes over k new tokens at context CTX */
    const int ks[] = {1, 2, 4, 8, 16};
    double t1 = 0;
    printf("k-token pass at context %d (all rows' logits):\n", CTX);
    for (int i = 0; i < 5; i++) {
        f = (struct fwd){
            .m = m, .kv = kv, .ids = ids, .logits = logits, .ctx = CTX, .n = ks[i], .all_rows = 1};
        double t = timed(&f, o->reps);
        if (t < 0) return 1;
        if (ks[i] == 1) t1 = t;
        printf("  k=%2d: %7.2f ms  %.2fx k=1\n", ks[i], t * 1e3, t / t1);
    }
    free(ids);
    free(logits);
    kv_free(kv);
    model_free(m);
    bench_quiesce();
    return 0;
}

int main(int argc, char **argv) {
    struct opts o = {.threads = {1, 2}, .n_threads = 2, .reps = 5, .n_decode = 32, .ctx = CTX};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            o.n_threads = 0;
            for (char *s = argv[++i]; *s && o.n_threads < 4;) {
                o.threads[o.n_threads++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
                else
                    break;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            o.reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--decode") && i + 1 < argc) {
            o.n_decode = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            o.ctx = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && !o.dir) {
            o.dir = argv[i];
        } else {
            fprintf(stderr,
                    "usage: %s MODEL_DIR [--threads 1,2] [--reps N] [--decode N] [--ctx N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!o.dir || o.reps < 1 || o.n_decode < 1 || o.ctx < 1) {
        fprintf(stderr, "usage: %s MODEL_DIR [--threads 1,2] [--reps N] [--decode N] [--ctx N]\n",
                argv[0]);
        return 2;
    }
    for (int i = 0; i < o.n_threads; i++)
        if (run(&o, o.threads[i])) {
            fprintf(stderr, "bench failed\n");
            return 1;
        }
    return 0;
}
