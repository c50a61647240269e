/* tests/unit/test_prefix_cache.c: the prefix cache and its disk tier. Saved KV rows come back
 * bit-identical, also after a restart; a file with a flipped byte, cut short, renamed, or made
 * by another model is deleted and never used; the folder stays under its budget; a follow-up
 * over a saved prefix prefills only its suffix and answers exactly as without the cache; an
 * abandoned sequence leaves its prefix behind; chunked prefill gives the unchunked output. */
#include "test.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "cache/prefix.h"
#include "cache/spill.h"
#include "engine/generate.h"
#include "model/model.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TARGET "tests/data/golden/qwen3_f32"
#define OTHER  "tests/data/golden/qwen3_bf16"

static struct model *load(const char *dir) {
    struct model *m = NULL;
    model_load(dir, &(struct model_opts){.n_threads = 1}, &m);
    return m;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void rm_rf(const char *dir) {
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void tokens(int32_t *p, int n, int seed) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = 3 + (int32_t)((x >> 33) % 148);
    }
}

/* A cache holding the rows of ids[0..n). */
static struct kv_cache *prefilled(struct model *m, const int32_t *ids, int n) {
    struct kv_cache *kv = NULL;
    if (kv_new(m, 0, &kv)) return NULL;
    if (model_forward(m, kv, ids, n, NULL, 0)) kv_free(kv), kv = NULL;
    return kv;
}

static int same_rows(const struct kv_cache *a, const struct kv_cache *b, int n) {
    size_t nf = kv_row_floats(a) * (size_t)n;
    float *x = malloc(sizeof(float) * nf), *y = malloc(sizeof(float) * nf);
    int same =
        x && y && !kv_export(a, n, x) && !kv_export(b, n, y) && !memcmp(x, y, sizeof(float) * nf);
    free(x), free(y);
    return same;
}

/* The tokens of prompt[0..n) (at most max) that a file holds; the file goes to *hit. */
static int match(struct spill *sp, const int32_t *prompt, int n, int max, struct spill_hit *hit) {
    spill_match(sp, prompt, n, max, hit);
    return hit->n;
}

static struct spill_geometry geometry(struct model *m) {
    const struct hf_config *c = model_config(m);
    return (struct spill_geometry){c->n_layers, c->n_kv_heads, c->head_dim};
}

/* Modifies byte `at` of a file (from its end when negative), or cuts it to `at` bytes. */
static void flip_byte(const char *path, long at) {
    int fd = open(path, O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return;
    off_t off = at >= 0 ? at : st.st_size + at;
    unsigned char b;
    if (pread(fd, &b, 1, off) == 1) {
        b ^= 0x10;
        if (pwrite(fd, &b, 1, off) != 1) b = 0;
    }
    close(fd);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

TEST(fingerprint_tells_models_apart) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *a = load(TARGET), *b = load(TARGET), *c = load(OTHER);
    REQUIRE(a && b && c);
    CHECK(model_fingerprint(a) == model_fingerprint(b));
    CHECK(model_fingerprint(a) != model_fingerprint(c)); /* same shapes, other weights */
    model_free(a), model_free(b), model_free(c);
}

#define PAGE (1 << KV_PAGE_SHIFT)

static int pages(int n) {
    return (n + PAGE - 1) / PAGE;
}

/* Copying, exporting, importing and compacting a cache keep its rows bit for bit; a host
 * cache's memory follows the positions it holds, not its capacity. */
TEST(kv_rows_move_exactly) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    const int A = 2 * PAGE + PAGE / 2, C = PAGE + PAGE / 4; /* 160 and 80 positions */
    int32_t ids[4 * PAGE];
    tokens(ids, 4 * PAGE, 5);
    struct kv_cache *a = prefilled(m, ids, A), *b = NULL, *c = NULL;
    REQUIRE(a && kv_new(m, A, &b) == 0 && kv_new(m, 0, &c) == 0);
    CHECK(kv_bytes(c) == 0 && kv_capacity(c) == model_config(m)->max_pos);
    REQUIRE(kv_copy_prefix(b, a, C) == 0);
    CHECK(kv_len(b) == C && same_rows(a, b, C));
    CHECK(kv_copy_prefix(b, a, A + 1) != 0); /* more rows than the source holds */
    float *rows = malloc(sizeof(float) * kv_row_floats(a) * (size_t)A);
    REQUIRE(rows && kv_export(a, A, rows) == 0);
    REQUIRE(kv_import(c, rows, A, C) == 0);
    CHECK(kv_len(c) == C && same_rows(a, c, C));
    size_t page = kv_bytes(a) / (size_t)pages(A);
    CHECK(kv_bytes(c) == page * (size_t)pages(C)); /* whatever the capacity */
    /* rolled-back rows keep their pages until compacted; the rows stay exact */
    REQUIRE(model_forward(m, c, ids + C, PAGE, NULL, 0) == 0);
    kv_truncate(c, C);
    CHECK(kv_bytes(c) == page * (size_t)pages(C + PAGE));
    kv_compact(c);
    CHECK(kv_bytes(c) == page * (size_t)pages(C) && same_rows(a, c, C));
    /* the compacted cache still extends exactly: the next rows equal a's */
    REQUIRE(model_forward(m, c, ids + C, A - C, NULL, 0) == 0);
    CHECK(same_rows(a, c, A));
    free(rows);
    kv_free(a), kv_free(b), kv_free(c);
    model_free(m);
}

