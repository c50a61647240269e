/* Unit tests of tune/calib and tune/cache: what invalidates a calibration (model files,
 * drafter, threads, mode, caps), the cache file's round trip and its damaged forms, and a
 * real calibration of models/pycoder that the second call takes from the cache. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "model/model.h"
#include "tune/calib.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

static void write_file(const char *dir, const char *name, const char *text, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(text, 1, n, f);
    fclose(f);
}

/* A folder with config.json and a small safetensors file (8-byte length, header, data). */
static void fake_model(const char *dir, const char *config, const char *header) {
    mkdir(dir, 0755);
    write_file(dir, "config.json", config, strlen(config));
    char buf[512];
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (char)(n >> (8 * i));
    memcpy(buf + 8, header, n);
    memset(buf + 8 + n, 0, 16);
    write_file(dir, "model.safetensors", buf, 8 + n + 16);
}

static void set_mtime(const char *dir, const char *name, long sec) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    utimensat(AT_FDCWD, path, ts, 0);
}

static uint64_t dir_hash(const char *dir) {
    uint64_t h = 0;
    return tune_dir_hash(dir, &h) == OK ? h : 0;
}

TEST(dir_hash_follows_what_decides_speed) {
    char a[300];
    snprintf(a, sizeof a, "%s/a", tmp);
    fake_model(a, "{\"hidden_size\": 64}",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    set_mtime(a, "model.safetensors", 1000000);
    uint64_t h0 = dir_hash(a);
    REQUIRE(h0 != 0);
    CHECK(dir_hash(a) == h0);
    /* files that do not change the speed leave it alone */
    write_file(a, "tokenizer.json", "{}", 2);
    write_file(a, "README.md", "notes", 5);
    CHECK(dir_hash(a) == h0);
    /* config.json's content */
    write_file(a, "config.json", "{\"hidden_size\": 65}", 19);
    uint64_t h1 = dir_hash(a);
    CHECK(h1 != h0 && h1 != 0);
    /* the weights' modification time, size and header */
    set_mtime(a, "model.safetensors", 2000000);
    uint64_t h2 = dir_hash(a);
    CHECK(h2 != h1 && h2 != 0);
    fake_model(a, "{\"hidden_size\": 65}",
               "{\"w\":{\"dtype\":\"BF16\",\"shape\":[8],\"data_offsets\":[0,16]}}");
    set_mtime(a, "model.safetensors", 2000000);
    CHECK(dir_hash(a) != h2);
    /* another shard */
    uint64_t h3 = dir_hash(a);
    write_file(a, "model-00002.safetensors", "\0\0\0\0\0\0\0\0", 8);
    CHECK(dir_hash(a) != h3);
    /* a folder without config.json is an error */
    char b[300];
    snprintf(b, sizeof b, "%s/empty", tmp);
    mkdir(b, 0755);
    uint64_t h;
    log_set_errors_quiet(1);
    CHECK(tune_dir_hash(b, &h) != OK);
    snprintf(b, sizeof b, "%s/nowhere", tmp);
    CHECK(tune_dir_hash(b, &h) != OK);
    log_set_errors_quiet(0);
}

TEST(key_changes_with_every_input) {
    char t[300], d[300], d2[300];
    snprintf(t, sizeof t, "%s/target", tmp);
    snprintf(d, sizeof d, "%s/drafter", tmp);
    snprintf(d2, sizeof d2, "%s/drafter2", tmp);
    fake_model(t, "{\"t\": 1}", "{}");
    fake_model(d, "{\"d\": 1}", "{}");
    fake_model(d2, "{\"d\": 2}", "{}");
    struct tune_subject s = {.mode = "draft",
                             .target_dir = t,
                             .drafter_dir = d,
                             .max_cap = 8,
                             .max_batch = 1,
                             .n_threads = 2};
    char k0[1024], k[1024];
    REQUIRE(tune_cache_key(&s, k0, sizeof k0) == OK);
    CHECK(strstr(k0, "cpu:") && strstr(k0, "build=") && strstr(k0, "threads=2"));
    REQUIRE(tune_cache_key(&s, k, sizeof k) == OK);
    CHECK(!strcmp(k, k0));
    struct tune_subject v;
#define DIFFERS(field, value)                                                                      \
    do {                                                                                           \
        v = s;                                                                                     \
        v.field = value;                                                                           \
        CHECK(tune_cache_key(&v, k, sizeof k) == OK && strcmp(k, k0));                             \
    } while (0)
    DIFFERS(n_threads, 1);
    DIFFERS(max_cap, 4);
    DIFFERS(max_batch, 4);
    DIFFERS(bf16_activations, 1);
    DIFFERS(mode, "dspark");
    DIFFERS(drafter_dir, d2);
    DIFFERS(drafter_dir, NULL);
#undef DIFFERS
    /* the same drafter folder with other weights */
    set_mtime(d, "model.safetensors", 123456);
    CHECK(tune_cache_key(&s, k, sizeof k) == OK && strcmp(k, k0));
    /* too small a buffer is refused, not cut */
    CHECK(tune_cache_key(&s, k, 16) == ERR_ARG);
}

static void sample_costs(struct tune_costs *c, int max_cap, int batches) {
    memset(c, 0, sizeof *c);
    c->max_cap = max_cap;
    for (int w = 1; w <= max_cap + 1; w++) c->verify[w] = 1e-3 * (0.5 + 0.25 * w);
    for (int k = 1; k <= max_cap; k++) c->draft[k] = 1e-4 * k;
    c->overhead = 2.5e-5;
    c->n_batches = batches;
    for (int b = 0; b < batches; b++) {
        c->batch[b] = 2 << b;
        for (int w = 1; w <= max_cap + 1; w++) c->grid[b][w] = c->verify[w] * (1 + b);
    }
}

static int same_costs(const struct tune_costs *a, const struct tune_costs *b) {
    int ok = a->max_cap == b->max_cap && a->n_batches == b->n_batches &&
             fabs(a->overhead - b->overhead) < 1e-9;
    for (int w = 1; w <= a->max_cap + 1; w++) ok &= fabs(a->verify[w] - b->verify[w]) < 1e-9;
    for (int k = 0; k <= a->max_cap; k++) ok &= fabs(a->draft[k] - b->draft[k]) < 1e-9;
    for (int i = 0; i < a->n_batches; i++) {
        ok &= a->batch[i] == b->batch[i];
        for (int w = 1; w <= a->max_cap + 1; w++) ok &= fabs(a->grid[i][w] - b->grid[i][w]) < 1e-9;
    }
    return ok;
}

TEST(cache_round_trip_and_damage) {
    char path[300];
    snprintf(path, sizeof path, "%s/cache/sub/calibration.json", tmp); /* folders created */
    struct tune_costs a, b, got;
    sample_costs(&a, 6, 0);
    sample_costs(&b, 3, 2);
    CHECK(tune_cache_load(path, "k1", 6, &got) == ERR_IO); /* no file yet */
    REQUIRE(tune_cache_store(path, "k1", &a) == OK);
    REQUIRE(tune_cache_store(path, "k2", &b) == OK);
    REQUIRE(tune_cache_load(path, "k1", 6, &got) == OK);
    CHECK(same_costs(&a, &got));
    REQUIRE(tune_cache_load(path, "k2", 3, &got) == OK);
    CHECK(same_costs(&b, &got));
    CHECK(tune_cache_load(path, "k3", 6, &got) == ERR_IO);
    log_set_errors_quiet(1);
    CHECK(tune_cache_load(path, "k1", 7, &got) == ERR_IO); /* other caps: not this entry */
    /* replacing an entry keeps the others */
    a.overhead = 1e-4;
    REQUIRE(tune_cache_store(path, "k1", &a) == OK);
    CHECK(tune_cache_load(path, "k1", 6, &got) == OK && same_costs(&a, &got));
    CHECK(tune_cache_load(path, "k2", 3, &got) == OK);
    /* a damaged file: a miss, then rewritten whole by the next store */
    write_file(tmp, "cache/sub/calibration.json", "{\"schema\": 1, \"entr", 19);
    CHECK(tune_cache_load(path, "k1", 6, &got) == ERR_IO);
    REQUIRE(tune_cache_store(path, "k1", &a) == OK);
    CHECK(tune_cache_load(path, "k1", 6, &got) == OK && same_costs(&a, &got));
    /* another schema, and entries with bad numbers */
    const char *other = "{\"schema\": 2, \"entries\": {\"k1\": {}}}";
    write_file(tmp, "cache/sub/calibration.json", other, strlen(other));
    CHECK(tune_cache_load(path, "k1", 6, &got) == ERR_IO);
    const char *bad =
        "{\"schema\": 1, \"entries\": {"
        "\"neg\": {\"verify_ms\": [1, -2], \"draft_ms\": [0, 1], \"overhead_ms\": 0},"
        "\"zero\": {\"verify_ms\": [0, 2], \"draft_ms\": [0, 1], \"overhead_ms\": 0},"
        "\"str\": {\"verify_ms\": [1, 2], \"draft_ms\": [0, \"x\"], \"overhead_ms\": 0},"
        "\"grid\": {\"verify_ms\": [1, 2], \"draft_ms\": [0, 1], \"overhead_ms\": 0,"
        " \"batched\": [{\"sequences\": 4, \"verify_ms\": [1, 2]},"
        " {\"sequences\": 2, \"verify_ms\": [1, 2]}]},"
        "\"good\": {\"verify_ms\": [1, 2], \"draft_ms\": [0, 1], \"overhead_ms\": 0}}}";
    write_file(tmp, "cache/sub/calibration.json", bad, strlen(bad));
    CHECK(tune_cache_load(path, "neg", 1, &got) == ERR_IO);
    CHECK(tune_cache_load(path, "zero", 1, &got) == ERR_IO);
    CHECK(tune_cache_load(path, "str", 1, &got) == ERR_IO);
    CHECK(tune_cache_load(path, "grid", 1, &got) == ERR_IO);
    log_set_errors_quiet(0);
    REQUIRE(tune_cache_load(path, "good", 1, &got) == OK);
    CHECK_NEAR(got.verify[2], 2e-3, 1e-12);
    /* the file holds at most TUNE_CACHE_ENTRIES entries, the newest */
    for (int i = 0; i < TUNE_CACHE_ENTRIES + 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "many%d", i);
        REQUIRE(tune_cache_store(path, key, &a) == OK);
    }
    CHECK(tune_cache_load(path, "many0", 6, &got) == ERR_IO);
    char last[32];
    snprintf(last, sizeof last, "many%d", TUNE_CACHE_ENTRIES + 4);
    CHECK(tune_cache_load(path, last, 6, &got) == OK);
    int kept = 0;
    for (int i = 0; i < TUNE_CACHE_ENTRIES + 5; i++) {
        char key[32];
        snprintf(key, sizeof key, "many%d", i);
        kept += tune_cache_load(path, key, 6, &got) == OK;
    }
    CHECK(kept == TUNE_CACHE_ENTRIES);
    /* an unwritable place is an error, not a crash */
    log_set_errors_quiet(1);
    CHECK(tune_cache_store("/proc/dspark-nowhere/calibration.json", "k", &a) != OK);
    log_set_errors_quiet(0);
}