/* Caches over a shared prefix hold the other cache's pages instead of copying them: writing
 * copies only the pages being written (the source's rows never change), they outlive the
 * cache they share, continue bit for bit as a copy does, share from a cache that shares
 * without copying anything, and a rollback into the shared rows copies one page. */
TEST(shared_prefix_rows) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    int V = model_config(m)->vocab_size;
    /* a holds A positions, b shares S of them and writes W; a rollback to R */
    const int A = 2 * PAGE + PAGE / 4, S = PAGE + PAGE / 2, W = PAGE / 4, R = PAGE / 2 + 8;
    int32_t ids[4 * PAGE];
    tokens(ids, 4 * PAGE, 7);
    struct kv_cache *a = prefilled(m, ids, A), *b = NULL, *c = NULL, *d = NULL, *e = NULL;
    struct kv_cache *ref = prefilled(m, ids, S + W + 5);
    REQUIRE(a && ref && kv_new_shared(m, 4 * PAGE, a, S, &b) == 0 && kv_new(m, 4 * PAGE, &c) == 0);
    REQUIRE(kv_copy_prefix(c, a, S) == 0);
    size_t page = kv_bytes(a) / (size_t)pages(A);
    CHECK(kv_shared(b) == S && kv_len(b) == S && same_rows(b, c, S));
    struct kv_cache *ab[2] = {a, b};
    CHECK(kv_set_bytes(ab, 2) == kv_bytes(a)); /* b holds a's pages, nothing of its own */
    float *lb = malloc(sizeof(float) * V * PAGE), *lc = malloc(sizeof(float) * V * PAGE);
    REQUIRE(lb && lc);
    REQUIRE(model_forward(m, b, ids + S, W, lb, 1) == 0);
    REQUIRE(model_forward(m, c, ids + S, W, lc, 1) == 0);
    CHECK(!memcmp(lb, lc, sizeof(float) * V * W));
    /* b wrote [S, S + W): those pages are its own (the first one copied), the rest still a's */
    int written = (S + W - 1) / PAGE - S / PAGE + 1;
    CHECK(kv_shared(b) == S / PAGE * PAGE);
    CHECK(kv_set_bytes(ab, 2) == kv_bytes(a) + (size_t)written * page);
    CHECK(same_rows(a, ref, S + W)); /* a's rows are untouched (a holds the same tokens) */
    kv_free(a);                      /* b still holds its pages */
    REQUIRE(model_forward(m, b, ids + S + W, 5, lb, 1) == 0);
    REQUIRE(model_forward(m, c, ids + S + W, 5, lc, 1) == 0);
    CHECK(!memcmp(lb, lc, sizeof(float) * V * 5) && same_rows(b, c, S + W + 5));
    /* from a cache that shares: no copy at all */
    REQUIRE(kv_new_shared(m, 4 * PAGE, b, S + W, &d) == 0);
    struct kv_cache *bd[2] = {b, d};
    CHECK(kv_shared(d) == S + W && same_rows(d, c, S + W) && kv_set_bytes(bd, 2) == kv_bytes(b));
    /* a rollback into the shared rows: the written page is copied; b goes on unchanged */
    kv_truncate(d, R);
    kv_truncate(c, R);
    CHECK(kv_len(d) == R && kv_shared(d) == R);
    REQUIRE(model_forward(m, d, ids + 3 * PAGE, W, lb, 1) == 0);
    REQUIRE(model_forward(m, c, ids + 3 * PAGE, W, lc, 1) == 0);
    CHECK(!memcmp(lb, lc, sizeof(float) * V * W));
    CHECK(kv_shared(d) == R / PAGE * PAGE && same_rows(b, ref, S + W + 5));
    /* more rows than the source holds are refused */
    CHECK(kv_new_shared(m, 4 * PAGE, b, S + W + 6, &e) != 0 && !e);
    free(lb), free(lc);
    kv_free(b), kv_free(c), kv_free(d), kv_free(ref);
    model_free(m);
}

/* The bytes the cache reports are the bytes its entries keep alive, each page once: an entry
 * that shares another's pages counts them once, also after that other entry left; the rows
 * stay exact. */
TEST(shared_rows_are_counted) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 2}, &pc) == 0);
    const int NA = 2 * PAGE + 20, NS = 2 * PAGE + 10, NB = 3 * PAGE; /* a, shared, b */
    int32_t a[NA], b[NB], u[40];
    tokens(a, NA, 11);
    memcpy(b, a, sizeof(int32_t) * NS);
    tokens(b + NS, NB - NS, 12);
    tokens(u, 40, 13);
    struct kv_cache *ka = prefilled(m, a, NA), *ku = prefilled(m, u, 40),
                    *plain = prefilled(m, b, NB);
    REQUIRE(ka && ku && plain);
    size_t page = kv_bytes(ka) / (size_t)pages(NA);
    prefix_cache_put(pc, a, NA, ka);
    /* what a take would share, for the K/V pool: nothing for a drafter whose context the
     * entry lacks */
    CHECK(prefix_cache_peek(pc, b, NB, 0) == NS && prefix_cache_peek(pc, b, NB, 77) == 0);
    CHECK(prefix_cache_peek(pc, u, 40, 0) == 0 && prefix_cache_stats(pc).hits == 0);
    int reused = 0;
    struct kv_cache *kb = prefix_cache_take(pc, b, NB, 4 * PAGE, &reused);
    REQUIRE(kb);
    CHECK(reused == NS && kv_shared(kb) == NS);
    REQUIRE(model_forward(m, kb, b + NS, NB - NS, NULL, 0) == 0);
    prefix_cache_put(pc, b, NB, kb); /* shares a's first pages; a's entry stays */
    int whole = NS / PAGE;           /* pages still shared after b wrote from NS */
    CHECK(whole >= 2 && kv_shared(kb) == whole * PAGE);
    CHECK(prefix_cache_stats(pc).bytes == kv_bytes(ka) + kv_bytes(kb) - (size_t)whole * page);
    prefix_cache_put(pc, u, 40, ku); /* evicts a's entry; b's keeps the pages it shared */
    struct prefix_stats ps = prefix_cache_stats(pc);
    CHECK(ps.entries == 2 && kv_shared(kb) == 0);
    CHECK(ps.bytes == kv_bytes(kb) + kv_bytes(ku));
    CHECK(same_rows(kb, plain, NB));
    prefix_cache_free(pc);
    kv_free(plain);
    model_free(m);
}

/* What running sequences share with an entry counts with the cache's bytes only while the
 * entry is in RAM: once it is evicted, prefix_cache_shares() gives 0 (the server then counts
 * those pages against --kv-pool-mb as the sequences' own), although the two sequences still
 * share the pages with each other. */
TEST(shares_end_when_the_entry_leaves) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 2}, &pc) == 0);
    const int NA = 3 * PAGE + 5, NS = 2 * PAGE + 10, NB = NS + 30; /* entry, shared, sequences */
    int32_t a[NA], b[NB], c[NB], u[40], w[40];
    tokens(a, NA, 31);
    memcpy(b, a, sizeof(int32_t) * NS);
    memcpy(c, a, sizeof(int32_t) * NS);
    tokens(b + NS, NB - NS, 32);
    tokens(c + NS, NB - NS, 33);
    tokens(u, 40, 34);
    tokens(w, 40, 35);
    struct kv_cache *ka = prefilled(m, a, NA), *ku = prefilled(m, u, 40), *kw = prefilled(m, w, 40);
    REQUIRE(ka && ku && kw);
    prefix_cache_put(pc, a, NA, ka);
    int rb = 0, rc = 0;
    struct kv_cache *kb = prefix_cache_take(pc, b, NB, 4 * PAGE, &rb);
    struct kv_cache *kc = prefix_cache_take(pc, c, NB, 4 * PAGE, &rc);
    REQUIRE(kb && kc && rb == NS && rc == NS);
    CHECK(prefix_cache_shares(pc, kb) == NS && prefix_cache_shares(pc, kc) == NS);
    REQUIRE(model_forward(m, kb, b + NS, NB - NS, NULL, 0) == 0);
    int whole = NS / PAGE * PAGE; /* the partial page was copied when b wrote it */
    CHECK(prefix_cache_shares(pc, kb) == whole && prefix_cache_shares(pc, kc) == NS);
    prefix_cache_put(pc, u, 40, ku);
    prefix_cache_put(pc, w, 40, kw); /* a's entry leaves RAM */
    CHECK(prefix_cache_stats(pc).entries == 2);
    CHECK(prefix_cache_shares(pc, kb) == 0 && prefix_cache_shares(pc, kc) == 0);
    CHECK(kv_shared(kb) == whole && kv_shared(kc) == whole); /* with each other */
    kv_free(kb);
    kv_free(kc);
    prefix_cache_free(pc);
    model_free(m);
}

/* Over max_bytes the least recently used entry gives up its last pages and keeps its prefix,
 * which a follow-up still reuses exactly; with a spill folder the entry was saved whole first,
 * so the follow-up reads all of it from disk; an entry that would keep fewer than
 * PREFIX_MIN_TOKENS tokens leaves whole; an entry alone over the limit is trimmed too. */