TEST(default_path) {
    char p[512];
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    REQUIRE(tune_cache_default_path(p, sizeof p) == OK);
    CHECK(!strcmp(p, "/x/cache/dspark/calibration.json"));
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    REQUIRE(tune_cache_default_path(p, sizeof p) == OK);
    CHECK(!strcmp(p, "/home/u/.cache/dspark/calibration.json"));
    CHECK(tune_cache_default_path(p, 8) == ERR_ARG);
}

/* A batched sweep that is dear measures widths 1, 2, 4, ... and B + 1 only, and the grid
 * between them is the straight line: the measured points come back exact, and a cost that
 * grows linearly with the rows comes back whole. */
TEST(sparse_grid_widths_and_interpolation) {
    int w[TUNE_MAX_CAP + 2];
    static const int want8[] = {1, 2, 4, 8, 9}, want15[] = {1, 2, 4, 8, 16}, want3[] = {1, 2, 4};
    CHECK(tune_grid_widths(8, 0, w) == 5 && !memcmp(w, want8, sizeof want8));
    CHECK(tune_grid_widths(15, 0, w) == 5 && !memcmp(w, want15, sizeof want15));
    CHECK(tune_grid_widths(3, 0, w) == 3 && !memcmp(w, want3, sizeof want3));
    CHECK(tune_grid_widths(1, 0, w) == 2 && w[0] == 1 && w[1] == 2);
    int nd = tune_grid_widths(6, 1, w), dense = nd == 7;
    for (int i = 0; i < nd; i++) dense &= w[i] == i + 1;
    CHECK(dense);
    /* cost(w) = 3 + 2w at the measured widths: every width gets exactly that */
    int nw = tune_grid_widths(15, 0, w);
    double c[TUNE_MAX_CAP + 2], out[TUNE_MAX_CAP + 2] = {0};
    for (int i = 0; i < nw; i++) c[i] = 3 + 2 * w[i];
    tune_interpolate(w, c, nw, out);
    int linear = 1;
    for (int x = 1; x <= 16; x++) linear &= fabs(out[x] - (3 + 2 * x)) < 1e-12;
    CHECK(linear);
    /* a step between two measured widths is spread over the widths between them */
    static const int ws[] = {1, 2, 4};
    static const double cs[] = {1, 1, 5};
    tune_interpolate(ws, cs, 3, out);
    CHECK(out[1] == 1 && out[2] == 1 && out[3] == 3 && out[4] == 5);
}