TEST(over_budget_the_oldest_entry_keeps_its_prefix) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    char dir[] = "/tmp/dspark-trim-XXXXXX";
    REQUIRE(mkdtemp(dir));
    const int NA = 4 * PAGE, NB = 2 * PAGE + 5;
    int32_t a[NA + 8], b[NB], c[40];
    tokens(a, NA + 8, 41);
    tokens(b, NB, 42);
    tokens(c, 40, 43);
    struct kv_cache *plain = prefilled(m, a, NA);
    REQUIRE(plain);
    size_t page = kv_bytes(plain) / (size_t)pages(NA);
    for (int spill = 0; spill < 2; spill++) {
        struct prefix_cache *pc = NULL;
        struct prefix_cache_opts o = {
            .max_entries = 4, .max_bytes = 5 * page, .spill_dir = spill ? dir : NULL};
        REQUIRE(prefix_cache_new(m, &o, &pc) == 0);
        struct kv_cache *ka = prefilled(m, a, NA), *kb = prefilled(m, b, NB);
        REQUIRE(ka && kb);
        prefix_cache_put(pc, a, NA, ka);
        prefix_cache_put(pc, b, NB, kb); /* 7 pages: a gives up its last two */
        prefix_cache_flush(pc);
        struct prefix_stats ps = prefix_cache_stats(pc);
        CHECK(ps.entries == 2 && ps.trimmed_tokens == 2 * PAGE && ps.bytes == 5 * page);
        CHECK(ps.spill_writes == spill); /* a saved whole before it was trimmed */
        int reused = 0;
        struct kv_cache *kf = prefix_cache_take(pc, a, NA + 8, 6 * PAGE, &reused);
        REQUIRE(kf);
        CHECK(reused == (spill ? NA : 2 * PAGE) && same_rows(kf, plain, reused));
        prefix_cache_put(pc, a, 0, kf);
        prefix_cache_free(pc);
    }
    /* an entry trimmed down to pages another entry shares (the same tokens) leaves: a (4
     * pages) keeps 3 when put alone under a limit of 3; x shares its first two pages and adds
     * one, so a gives up its third and is then a prefix of x */
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(
                m, &(struct prefix_cache_opts){.max_entries = 4, .max_bytes = 3 * page}, &pc) == 0);
    int32_t x[3 * PAGE];
    memcpy(x, a, sizeof(int32_t) * 2 * PAGE);
    tokens(x + 2 * PAGE, PAGE, 44);
    struct kv_cache *ka = prefilled(m, a, NA);
    REQUIRE(ka);
    prefix_cache_put(pc, a, NA, ka);
    int rx = 0;
    struct kv_cache *kx = prefix_cache_take(pc, x, 3 * PAGE, 4 * PAGE, &rx);
    REQUIRE(kx && rx == 2 * PAGE);
    REQUIRE(model_forward(m, kx, x + rx, 3 * PAGE - rx, NULL, 0) == 0);
    prefix_cache_put(pc, x, 3 * PAGE, kx);
    struct prefix_stats ps = prefix_cache_stats(pc);
    CHECK(ps.entries == 1 && ps.bytes == 3 * page && ps.trimmed_tokens == PAGE);
    int ra = 0;
    struct kv_cache *kr = prefix_cache_take(pc, a, NA, 4 * PAGE, &ra);
    REQUIRE(kr);
    CHECK(ra == 2 * PAGE && same_rows(kr, plain, ra));
    prefix_cache_put(pc, a, 0, kr);
    prefix_cache_free(pc);
    /* one page each, room for one: the older entry would keep no page and leaves */
    pc = NULL;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 4, .max_bytes = page},
                             &pc) == 0);
    struct kv_cache *kb = prefilled(m, b, 40), *kc = prefilled(m, c, 40);
    REQUIRE(kb && kc);
    prefix_cache_put(pc, b, 40, kb);
    prefix_cache_put(pc, c, 40, kc);
    ps = prefix_cache_stats(pc);
    CHECK(ps.entries == 1 && ps.bytes == page && ps.trimmed_tokens == 0);
    int reused = 0;
    struct kv_cache *kn = prefix_cache_take(pc, b, 40, PAGE, &reused);
    CHECK(kn == NULL && reused == 0);
    prefix_cache_free(pc);
    /* an entry alone over the limit keeps what fits of its prefix: the limit holds */
    pc = NULL;
    REQUIRE(prefix_cache_new(
                m, &(struct prefix_cache_opts){.max_entries = 4, .max_bytes = 2 * page}, &pc) == 0);
    ka = prefilled(m, a, NA);
    REQUIRE(ka);
    prefix_cache_put(pc, a, NA, ka);
    ps = prefix_cache_stats(pc);
    CHECK(ps.entries == 1 && ps.bytes == 2 * page && ps.trimmed_tokens == 2 * PAGE);
    kr = prefix_cache_take(pc, a, NA, 4 * PAGE, &ra);
    REQUIRE(kr);
    CHECK(ra == 2 * PAGE && same_rows(kr, plain, ra));
    prefix_cache_put(pc, a, 0, kr);
    prefix_cache_free(pc);
    kv_free(plain);
    rm_rf(dir);
    model_free(m);
}

/* Two sequences that computed one prefix apart (two cold requests over one system prompt)
 * keep one copy of its whole pages once both are cached, and what follows from either is
 * exactly what a cold run gives. */
TEST(entries_over_one_prefix_share_pages) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    int V = model_config(m)->vocab_size;
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 4}, &pc) == 0);
    const int NC = 2 * PAGE + 12, NX = NC + 20, NY = NC + 40; /* common, x, y */
    int32_t x[NX], y[NY + 10];
    tokens(x, NX, 21);
    memcpy(y, x, sizeof(int32_t) * NC);
    tokens(y + NC, NY + 10 - NC, 22);
    struct kv_cache *kx = prefilled(m, x, NX), *ky = prefilled(m, y, NY),
                    *plain = prefilled(m, y, NY);
    REQUIRE(kx && ky && plain);
    size_t page = kv_bytes(kx) / (size_t)pages(NX);
    prefix_cache_put(pc, x, NX, kx);
    prefix_cache_put(pc, y, NY, ky);
    struct prefix_stats ps = prefix_cache_stats(pc);
    int whole = NC / PAGE * PAGE; /* the common prefix's whole pages */
    CHECK(ps.entries == 2 && ps.deduped_tokens == whole && kv_shared(ky) == whole);
    CHECK(ps.bytes == kv_bytes(kx) + kv_bytes(ky) - (size_t)(whole / PAGE) * page);
    CHECK(same_rows(ky, plain, NY));
    /* a follow-up over y continues exactly as from the plain cache */
    int reused = 0;
    struct kv_cache *kz = prefix_cache_take(pc, y, NY + 10, 4 * PAGE, &reused);
    REQUIRE(kz && reused == NY);
    float *lz = malloc(sizeof(float) * V * 10), *lp = malloc(sizeof(float) * V * 10);
    REQUIRE(lz && lp);
    REQUIRE(model_forward(m, kz, y + NY, 10, lz, 1) == 0);
    REQUIRE(model_forward(m, plain, y + NY, 10, lp, 1) == 0);
    CHECK(!memcmp(lz, lp, sizeof(float) * V * 10));
    prefix_cache_put(pc, y, NY + 10, kz);
    free(lz), free(lp);
    prefix_cache_free(pc);
    kv_free(plain);
    model_free(m);
}

TEST(spill_round_trip_survives_restart) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    char dir[] = "/tmp/dspark-spill-XXXXXX";
    REQUIRE(mkdtemp(dir));
    int32_t ids[200];
    tokens(ids, 200, 1);
    struct kv_cache *kv = prefilled(m, ids, 200);
    REQUIRE(kv);
    struct spill_geometry g = geometry(m);
    uint64_t fp = model_fingerprint(m);
    struct spill *sp = NULL;
    REQUIRE(spill_open(dir, fp, &g, 0, &sp) == 0);
    REQUIRE(spill_save(sp, ids, 150, kv) == 0);
    /* at once: served from the copy waiting for the writer, or from the file if it is done */
    struct spill_hit hit;
    struct kv_cache *back = NULL;
    REQUIRE(kv_new(m, 0, &back) == 0);
    REQUIRE(match(sp, ids, 150, 149, &hit) == 149 && spill_load(sp, &hit, ids, back) == 0);
    CHECK(kv_len(back) == 149 && same_rows(kv, back, 149));
    spill_flush(sp);
    CHECK(spill_stats(sp).pending == 0);
    REQUIRE(spill_save(sp, ids, 120, kv) == 0); /* a prefix of a saved file: nothing new */
    spill_flush(sp);
    struct spill_stats st = spill_stats(sp);
    CHECK(st.writes == 1 && st.files == 1);
    CHECK(st.bytes < 150 * kv_row_floats(kv) * sizeof(float)); /* compressed */
    spill_close(sp);
    /* a restart: the file is found again, and gives the same rows */
    REQUIRE(spill_open(dir, fp, &g, 0, &sp) == 0);
    int32_t prompt[180];
    memcpy(prompt, ids, sizeof(int32_t) * 140);
    tokens(prompt + 140, 40, 2);
    REQUIRE(match(sp, prompt, 180, 179, &hit) == 140);
    REQUIRE(spill_load(sp, &hit, prompt, back) == 0);
    CHECK(kv_len(back) == 140);
    CHECK(same_rows(kv, back, 140));
    CHECK(spill_stats(sp).reads == 1 && spill_stats(sp).writes == 0); /* after a restart */
    /* a longer sequence over the same prefix replaces the file */
    REQUIRE(spill_save(sp, ids, 200, kv) == 0);
    spill_flush(sp);
    st = spill_stats(sp);
    CHECK(st.files == 1 && st.writes == 1);
    spill_close(sp);
    kv_free(back), kv_free(kv);
    rm_rf(dir);
    model_free(m);
}

/* Saves one file, damages it with fn, reopens: returns the rejects counted (open and load). */
static long damaged(struct model *m, const char *dir, void (*fn)(const char *path, const char *dir),
                    int *used) {
    int32_t ids[100];
    tokens(ids, 100, 3);
    struct kv_cache *kv = prefilled(m, ids, 100);
    struct spill_geometry g = geometry(m);
    struct spill *sp = NULL;
    *used = -1;
    if (!kv || spill_open(dir, model_fingerprint(m), &g, 0, &sp)) return -1;
    char path[512];
    if (spill_save(sp, ids, 100, kv)) return -1;
    spill_flush(sp);
    if (spill_file_path(sp, 0, path, sizeof path)) return -1;
    spill_close(sp);
    fn(path, dir);
    long rejects = -1;
    if (!spill_open(dir, model_fingerprint(m), &g, 0, &sp)) {
        struct spill_hit hit;
        struct kv_cache *back = NULL;
        *used = 0;
        if (match(sp, ids, 100, 99, &hit) > 0 && !kv_new(m, 0, &back))
            *used = spill_load(sp, &hit, ids, back) == 0;
        rejects = spill_stats(sp).rejects;
        kv_free(back);
        spill_close(sp);
    }
    kv_free(kv);
    return fs_exists(path) && rejects > 0 ? -2 : rejects; /* a rejected file is gone */
}

static void flip_payload(const char *path, const char *dir) {
    (void)dir;
    flip_byte(path, -100);
}
static void flip_token(const char *path, const char *dir) {
    (void)dir;
    flip_byte(path, 88 + 4 * 10);
}
static void flip_header(const char *path, const char *dir) {
    (void)dir;
    flip_byte(path, 30);
}
static void cut(const char *path, const char *dir) {
    (void)dir;
    if (truncate(path, file_size(path) - 7)) return;
}
static void cut_header(const char *path, const char *dir) {
    (void)dir;
    if (truncate(path, 40)) return;
}
static void rename_it(const char *path, const char *dir) {
    char to[600];
    snprintf(to, sizeof to, "%.*s/0123456789abcdef.kv", (int)(strrchr(path, '/') - path), path);
    if (rename(path, to)) return;
    (void)dir;
}
static void nothing(const char *path, const char *dir) {
    (void)path, (void)dir;
}