TEST(calibrate_pycoder_then_reuse) {
    const char *T = "models/pycoder", *D = "models/pycoder-draft";
    if (access(T, F_OK) || access(D, F_OK)) SKIP("models/pycoder or models/pycoder-draft absent");
    struct model_opts mo = {.n_threads = 1};
    struct model *target = NULL, *draft = NULL;
    REQUIRE(model_load(T, &mo, &target) == OK);
    mo.pool = model_pool(target);
    if (model_load(D, &mo, &draft) != OK) {
        model_free(target);
        REQUIRE(0);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/cal.json", tmp);
    struct tune_subject s = {.target = target,
                             .draft = draft,
                             .mode = "draft",
                             .target_dir = T,
                             .drafter_dir = D,
                             .max_cap = 4,
                             .max_batch = 2,
                             .n_threads = 1};
    struct tune_calib_opts o = {.cache_path = path};
    struct tune_costs c1, c2;
    int cached = -1;
    log_set_quiet(1);
    REQUIRE(tune_calibrate(&s, &o, &c1, &cached) == OK);
    CHECK(cached == 0);
    CHECK(access(path, F_OK) == 0);
    /* the curves: positive, a 5-row pass dearer than a 1-row one, drafting grows with k */
    for (int w = 1; w <= 5; w++) CHECK(c1.verify[w] > 0 && c1.verify[w] < 1);
    CHECK(c1.verify[5] > c1.verify[1]);
    for (int w = 1; w < 5; w++) CHECK(c1.verify[w] <= c1.verify[w + 1]); /* made monotone */
    for (int k = 1; k < 4; k++) CHECK(c1.draft[k] <= c1.draft[k + 1]);
    CHECK(c1.draft[0] == 0 && c1.draft[1] > 0 && c1.draft[4] > c1.draft[1]);
    CHECK(c1.overhead >= 0 && c1.overhead < c1.verify[1]);
    CHECK(c1.n_batches == 1 && c1.batch[0] == 2 && c1.grid[0][1] > c1.verify[1] * 0.5);
    int grid_set = 1; /* every width of the batched pass priced, measured or interpolated */
    for (int w = 1; w <= 5; w++) grid_set &= c1.grid[0][w] > 0 && c1.grid[0][w] < 1;
    CHECK(grid_set);
    REQUIRE(tune_calibrate(&s, &o, &c2, &cached) == OK);
    CHECK(cached == 1);
    CHECK(same_costs(&c1, &c2));
    /* other threads: measured again; lookup: drafting is free */
    s.n_threads = 3;
    REQUIRE(tune_calibrate(&s, &o, &c2, &cached) == OK);
    CHECK(cached == 0);
    struct tune_subject l = {.target = target,
                             .mode = "lookup",
                             .target_dir = T,
                             .max_cap = 3,
                             .max_batch = 1,
                             .n_threads = 1};
    REQUIRE(tune_calibrate(&l, &o, &c2, &cached) == OK);
    CHECK(cached == 0 && c2.draft[3] == 0 && c2.n_batches == 0);
    /* --force measures even with the entry there */
    o.force = 1;
    REQUIRE(tune_calibrate(&l, &o, &c2, &cached) == OK);
    CHECK(cached == 0);
    log_set_quiet(0);
    model_free(draft);
    model_free(target);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/dspark-tune-%d", (int)getpid());
    mkdir(tmp, 0755);
    RUN(dir_hash_follows_what_decides_speed);
    RUN(key_changes_with_every_input);
    RUN(cache_round_trip_and_damage);
    RUN(default_path);
    RUN(sparse_grid_widths_and_interpolation);
    RUN(calibrate_pycoder_then_reuse);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) printf("note: could not remove %s\n", tmp);
    return test_report();
}