TEST(corrupt_files_are_deleted_never_used) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    log_set_errors_quiet(1);
    struct {
        const char *name;
        void (*fn)(const char *, const char *);
        long rejects;
        int used;
    } cases[] = {
        {"intact", nothing, 0, 1},        {"payload byte", flip_payload, 1, 0},
        {"token byte", flip_token, 1, 0}, {"header byte", flip_header, 1, 0},
        {"truncated", cut, 1, 0},         {"header cut", cut_header, 1, 0},
        {"renamed", rename_it, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[] = "/tmp/dspark-spill-XXXXXX";
        if (!mkdtemp(dir)) continue;
        int used;
        long r = damaged(m, dir, cases[i].fn, &used);
        if (r != cases[i].rejects || used != cases[i].used) {
            printf("  %s: %ld rejects, used %d\n", cases[i].name, r, used);
            CHECK(0);
        }
        rm_rf(dir);
    }
    log_set_errors_quiet(0);
    model_free(m);
}

TEST(another_models_files_are_not_used) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET), *o = load(OTHER);
    REQUIRE(m && o);
    char dir[] = "/tmp/dspark-spill-XXXXXX";
    REQUIRE(mkdtemp(dir));
    int32_t ids[64];
    tokens(ids, 64, 4);
    struct kv_cache *kv = prefilled(m, ids, 64);
    REQUIRE(kv);
    struct spill_geometry g = geometry(m);
    struct spill *sp = NULL, *so = NULL;
    REQUIRE(spill_open(dir, model_fingerprint(m), &g, 0, &sp) == 0);
    REQUIRE(spill_save(sp, ids, 64, kv) == 0);
    spill_flush(sp);
    char path[512], moved[600];
    REQUIRE(spill_file_path(sp, 0, path, sizeof path) == 0);
    spill_close(sp);
    /* the other model has its own folder: it does not see, use or delete the file */
    REQUIRE(spill_open(dir, model_fingerprint(o), &g, 0, &so) == 0);
    struct spill_hit hit;
    CHECK(match(so, ids, 64, 63, &hit) == 0);
    CHECK(spill_stats(so).rejects == 0 && fs_exists(path));
    /* a file moved into the other model's folder is refused there */
    snprintf(moved, sizeof moved, "%s/%016llx/%s", dir, (unsigned long long)model_fingerprint(o),
             strrchr(path, '/') + 1);
    spill_close(so);
    REQUIRE(rename(path, moved) == 0);
    log_set_errors_quiet(1);
    REQUIRE(spill_open(dir, model_fingerprint(o), &g, 0, &so) == 0);
    log_set_errors_quiet(0);
    CHECK(spill_stats(so).rejects == 1 && spill_stats(so).files == 0 && !fs_exists(moved));
    spill_close(so);
    kv_free(kv);
    rm_rf(dir);
    model_free(m), model_free(o);
}

TEST(folder_stays_under_budget_and_drops_partial_writes) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    char dir[] = "/tmp/dspark-spill-XXXXXX", tmp[600];
    REQUIRE(mkdtemp(dir));
    struct spill_geometry g = geometry(m);
    struct spill *sp = NULL;
    REQUIRE(spill_open(dir, model_fingerprint(m), &g, 0, &sp) == 0);
    int32_t ids[4][100];
    long one = 0;
    for (int i = 0; i < 4; i++) { /* four unrelated sequences, oldest first */
        tokens(ids[i], 100, 10 + i);
        struct kv_cache *kv = prefilled(m, ids[i], 100);
        REQUIRE(kv && spill_save(sp, ids[i], 100, kv) == 0);
        spill_flush(sp);
        kv_free(kv);
        usleep(2000); /* distinct modification times */
    }
    one = (long)spill_stats(sp).bytes / 4;
    REQUIRE(spill_file_path(sp, 0, tmp, sizeof tmp - 4) == 0);
    strcat(tmp, ".tmp"); /* as a crash mid-write leaves */
    FILE *f = fopen(tmp, "w");
    REQUIRE(f);
    fputs("partial", f);
    fclose(f);
    /* touch the oldest by using it: it becomes the most recent */
    struct spill_hit hit;
    struct kv_cache *back = NULL;
    REQUIRE(kv_new(m, 0, &back) == 0);
    REQUIRE(match(sp, ids[0], 100, 99, &hit) == 99 && spill_load(sp, &hit, ids[0], back) == 0);
    kv_free(back);
    spill_close(sp);
    /* reopen with room for two files: the two least recently used go */
    REQUIRE(spill_open(dir, model_fingerprint(m), &g, (size_t)(2 * one + one / 2), &sp) == 0);
    struct spill_stats st = spill_stats(sp);
    CHECK(st.files == 2 && st.evicted == 2 && st.bytes <= (size_t)(2 * one + one / 2));
    CHECK(match(sp, ids[0], 100, 99, &hit) == 99); /* used last: kept */
    CHECK(match(sp, ids[3], 100, 99, &hit) == 99); /* written last: kept */
    CHECK(match(sp, ids[1], 100, 99, &hit) < 16);
    CHECK(!fs_exists(tmp));
    spill_close(sp);
    rm_rf(dir);
    model_free(m);
}

static struct gen_params greedy(int max_tokens) {
    return (struct gen_params){.max_tokens = max_tokens,
                               .ignore_eos = 1,
                               .top_logprobs = -1,
                               .mode = GEN_LOOKUP,
                               .max_draft = 4};
}

static int same_ids(const struct gen_result *a, const struct gen_result *b) {
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n_ids);
}

/* Turn 1 goes to disk (evicted by an unrelated request, or saved at shutdown); turn 2 reads
 * it back, prefills only its suffix and answers as a cold run does. */
TEST(follow_up_over_a_spilled_prefix) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    char dir[] = "/tmp/dspark-spill-XXXXXX";
    REQUIRE(mkdtemp(dir));
    struct prefix_cache_opts po = {.max_entries = 1, .spill_dir = dir};
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(m, &po, &pc) == 0);
    struct gen_engine cached = {.target = m, .cache = pc}, plain = {.target = m};
    struct gen_params gp = greedy(20);
    int32_t p1[120], other[40], p2[160];
    tokens(p1, 120, 20);
    tokens(other, 40, 21);
    struct gen_result a, b, c, d, e;
    REQUIRE(gen_run(&cached, p1, 120, &gp, NULL, NULL, &a) == 0);
    REQUIRE(gen_run(&cached, other, 40, &gp, NULL, NULL, &b) == 0); /* evicts turn 1 */
    prefix_cache_flush(pc);
    struct prefix_stats ps = prefix_cache_stats(pc);
    CHECK(ps.spill_writes == 1 && ps.entries == 1);
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 120, a.ids, sizeof(int32_t) * 20);
    tokens(p2 + 140, 20, 22);
    REQUIRE(gen_run(&cached, p2, 160, &gp, NULL, NULL, &c) == 0);
    REQUIRE(gen_run(&plain, p2, 160, &gp, NULL, NULL, &d) == 0);
    ps = prefix_cache_stats(pc);
    printf("  turn 2 from disk: %d of 160 prompt tokens reused\n", c.stats.cached_tokens);
    CHECK(ps.spill_reads == 1 && c.stats.cached_tokens == 139);
    CHECK(same_ids(&c, &d));
    prefix_cache_free(pc); /* saves turn 2 */
    /* a restart: a new cache over the same folder */
    REQUIRE(prefix_cache_new(m, &po, &pc) == 0);
    cached.cache = pc;
    int32_t p3[180];
    memcpy(p3, p2, sizeof p2);
    memcpy(p3 + 160, c.ids, sizeof(int32_t) * 20);
    REQUIRE(gen_run(&cached, p3, 180, &gp, NULL, NULL, &e) == 0);
    CHECK(e.stats.cached_tokens == 179);
    CHECK(prefix_cache_stats(pc).spill_reads == 1);
    gen_result_free(&e);
    REQUIRE(gen_run(&plain, p3, 180, &gp, NULL, NULL, &e) == 0);
    struct gen_result f;
    REQUIRE(gen_run(&cached, p3, 180, &gp, NULL, NULL, &f) == 0); /* now from RAM */
    CHECK(same_ids(&e, &f) && f.stats.cached_tokens == 179);
    prefix_cache_free(pc);
    gen_result_free(&a), gen_result_free(&b), gen_result_free(&c), gen_result_free(&d);
    gen_result_free(&e), gen_result_free(&f);
    rm_rf(dir);
    model_free(m);
}

/* Prefill in chunks of 7 gives the same output as in one pass (a batch run refuses a sequence
 * still prefilling); a sequence abandoned mid-way leaves the prefix it computed in the cache,
 * and two sequences over one entry share it. */
TEST(chunked_prefill_and_abandoned_sequences) {
    if (!fs_exists(TARGET)) SKIP("tests/data/golden is absent");
    struct model *m = load(TARGET);
    REQUIRE(m);
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 4}, &pc) == 0);
    struct gen_engine cached = {.target = m, .cache = pc}, plain = {.target = m};
    struct gen_params gp = greedy(16);
    int32_t p[100];
    tokens(p, 100, 30);
    struct gen_result whole, chunked;
    REQUIRE(gen_run(&plain, p, 100, &gp, NULL, NULL, &whole) == 0);
    struct gen_seq *s = NULL;
    REQUIRE(gen_seq_start(&plain, p, 100, &gp, NULL, NULL, &s) == 0);
    CHECK(gen_run_batch(&s, 1) == ERR_ARG); /* refused, not stepped forever, while prefilling */
    int calls = 0;
    while (gen_seq_prefill_left(s)) {
        CHECK(gen_seq_step(s) == 0); /* skipped while prefilling */
        REQUIRE(gen_seq_prefill(s, 7) == 0);
        calls++;
    }
    CHECK(calls == 15);
    while (!gen_seq_done(s)) REQUIRE(gen_seq_step(s) == 0);
    REQUIRE(gen_seq_finish(s, &chunked) == 0);
    CHECK(same_ids(&whole, &chunked));
    /* abandoned after 70 of 100 prompt tokens: those 70 stay cached */
    REQUIRE(gen_seq_start(&cached, p, 100, &gp, NULL, NULL, &s) == 0);
    REQUIRE(gen_seq_prefill(s, 70) == 0);
    gen_seq_free(s);
    CHECK(prefix_cache_stats(pc).entries == 1);
    struct gen_seq *s1 = NULL, *s2 = NULL;
    REQUIRE(gen_seq_new(&cached, p, 100, &gp, NULL, NULL, &s1) == 0);
    REQUIRE(gen_seq_new(&cached, p, 100, &gp, NULL, NULL, &s2) == 0); /* shares the entry */
    struct gen_seq *both[2] = {s1, s2};
    REQUIRE(gen_run_batch(both, 2) == 0);
    struct gen_result r1, r2;
    REQUIRE(gen_seq_finish(s1, &r1) == 0 && gen_seq_finish(s2, &r2) == 0);
    CHECK(r1.stats.cached_tokens == 70 && r2.stats.cached_tokens == 70);
    CHECK(same_ids(&whole, &r1) && same_ids(&whole, &r2));
    /* the finished sequences replaced the 70-token entry they extend */
    struct prefix_stats ps = prefix_cache_stats(pc);
    CHECK(ps.entries == 1 && ps.hits == 2 && ps.shared_tokens == 140); /* both read its pages */
    gen_result_free(&whole), gen_result_free(&chunked), gen_result_free(&r1);
    gen_result_free(&r2);
    prefix_cache_free(pc);
    model_free(m);
}

/* A sliding-window model (the Mistral golden model with a 24-token window): the cache keeps
 * every position and attention masks by position, so a follow-up over a cached prefix gives
 * what a cold run gives. The window is checked to matter for these prompts. */
TEST(sliding_window_prefix_is_exact) {
    const char *src = "tests/data/golden/mistral_f32";
    if (!fs_exists(src)) SKIP("tests/data/golden is absent");
    char dir[] = "/tmp/dspark-window-XXXXXX", path[600], from[PATH_MAX + 32];
    REQUIRE(mkdtemp(dir));
    char *cfg = NULL;
    size_t n_cfg;
    snprintf(path, sizeof path, "%s/config.json", src);
    REQUIRE(fs_read_file(path, &cfg, &n_cfg, 1 << 20) == 0);
    const char *key = "\"sliding_window\": null";
    char *at = strstr(cfg, key);
    REQUIRE(at);
    *at = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "%s\"sliding_window\": 24%s", cfg, at + strlen(key));
    fclose(f);
    free(cfg);
    char real[PATH_MAX];
    REQUIRE(realpath(src, real));
    snprintf(from, sizeof from, "%s/model.safetensors", real);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(symlink(from, path) == 0);
    struct model *w = load(dir), *full = load(src);
    REQUIRE(w && full);
    CHECK(model_config(w)->sliding_window == 24);
    struct prefix_cache *pc = NULL;
    REQUIRE(prefix_cache_new(w, &(struct prefix_cache_opts){.max_entries = 2}, &pc) == 0);
    struct gen_engine cached = {.target = w, .cache = pc}, plain = {.target = w};
    struct gen_params gp = greedy(24);
    int32_t p1[60], p2[100];
    tokens(p1, 60, 40);
    struct gen_result a, b, c;
    REQUIRE(gen_run(&cached, p1, 60, &gp, NULL, NULL, &a) == 0);
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 60, a.ids, sizeof(int32_t) * 24);
    tokens(p2 + 84, 16, 41);
    REQUIRE(gen_run(&cached, p2, 100, &gp, NULL, NULL, &b) == 0);
    REQUIRE(gen_run(&plain, p2, 100, &gp, NULL, NULL, &c) == 0);
    CHECK(b.stats.cached_tokens == 83);
    CHECK(same_ids(&b, &c));
    /* the window matters for these prompts: the last row's logits differ without it */
    int V = model_config(w)->vocab_size;
    float *lw = malloc(sizeof(float) * (size_t)V), *lf = malloc(sizeof(float) * (size_t)V);
    struct kv_cache *kw = NULL, *kf = NULL;
    REQUIRE(lw && lf && kv_new(w, 0, &kw) == 0 && kv_new(full, 0, &kf) == 0);
    REQUIRE(model_forward(w, kw, p2, 100, lw, 0) == 0 &&
            model_forward(full, kf, p2, 100, lf, 0) == 0);
    CHECK(memcmp(lw, lf, sizeof(float) * (size_t)V) != 0);
    free(lw), free(lf), kv_free(kw), kv_free(kf);
    gen_result_free(&a), gen_result_free(&b), gen_result_free(&c);
    prefix_cache_free(pc);
    model_free(w), model_free(full);
    rm_rf(dir);
}

int main(void) {
    log_set_quiet(1);
    RUN(fingerprint_tells_models_apart);
    RUN(kv_rows_move_exactly);
    RUN(shared_prefix_rows);
    RUN(shared_rows_are_counted);
    RUN(shares_end_when_the_entry_leaves);
    RUN(over_budget_the_oldest_entry_keeps_its_prefix);
    RUN(entries_over_one_prefix_share_pages);
    RUN(spill_round_trip_survives_restart);
    RUN(corrupt_files_are_deleted_never_used);
    RUN(another_models_files_are_not_used);
    RUN(folder_stays_under_budget_and_drops_partial_writes);
    RUN(follow_up_over_a_spilled_prefix);
    RUN(chunked_prefill_and_abandoned_sequences);
    RUN(sliding_window_prefix_is_exact);
    return test_report();
}
