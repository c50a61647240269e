/* tests/unit/test_gpu.c: the CUDA forward against transformers' golden data and against the
 * CPU: logits within fp32 tolerance, greedy continuations equal, passes of every width 1..40
 * equal single steps bit for bit (graphs and direct launches alike), device greedy ids equal
 * the argmax of the logits, speculative modes (lookup, draft model, DSpark, DFlash) equal to
 * baseline, batched sequences equal to each alone. Skips without a CUDA build
 * and a device (CI has neither; results are recorded in docs/perf.md). */
#include "test.h"
#include "unit/golden.h"

#include "backend/gpu.h"
#include "cache/prefix.h"
#include "base/err.h"
#include "base/fs.h"
#include "engine/generate.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "sample/dist.h"
#include "tensor/dtype.h"
#include "sample/rng.h"
#include "spec/block_model.h"
#include "spec/verify.h"
#include "sample/sampler.h"
#include "sample/penalty.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* How far the GPU's results may be from the CPU's: bf16 rounding of every matmul input with
 * one term (the default; measured up to 1.6e-2 on the golden models); float32 rounding where
 * the matmuls' inputs are three bf16 terms (exact products: DSPARK_GPU_INPUTS=exact runs the
 * whole suite so) */
static double cpu_tol(void) {
    return gpu_input_terms() == 1 ? 3e-2 : 1e-4;
}

/* sets var to value and returns its old value (NULL: unset) for env_restore: a whole run may
 * set a DSPARK_GPU_ knob for every test, and a test's own setting must not outlive it */
static char *env_swap(const char *var, const char *value) {
    const char *was = getenv(var);
    char *old = was ? strdup(was) : NULL;
    setenv(var, value, 1);
    return old;
}
static void env_restore(const char *var, char *old) {
    if (old)
        setenv(var, old, 1);
    else
        unsetenv(var);
    free(old);
}

/* the model in dir on the GPU with one setting of the environment, which is then restored */
static int load_dir_with(const char *dir, const char *var, const char *value, struct model **m) {
    char *old = env_swap(var, value);
    int rc = model_load(dir, &(struct model_opts){.n_threads = 1, .gpu = 1}, m);
    env_restore(var, old);
    return rc;
}
/* the same for models/pycoder */
static int load_with(const char *var, const char *value, struct model **m) {
    return load_dir_with("models/pycoder", var, value, m);
}

/* Whether one pass of the w rows after the first P ids, on a fresh kv holding only those P,
 * gives into out the logits steps holds (single steps from P). */
static int pass_equals_steps(struct model *m, struct kv_cache *kv, const int32_t *ids, int P, int w,
                             const float *steps, float *out) {
    const int V = model_config(m)->vocab_size;
    kv_truncate(kv, 0);
    CHECK(model_forward(m, kv, ids, P, NULL, 0) == 0);
    CHECK(model_forward(m, kv, ids + P, w, out, 1) == 0);
    return !memcmp(out, steps, sizeof(float) * V * w);
}

/* The logits of a P-token prompt, then of a W-row verify and S single steps after it, on a
 * fresh cache of cap positions: [P + W + S][V], to free; NULL when out of memory. */
static float *prompt_verify_steps(struct model *m, const int32_t *ids, int P, int W, int S,
                                  int cap) {
    const int V = model_config(m)->vocab_size;
    float *l = malloc(sizeof(float) * V * (P + W + S));
    struct kv_cache *kv;
    if (!l || kv_new(m, cap, &kv)) {
        free(l);
        return NULL;
    }
    CHECK(model_forward(m, kv, ids, P, l, 1) == 0);
    CHECK(model_forward(m, kv, ids + P, W, l + (size_t)P * V, 1) == 0);
    for (int i = 0; i < S; i++)
        CHECK(model_forward(m, kv, ids + P + W + i, 1, l + (size_t)(P + W + i) * V, 0) == 0);
    kv_free(kv);
    return l;
}

/* GPU logits of the golden prompt against the reference; greedy 64 against its ids. */
static void golden(const char *name) {
    char dir[256], js[300], st[300];
    snprintf(dir, sizeof dir, "tests/data/golden/%s", name);
    snprintf(js, sizeof js, "%s/golden.json", dir);
    snprintf(st, sizeof st, "%s/golden.safetensors", dir);
    char *text;
    size_t len;
    REQUIRE(fs_read_file(js, &text, &len, 1 << 24) == 0);
    cJSON *g = cJSON_Parse(text);
    free(text);
    int32_t prompt[64], want[64];
    int np = 0, nw = 0;
    for (cJSON *it = cJSON_GetObjectItem(g, "prompt_ids")->child; it; it = it->next)
        prompt[np++] = (int32_t)it->valuedouble;
    for (cJSON *it = cJSON_GetObjectItem(g, "greedy_ids")->child; it; it = it->next)
        want[nw++] = (int32_t)it->valuedouble;
    cJSON_Delete(g);
    struct st_set *ref;
    REQUIRE(st_open_file(st, &ref) == 0);
    const struct st_tensor *pl =
        st_find(ref, strstr(name, "f32") ? "prompt_logits" : "prompt_logits_f32math");
    struct model *m;
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    int V = model_config(m)->vocab_size;
    struct kv_cache *kv;
    REQUIRE(kv_new(m, 256, &kv) == 0);
    float *lg = malloc(sizeof(float) * V * np);
    CHECK(model_forward(m, kv, prompt, np, lg, 1) == 0);
    double e = rel_err(lg, pl->data, (size_t)V * np);
    int32_t tok = argmax(lg + (size_t)(np - 1) * V, V);
    int same = 0;
    for (int t = 0; t < nw && tok == want[t]; t++) {
        same++;
        CHECK(model_forward(m, kv, &tok, 1, lg, 0) == 0);
        tok = argmax(lg, V);
    }
    printf("  %s on %s: prompt logits rel err %.2e, greedy %d/%d\n", name, gpu_device_name(), e,
           same, nw);
    if (same < nw && gpu_input_terms() == 1) {
        /* bf16 inputs move logits by about e: a divergence must be a tie at that scale, the
         * reference's token within cpu_tol() of the GPU's pick (relative to the largest) */
        const float *last = same ? lg : lg + (size_t)(np - 1) * V;
        double top = 0;
        for (int i = 0; i < V; i++) top = fabs(last[i]) > top ? fabs(last[i]) : top;
        double gap = ((double)last[tok] - last[want[same]]) / (top > 0 ? top : 1);
        printf("  first divergence at token %d: the reference's token %.2e below the GPU's "
               "(relative to the largest logit)\n",
               same, gap);
        CHECK(e <= cpu_tol() && gap <= cpu_tol());
    } else {
        CHECK(e <= cpu_tol() && same == nw);
    }
    free(lg);
    kv_free(kv);
    model_free(m);
    st_close(ref);
}

TEST(gpu_golden) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    static const char *names[] = {"qwen3_f32",  "qwen2_f32",  "llama3_f32",  "mistral_f32",
                                  "qwen3_bf16", "qwen2_bf16", "llama3_bf16", "qwen3_f16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) golden(names[i]);
}

/* A pass of w rows gives the rows of w single steps bit for bit, for every w up to 40 (over
 * GPU_GROUP rows the matmuls run in two launches, outside graphs); device greedy ids are the
 * argmax of the same logits; graphs off gives the same bits. */
TEST(gpu_batch_invariance) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *m2;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    REQUIRE(load_with("DSPARK_GPU_GRAPHS", "0", &m2) == 0);
    int V = model_config(m)->vocab_size, W = 40, P = 37;
    int32_t ids[128], gid[64];
    for (int i = 0; i < 128; i++) ids[i] = 20 + (i * 131) % 8000;
    struct kv_cache *a, *b;
    REQUIRE(kv_new(m, 160, &a) == 0 && kv_new(m, 160, &b) == 0);
    float *la = malloc(sizeof(float) * V * (P + W)), *lb = malloc(sizeof(float) * V * W);
    REQUIRE(la && lb);
    CHECK(model_forward(m, b, ids, P, NULL, 0) == 0);
    for (int i = 0; i < W; i++)
        CHECK(model_forward(m, b, ids + P + i, 1, lb + (size_t)i * V, 0) == 0);
    int bad = 0, bad_ids = 0;
    for (int w = 1; w <= W; w++) {
        if (!pass_equals_steps(m, a, ids, P, w, lb, la)) {
            printf("  width %d differs from single steps\n", w);
            bad++;
        }
        kv_truncate(a, P);
        CHECK(model_forward_greedy(m, a, ids + P, w, gid, 1) == 0);
        for (int i = 0; i < w; i++) bad_ids += gid[i] != argmax(lb + (size_t)i * V, V);
    }
    CHECK(bad == 0 && bad_ids == 0);
    /* the prefix itself: one pass of P rows against P single steps, and graphs off */
    kv_truncate(a, 0);
    CHECK(model_forward(m, a, ids, P + W, la, 1) == 0);
    CHECK(memcmp(la + (size_t)P * V, lb, sizeof(float) * V * W) == 0);
    struct kv_cache *c;
    REQUIRE(kv_new(m2, 160, &c) == 0);
    CHECK(model_forward(m2, c, ids, P, NULL, 0) == 0);
    CHECK(model_forward(m2, c, ids + P, 16, la, 1) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * V * 16) == 0);
    printf("  widths 1..%d equal single steps: %s; device greedy ids equal argmax: %s; graphs "
           "off equal\n",
           W, bad ? "NO" : "yes", bad_ids ? "NO" : "yes");
    free(la), free(lb);
    kv_free(a), kv_free(b), kv_free(c);
    model_free(m), model_free(m2);
}

/* --gpu-inputs bf16 (model_opts.gpu_inputs) whatever the suite's default: one term per
 * matmul input, every width still equal to single steps (the decode kernels of 1-4 n-tiles
 * and the one-launch prompt kernel), logits within bf16 rounding of the CPU's and not those
 * of exact inputs, and a fingerprint of its own, so that the prefix cache never hands one
 * contract's K/V to the other. */
TEST(gpu_inputs_bf16) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *mx, *mc;
    /* float caches, whatever the suite's default: exact inputs are then exact products */
    REQUIRE(model_load("models/pycoder",
                       &(struct model_opts){.n_threads = 1, .gpu = 1, .gpu_inputs = 1, .gpu_kv = 4},
                       &m) == 0);
    REQUIRE(model_load("models/pycoder",
                       &(struct model_opts){.n_threads = 1, .gpu = 1, .gpu_inputs = 3, .gpu_kv = 4},
                       &mx) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &mc) == 0);
    CHECK(gpu_model_input_terms(model_gpu(m)) == 1 && gpu_model_input_terms(model_gpu(mx)) == 3);
    CHECK(model_fingerprint(m) != model_fingerprint(mx));
    int V = model_config(m)->vocab_size, W = 40, P = 37;
    int32_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = 20 + (i * 131) % 8000;
    struct kv_cache *a, *b, *c;
    REQUIRE(kv_new(m, 400, &a) == 0 && kv_new(m, 400, &b) == 0 && kv_new(mc, 160, &c) == 0);
    float *la = malloc(sizeof(float) * V * 300), *lb = malloc(sizeof(float) * V * W);
    float *lc = malloc(sizeof(float) * V * W);
    REQUIRE(la && lb && lc);
    CHECK(model_forward(m, b, ids, P, NULL, 0) == 0);
    for (int i = 0; i < W; i++)
        CHECK(model_forward(m, b, ids + P + i, 1, lb + (size_t)i * V, 0) == 0);
    int bad = 0;
    for (int w = 1; w <= W; w++) bad += !pass_equals_steps(m, a, ids, P, w, lb, la);
    /* a 300-row prompt: its last rows against single steps from 260 */
    kv_truncate(a, 0);
    CHECK(model_forward(m, a, ids, 300, la, 1) == 0);
    kv_truncate(b, 0);
    CHECK(model_forward(m, b, ids, 260, NULL, 0) == 0);
    int bad_long = 0;
    for (int i = 260; i < 300; i++) {
        CHECK(model_forward(m, b, ids + i, 1, lc, 0) == 0);
        bad_long += memcmp(lc, la + (size_t)i * V, sizeof(float) * V) != 0;
    }
    CHECK(model_forward(mc, c, ids, P, NULL, 0) == 0);
    CHECK(model_forward(mc, c, ids + P, W, lc, 1) == 0);
    double e = rel_err(lb, lc, (size_t)V * W);
    struct kv_cache *x;
    REQUIRE(kv_new(mx, 160, &x) == 0);
    CHECK(model_forward(mx, x, ids, P, NULL, 0) == 0);
    CHECK(model_forward(mx, x, ids + P, W, la, 1) == 0);
    double ex = rel_err(la, lc, (size_t)V * W), d = rel_err(lb, la, (size_t)V * W);
    printf("  bf16 inputs: widths 1..%d equal single steps: %s; prompt rows equal steps: %s; "
           "against the CPU %.2e (exact inputs %.2e); bf16 against exact %.2e\n",
           W, bad ? "NO" : "yes", bad_long ? "NO" : "yes", e, ex, d);
    CHECK(bad == 0 && bad_long == 0);
    CHECK(e <= 3e-2 && ex <= 1e-4 && d > 1e-5);
    free(la), free(lb), free(lc);
    kv_free(a), kv_free(b), kv_free(c), kv_free(x);
    model_free(m), model_free(mx), model_free(mc);
}

/* Passes over GPU_GROUP rows in one launch (gemm.cu; forced here, since a small model's
 * matrices would not fill the GPU) give the bits of single steps and of the per-group
 * launches: rows 33..40 of a verify, a 77-row prompt, and every row of 200- and 300-row
 * prompts (with bf16 inputs on sm_90a, 128-row tiles and the rest in 64-row tiles). */
TEST(gpu_gemm_exact) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *mg;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    REQUIRE(load_with("DSPARK_GPU_GEMM", "2", &mg) == 0);
    enum { P = 37, W = 40, L = 300 };
    int V = model_config(m)->vocab_size;
    int32_t ids[L];
    for (int i = 0; i < L; i++) ids[i] = 20 + (i * 131) % 8000;
    struct kv_cache *a, *b;
    REQUIRE(kv_new(m, L, &a) == 0 && kv_new(mg, L, &b) == 0);
    float *la = malloc(sizeof(float) * V * L), *lb = malloc(sizeof(float) * V * L);
    REQUIRE(la && lb);
    CHECK(model_forward(m, a, ids, P, NULL, 0) == 0);
    for (int i = 0; i < W; i++)
        CHECK(model_forward(m, a, ids + P + i, 1, la + (size_t)i * V, 0) == 0);
    int bad = 0;
    for (int w = 33; w <= W; w++) {
        if (!pass_equals_steps(mg, b, ids, P, w, la, lb)) {
            printf("  one-launch pass of %d rows differs from single steps\n", w);
            bad++;
        }
    }
    kv_truncate(b, 0);
    CHECK(model_forward(mg, b, ids, P + W, lb, 1) == 0);
    int prompt_same = !memcmp(la, lb + (size_t)P * V, sizeof(float) * V * W);
    int long_same[2];
    const int lens[2] = {200, L};
    for (int i = 0; i < 2; i++) {
        kv_truncate(a, 0), kv_truncate(b, 0);
        CHECK(model_forward(m, a, ids, lens[i], la, 1) == 0);
        CHECK(model_forward(mg, b, ids, lens[i], lb, 1) == 0);
        long_same[i] = !memcmp(la, lb, sizeof(float) * V * lens[i]);
    }
    printf("  one launch over all rows: widths 33..%d equal single steps: %s; a %d-row prompt: "
           "%s; %d- and %d-row prompts equal per-group launches: %s, %s\n",
           W, bad ? "NO" : "yes", P + W, prompt_same ? "yes" : "NO", lens[0], lens[1],
           long_same[0] ? "yes" : "NO", long_same[1] ? "yes" : "NO");
    CHECK(bad == 0 && prompt_same && long_same[0] && long_same[1]);
    free(la), free(lb);
    kv_free(a), kv_free(b);
    model_free(m), model_free(mg);
}

/* Attention with two tile buffers a block (passes with few work items) gives the bits of the
 * one-buffer kernel (DSPARK_GPU_ATT_NB=1 uses it always): a 300-token prompt, then a 16-row
 * verify and single steps. */
TEST(gpu_attention_buffers) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m[0]) ==
            0);
    REQUIRE(load_with("DSPARK_GPU_ATT_NB", "1", &m[1]) == 0);
    enum { P = 300, W = 16, S = 4 };
    int V = model_config(m[0])->vocab_size;
    int32_t ids[P + W + S];
    for (int i = 0; i < P + W + S; i++) ids[i] = 20 + (i * 197) % 8000;
    float *l[2];
    size_t n = (size_t)V * (P + W + S);
    for (int k = 0; k < 2; k++) REQUIRE((l[k] = prompt_verify_steps(m[k], ids, P, W, S, 512)));
    int same = !memcmp(l[0], l[1], sizeof(float) * n);
    printf("  attention with two tile buffers equals one buffer (prompt, verify, steps): %s\n",
           same ? "yes" : "NO");
    CHECK(same);
    for (int k = 0; k < 2; k++) free(l[k]), model_free(m[k]);
}

/* Decode steps on k_attn1 (a block per work item, several a SM) give the bits of the other
 * attention kernels: with DSPARK_GPU_ATT_FEW=0 every step of one row takes k_attn1, with
 * DSPARK_GPU_ATT1=0 none does; a 300-token prompt, a 16-row verify and 8 single steps whose
 * keys cross a span boundary. */
TEST(gpu_attention_one) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(load_with("DSPARK_GPU_ATT1", "0", &m[0]) == 0);
    REQUIRE(load_with("DSPARK_GPU_ATT_FEW", "0", &m[1]) == 0);
    enum { P = 300, W = 16, S = 8 };
    int V = model_config(m[0])->vocab_size;
    int32_t ids[P + W + S];
    for (int i = 0; i < P + W + S; i++) ids[i] = 31 + (i * 211) % 8000;
    float *l[2];
    for (int k = 0; k < 2; k++) REQUIRE((l[k] = prompt_verify_steps(m[k], ids, P, W, S, 512)));
    const size_t at = (size_t)V * (P + W);
    int same = !memcmp(l[0], l[1], sizeof(float) * at),
        steps = !memcmp(l[0] + at, l[1] + at, sizeof(float) * V * S);
    printf("  decode steps on k_attn1 equal the other kernels': prompt and verify %s, %d steps %s\n",
           same ? "yes" : "NO", S, steps ? "yes" : "NO");
    CHECK(same);
    CHECK(steps);
    for (int k = 0; k < 2; k++) free(l[k]), model_free(m[k]);
}

/* A prompt's chunk (DSPARK_GPU_ROWS) never changes a row's bits: a 700-token prompt in chunks
 * of 512 rows (the default), of 96, and of 256 with every pass over 32 rows in one matmul
 * launch (128-row tiles where they apply), then a 16-row verify and single steps. */
TEST(gpu_chunk_rows) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[3];
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m[0]) ==
            0);
    REQUIRE(load_with("DSPARK_GPU_ROWS", "96", &m[1]) == 0);
    char *gemm = env_swap("DSPARK_GPU_GEMM", "2");
    int rc = load_with("DSPARK_GPU_ROWS", "256", &m[2]);
    env_restore("DSPARK_GPU_GEMM", gemm);
    REQUIRE(rc == 0);
    enum { P = 700, W = 16, S = 4 };
    int V = model_config(m[0])->vocab_size;
    int32_t ids[P + W + S];
    for (int i = 0; i < P + W + S; i++) ids[i] = 20 + (i * 389) % 8000;
    float *l[3];
    size_t n = (size_t)V * (P + W + S);
    for (int k = 0; k < 3; k++)
        REQUIRE((l[k] = prompt_verify_steps(m[k], ids, P, W, S, P + W + S)));
    int same96 = !memcmp(l[0], l[1], sizeof(float) * n);
    int same256 = !memcmp(l[0], l[2], sizeof(float) * n);
    printf("  a %d-token prompt, a verify and steps in chunks of 512 rows equal chunks of 96: %s; "
           "of 256 in one launch a matmul: %s\n",
           P, same96 ? "yes" : "NO", same256 ? "yes" : "NO");
    CHECK(same96 && same256);
    for (int k = 0; k < 3; k++) free(l[k]), model_free(m[k]);
}

/* Whether two loads of a model give the same bits (checked, printed as what; both freed): a
 * 300-token prompt, a 16-row verify, single steps, and 16 sequences' steps in one pass
 * (attention items of one row). */
static void check_same_passes(struct model *m[2], const char *what) {
    enum { P = 300, W = 16, S = 4, NS = 16 };
    const int V = model_config(m[0])->vocab_size;
    static int32_t ids[NS][P + W + S];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < P + W + S; j++) ids[i][j] = 20 + (i * 389 + j * 197) % 8000;
    float *l[2], *lb[2];
    const size_t n = (size_t)V * (P + W + S), nb = (size_t)V * NS * S;
    for (int k = 0; k < 2; k++) {
        REQUIRE((l[k] = malloc(sizeof(float) * n)) && (lb[k] = malloc(sizeof(float) * nb)));
        struct kv_cache *kv[NS];
        for (int i = 0; i < NS; i++) REQUIRE(kv_new(m[k], 512, &kv[i]) == 0);
        CHECK(model_forward(m[k], kv[0], ids[0], P, l[k], 1) == 0);
        CHECK(model_forward(m[k], kv[0], ids[0] + P, W, l[k] + (size_t)P * V, 1) == 0);
        for (int i = 0; i < S; i++)
            CHECK(model_forward(m[k], kv[0], ids[0] + P + W + i, 1, l[k] + (size_t)(P + W + i) * V,
                                0) == 0);
        for (int i = 1; i < NS; i++)
            CHECK(model_forward(m[k], kv[i], ids[i], P - 10 * i, NULL, 0) == 0);
        kv_truncate(kv[0], P - 1);
        for (int s = 0; s < S; s++) {
            struct model_batch_item it[NS];
            int32_t g[NS];
            for (int i = 0; i < NS; i++)
                it[i] = (struct model_batch_item){kv[i], ids[i] + kv_len(kv[i]),
                                                  1,     lb[k] + ((size_t)s * NS + i) * V,
                                                  NULL,  g + i,
                                                  0,     NULL};
            CHECK(model_forward_batch(m[k], it, NS) == 0);
        }
        for (int i = 0; i < NS; i++) kv_free(kv[i]);
    }
    const int same_seq = !memcmp(l[0], l[1], sizeof(float) * n);
    const int same_batch = !memcmp(lb[0], lb[1], sizeof(float) * nb);
    printf("  %s (prompt, verify, steps): %s; 16 sequences' steps: %s\n", what,
           same_seq ? "yes" : "NO", same_batch ? "yes" : "NO");
    CHECK(same_seq && same_batch);
    for (int k = 0; k < 2; k++) free(l[k]), free(lb[k]), model_free(m[k]);
}

/* Attention's loads ahead (the first item's earlier positions before the wait on the q|k|v
 * matmul, DSPARK_GPU_ATT_PRE_KV; the next item's keys and queries during this one's softmax
 * and values, DSPARK_GPU_ATT_EARLY_KV) move only when rows are requested: the passes of
 * check_same_passes give the same bits with them off. */
TEST(gpu_attention_loads_ahead) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m[0]) ==
            0);
    setenv("DSPARK_GPU_ATT_EARLY_KV", "0", 1);
    int rc = load_with("DSPARK_GPU_ATT_PRE_KV", "0", &m[1]);
    unsetenv("DSPARK_GPU_ATT_EARLY_KV");
    REQUIRE(rc == 0);
    check_same_passes(m, "attention loads ahead equal to none");
}

/* Prompt tiles split between the two blocks of a cluster (k_mmg4s; here every tile that fits,
 * DSPARK_GPU_SPLIT=2, in one launch a matmul, DSPARK_GPU_GEMM=2) give the unsplit tiles' bits:
 * pycoder's q|k|v, o and gate/up hand rank 1 the last of three decode pieces, down the last
 * two of eight; the passes of check_same_passes, whose 300-token prompt has two 128-row
 * tiles a strip group. */
TEST(gpu_split_pairs) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    char *gemm = env_swap("DSPARK_GPU_GEMM", "2");
    int rc = load_with("DSPARK_GPU_SPLIT", "0", &m[0]);
    if (rc == 0) rc = load_with("DSPARK_GPU_SPLIT", "2", &m[1]);
    env_restore("DSPARK_GPU_GEMM", gemm);
    REQUIRE(rc == 0);
    const long before = gpu_split_tiles();
    check_same_passes(m, "prompt tiles split between block pairs equal unsplit tiles");
    const long split = gpu_split_tiles() - before;
    printf("  tiles run split: %ld\n", split);
    CHECK(split > 0);
}

/* pycoder loaded with DSPARK_GPU_ATT_FEW=0 (every decode step past the two-buffer kernel)
 * and var=value */
static int load_few0_with(const char *var, const char *value, struct model **m) {
    char *few = env_swap("DSPARK_GPU_ATT_FEW", "0");
    int rc = load_with(var, value, m);
    env_restore("DSPARK_GPU_ATT_FEW", few);
    return rc;
}

/* The merge of a row's span partials gives the same bits on both kernels: one block a (row,
 * head) (k_attn_merge, DSPARK_GPU_MERGE_DIMS=0) and, for launches of fewer (row, head) pairs
 * than SMs past the two-buffer kernel, a block a (row, head, 32 dims) staging its spans in
 * chunks, here of 3 spans so that the chunk loop runs (k_attn_merge_dims): a prompt, a
 * verify, steps and 16 sequences' steps, every step past the two-buffer kernel. */
TEST(gpu_attention_merge) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(load_few0_with("DSPARK_GPU_MERGE_DIMS", "0", &m[0]) == 0);
    REQUIRE(load_few0_with("DSPARK_GPU_MERGE_CH", "3", &m[1]) == 0);
    check_same_passes(m, "the merge by dims (chunks of 3 spans) equals the merge by heads");
}

/* The merge a warp a (row, head) (k_attn_merge_warp, the default for passes of 2 or more
 * rows; here every pass, DSPARK_GPU_MERGE_WARP=1) gives the bits of a block a (row, head)
 * (DSPARK_GPU_MERGE_WARP=0): the passes of check_same_passes, then a 700-token prompt whose
 * second chunk's rows reach 11 spans (two rounds of the warp's 8 span loads), a verify and
 * steps. pycoder's 64 dims use half of a warp's lanes. */
TEST(gpu_merge_warp) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(load_with("DSPARK_GPU_MERGE_WARP", "0", &m[0]) == 0);
    REQUIRE(load_with("DSPARK_GPU_MERGE_WARP", "1", &m[1]) == 0);
    check_same_passes(m, "the merge a warp a (row, head) equals a block a (row, head)");
    REQUIRE(load_with("DSPARK_GPU_MERGE_WARP", "0", &m[0]) == 0);
    REQUIRE(load_with("DSPARK_GPU_MERGE_WARP", "1", &m[1]) == 0);
    enum { P = 700, W = 16, S = 4 };
    const int V = model_config(m[0])->vocab_size;
    int32_t ids[P + W + S];
    for (int i = 0; i < P + W + S; i++) ids[i] = 20 + (i * 277) % 8000;
    float *l[2];
    for (int k = 0; k < 2; k++)
        REQUIRE((l[k] = prompt_verify_steps(m[k], ids, P, W, S, P + W + S)));
    const int same = !memcmp(l[0], l[1], sizeof(float) * V * (P + W + S));
    printf("  a %d-token prompt, a verify and steps: %s\n", P, same ? "yes" : "NO");
    CHECK(same);
    for (int k = 0; k < 2; k++) free(l[k]), model_free(m[k]);
}

/* The prompt kernel (k_attnp, items of up to 128 (row, head) pairs) gives k_attn's bits:
 * DSPARK_GPU_ATTP=1 with DSPARK_GPU_ATTP_POS=0 sends every pass to it, DSPARK_GPU_ATTP=0
 * none; the passes of check_same_passes, a
 * 700-token prompt in chunks of 96 rows (each chunk's rows also see the cached chunks before
 * it) with a verify and steps, and one pass holding a 100-token prompt beside 15 sequences'
 * single steps. pycoder's 3 query heads a kv head fill 3 of an item's 4 head slots. */
TEST(gpu_attention_prompt) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m[2];
    REQUIRE(load_with("DSPARK_GPU_ATTP", "0", &m[0]) == 0);
    char *pos = env_swap("DSPARK_GPU_ATTP_POS", "0");
    REQUIRE(load_with("DSPARK_GPU_ATTP", "1", &m[1]) == 0);
    check_same_passes(m, "the prompt kernel for every pass equals k_attn");
    char *rows = env_swap("DSPARK_GPU_ROWS", "96");
    REQUIRE(load_with("DSPARK_GPU_ATTP", "0", &m[0]) == 0);
    REQUIRE(load_with("DSPARK_GPU_ATTP", "64", &m[1]) == 0);
    env_restore("DSPARK_GPU_ROWS", rows);
    env_restore("DSPARK_GPU_ATTP_POS", pos);
    enum { P = 700, W = 16, S = 4, NS = 16, PB = 100 };
    const int V = model_config(m[0])->vocab_size;
    static int32_t ids[NS][P + W + S];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < P + W + S; j++) ids[i][j] = 7 + (i * 577 + j * 131) % 8000;
    float *l[2], *lb[2];
    const size_t n = (size_t)V * (P + W + S);
    for (int k = 0; k < 2; k++) {
        REQUIRE((l[k] = prompt_verify_steps(m[k], ids[0], P, W, S, P + W + S)));
        REQUIRE((lb[k] = malloc(sizeof(float) * V * (PB + NS - 1))));
        struct kv_cache *kv[NS];
        for (int i = 0; i < NS; i++) REQUIRE(kv_new(m[k], 512, &kv[i]) == 0);
        for (int i = 1; i < NS; i++)
            CHECK(model_forward(m[k], kv[i], ids[i], 200 + 7 * i, NULL, 0) == 0);
        struct model_batch_item it[NS];
        for (int i = 0; i < NS; i++)
            it[i] = (struct model_batch_item){kv[i], ids[i] + kv_len(kv[i]),
                                              i ? 1 : PB,
                                              lb[k] + (i ? (size_t)(PB + i - 1) * V : 0),
                                              NULL, NULL, 0, NULL};
        CHECK(model_forward_batch(m[k], it, NS) == 0);
        for (int i = 0; i < NS; i++) kv_free(kv[i]);
    }
    const int same = !memcmp(l[0], l[1], sizeof(float) * n);
    const int mixed = !memcmp(lb[0], lb[1], sizeof(float) * V * (PB + NS - 1));
    printf("  a %d-token prompt in chunks of 96 rows, a verify and steps: %s; a %d-token prompt "
           "beside %d single steps: %s\n",
           P, same ? "yes" : "NO", PB, NS - 1, mixed ? "yes" : "NO");
    CHECK(same && mixed);
    for (int k = 0; k < 2; k++) free(l[k]), free(lb[k]), model_free(m[k]);
}

/* K/V caches in bf16 (--gpu-kv bf16, DSPARK_GPU_KV=bf16). Each kernel reads the rounded rows
 * the same way, so a row's bits still never depend on the pass: the passes of
 * check_same_passes on k_attnp equal k_attn (k_attn1 takes the 16 sequences' steps), a
 * 700-token prompt in chunks of 96 rows equals chunks of 512, and a 16-row verify equals 16
 * single steps. The logits stay near the float caches' (the keys' and values' rounding), a
 * cache holds bf16 values (its export rounds to itself) and one imported from that export
 * continues with the same bits (the prefix cache's path). */
TEST(gpu_kv_bf16) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    char *kvenv = env_swap("DSPARK_GPU_KV", "bf16");
    struct model *m[2];
    REQUIRE(load_with("DSPARK_GPU_ATTP", "0", &m[0]) == 0);
    char *pos = env_swap("DSPARK_GPU_ATTP_POS", "0");
    REQUIRE(load_with("DSPARK_GPU_ATTP", "1", &m[1]) == 0);
    env_restore("DSPARK_GPU_ATTP_POS", pos);
    CHECK(model_kv_elem_bytes(m[0]) == 2);
    check_same_passes(m, "bf16 caches: the prompt kernel for every pass equals k_attn");
    struct model *b[2], *f;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &b[0]) ==
            0);
    REQUIRE(load_with("DSPARK_GPU_ROWS", "96", &b[1]) == 0);
    env_restore("DSPARK_GPU_KV", kvenv);
    REQUIRE(model_load("models/pycoder",
                       &(struct model_opts){.n_threads = 1, .gpu = 1, .gpu_kv = 4}, &f) == 0);
    CHECK(model_kv_elem_bytes(f) == 4);
    enum { P = 700, W = 16, S = 4 };
    const int V = model_config(f)->vocab_size;
    static int32_t ids[P + W + S];
    for (int i = 0; i < P + W + S; i++) ids[i] = 20 + (i * 389) % 8000;
    float *l[3];
    const size_t n = (size_t)V * (P + W + S);
    REQUIRE((l[0] = prompt_verify_steps(b[0], ids, P, W, S, P + W + S)));
    REQUIRE((l[1] = prompt_verify_steps(b[1], ids, P, W, S, P + W + S)));
    REQUIRE((l[2] = prompt_verify_steps(f, ids, P, W, S, P + W + S)));
    const int chunks = !memcmp(l[0], l[1], sizeof(float) * n);
    const double e = rel_err(l[0], l[2], n);
    int top_same = 0, finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(l[0][i]);
    for (int r = 0; r < P + W + S; r++)
        top_same += argmax(l[0] + (size_t)r * V, V) == argmax(l[2] + (size_t)r * V, V);
    printf("  bf16 caches: a %d-token prompt in chunks of 96 rows, a verify and steps equal "
           "chunks of 512: %s; against float caches: logits within %.2e of the largest, the "
           "same top token in %d of %d rows\n",
           P, chunks ? "yes" : "NO", e, top_same, P + W + S);
    CHECK(chunks && finite);
    CHECK(e <= 5e-2);
    CHECK(top_same >= (P + W + S) * 9 / 10);
    /* a verify of 16 rows equals 16 single steps; export, import, one more step */
    struct kv_cache *kv, *kv2;
    REQUIRE(kv_new(b[0], P + W + 2, &kv) == 0 && kv_new(b[0], P + W + 2, &kv2) == 0);
    float *steps = malloc(sizeof(float) * V * W), *out = malloc(sizeof(float) * V * W);
    REQUIRE(steps && out);
    CHECK(model_forward(b[0], kv, ids, P, NULL, 0) == 0);
    for (int i = 0; i < W; i++)
        CHECK(model_forward(b[0], kv, ids + P + i, 1, steps + (size_t)i * V, 0) == 0);
    CHECK(pass_equals_steps(b[0], kv, ids, P, W, steps, out));
    const size_t nf = kv_row_floats(kv) * (P + W);
    float *rows = malloc(sizeof(float) * nf);
    REQUIRE(rows && kv_export(kv, P + W, rows) == 0);
    int rounded = 1;
    for (size_t i = 0; i < nf; i++) rounded &= rows[i] == bf16_round(rows[i]);
    CHECK(kv_import(kv2, rows, P + W, P + W) == 0);
    CHECK(model_forward(b[0], kv, ids + P + W, 1, steps, 0) == 0);
    CHECK(model_forward(b[0], kv2, ids + P + W, 1, out, 0) == 0);
    const int cont = !memcmp(steps, out, sizeof(float) * V);
    printf("  bf16 caches: a 16-row verify equals 16 steps (checked), exported rows are bf16: "
           "%s, an imported copy continues with the same bits: %s\n",
           rounded ? "yes" : "NO", cont ? "yes" : "NO");
    CHECK(rounded && cont);
    /* a float cache takes no rows of a bf16 one, copied or shared */
    struct kv_cache *kvf, *ks = NULL;
    REQUIRE(kv_new(f, P + W + 2, &kvf) == 0);
    const int copy_rc = kv_copy_prefix(kvf, kv, P),
              share_rc = kv_new_shared(f, P + W + 2, kv, P, &ks);
    printf("  a float cache refuses a bf16 cache's rows: copied %s, shared %s\n",
           copy_rc == ERR_ARG ? "yes" : "NO", share_rc == ERR_ARG && !ks ? "yes" : "NO");
    CHECK(copy_rc == ERR_ARG && share_rc == ERR_ARG && !ks);
    kv_free(kvf);
    free(rows), free(steps), free(out), kv_free(kv), kv_free(kv2);
    for (int k = 0; k < 3; k++) free(l[k]);
    model_free(b[0]), model_free(b[1]), model_free(f);
}

/* Decode steps of many sequences (more attention items than SMs, each of one or two rows:
 * the one-buffer kernel's path for items of few rows) give the same bits as each sequence
 * alone (fewer items than SMs: the two-buffer kernel). */
TEST(gpu_attention_many_steps) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    enum { NS = 16, STEPS = 3 };
    const int V = model_config(m)->vocab_size;
    int32_t ids[NS][400];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < 400; j++) ids[i][j] = 20 + (i * 613 + j * 227) % 8000;
    float *l[2][NS];
    struct kv_cache *kv[2][NS];
    int pre[NS], w[NS];
    for (int i = 0; i < NS; i++) pre[i] = 250 + 5 * i, w[i] = 1 + (i % 3 == 1);
    for (int k = 0; k < 2; k++) /* batched, alone */
        for (int i = 0; i < NS; i++) {
            REQUIRE((l[k][i] = calloc((size_t)V * 2 * STEPS, sizeof(float))) != NULL);
            REQUIRE(kv_new(m, 400, &kv[k][i]) == 0);
            CHECK(model_forward(m, kv[k][i], ids[i], pre[i], NULL, 0) == 0);
        }
    int32_t g[NS * 2];
    for (int s = 0; s < STEPS; s++) {
        struct model_batch_item it[NS];
        for (int k = 1; k >= 0; k--) {
            for (int i = 0; i < NS; i++) {
                it[i] = (struct model_batch_item){kv[k][i], ids[i] + pre[i] + s * w[i],
                                                  w[i],     l[k][i] + (size_t)s * w[i] * V,
                                                  NULL,     g + 2 * i,
                                                  0,        NULL};
                if (k == 1) CHECK(model_forward_batch(m, &it[i], 1) == 0);
            }
            if (k == 0) CHECK(model_forward_batch(m, it, NS) == 0);
        }
    }
    int same = 0;
    for (int i = 0; i < NS; i++)
        same += !memcmp(l[0][i], l[1][i], sizeof(float) * V * w[i] * STEPS);
    printf("  %d sequences' decode steps in one pass (attention items of one or two rows): "
           "equal to each alone %d\n",
           NS, same);
    CHECK(same == NS);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NS; i++) free(l[k][i]), kv_free(kv[k][i]);
    model_free(m);
}

/* A model with 8 query heads per kv head (bench/mkmodel, random BF16; bench/run_gpu.sh's test
 * step writes it to /tmp/dspark-g8, or DSPARK_TEST_G8 names a folder): the attention path
 * for items of one or two rows takes its heads four at a time, twice per key here, and must
 * give the same bits as the warp-per-row path of wider passes, and the CPU's values. */
TEST(gpu_many_heads_per_kv) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    const char *dir = getenv("DSPARK_TEST_G8") ? getenv("DSPARK_TEST_G8") : "/tmp/dspark-g8";
    if (!fs_exists(dir))
        SKIP("no model with 8 query heads per kv head: bench/mkmodel /tmp/dspark-g8 --layers 2 "
             "--hidden 256 --heads 16 --kv-heads 2 --head-dim 64 --ffn 512 --vocab 1024");
    struct model *m, *cpu;
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 2}, &cpu) == 0);
    const struct hf_config *c = model_config(m);
    REQUIRE(c->n_heads / c->n_kv_heads >= 8);
    enum { P = 150, W = 20 };
    const int V = c->vocab_size;
    int32_t ids[P + W];
    for (int i = 0; i < P + W; i++) ids[i] = 3 + (i * 37) % (V - 3);
    float *one = malloc(sizeof(float) * V * W), *wide = malloc(sizeof(float) * V * W),
          *ref = malloc(sizeof(float) * V * W);
    REQUIRE(one && wide && ref);
    struct kv_cache *a, *b, *k;
    REQUIRE(kv_new(m, 256, &a) == 0 && kv_new(m, 256, &b) == 0 && kv_new(cpu, 256, &k) == 0);
    CHECK(model_forward(m, a, ids, P, NULL, 0) == 0);
    CHECK(model_forward(cpu, k, ids, P, NULL, 0) == 0);
    for (int i = 0; i < W; i++) {
        CHECK(model_forward(m, a, ids + P + i, 1, one + (size_t)i * V, 0) == 0);
        CHECK(model_forward(cpu, k, ids + P + i, 1, ref + (size_t)i * V, 0) == 0);
    }
    static const int widths[] = {2, 3, 8, 16, W};
    int same = 0;
    for (int j = 0; j < 5; j++) same += pass_equals_steps(m, b, ids, P, widths[j], one, wide);
    double e = rel_err(one, ref, (size_t)V * W);
    printf("  %d query heads per kv head: passes of 2, 3, 8, 16, %d rows equal single steps %d of "
           "5; steps within %.1e of the CPU\n",
           c->n_heads / c->n_kv_heads, W, same, e);
    CHECK(same == 5 && e < cpu_tol());
    free(one), free(wide), free(ref);
    kv_free(a), kv_free(b), kv_free(k);
    model_free(m), model_free(cpu);
}

/* ---- DSpark and DFlash drafters on the GPU ---- */

#define GOLD "../shared/golden/"

/* A drafter beside a GPU target against ../shared/golden: round 0's block hidden rows and
 * logits from the reference's fused taps, and the whole greedy speculative trace through the
 * engine (tokens, and drafts and accepted counts round by round). */
static void block_golden(const char *name, enum gen_mode mode) {
    char dir[256], js[256], sf[256];
    snprintf(dir, sizeof dir, GOLD "%s", name);
    snprintf(js, sizeof js, GOLD "%s_golden.json", name);
    snprintf(sf, sizeof sf, GOLD "%s_golden.safetensors", name);
    struct model *t;
    struct block_model *bm;
    REQUIRE(model_load(GOLD "target", &(struct model_opts){.n_threads = 1, .gpu = 1}, &t) == 0);
    REQUIRE(block_model_load(dir, t, &bm) == 0);
    CHECK(block_logits_in_forward(bm));
    char *text;
    size_t len;
    REQUIRE(fs_read_file(js, &text, &len, 1 << 24) == 0);
    cJSON *gj = cJSON_Parse(text);
    free(text);
    REQUIRE(fs_read_file(GOLD "target_golden.json", &text, &len, 1 << 24) == 0);
    cJSON *tj = cJSON_Parse(text);
    free(text);
    struct st_set *gst;
    REQUIRE(gj && tj && st_open_file(sf, &gst) == 0);
    const struct hf_config *c = block_model_config(bm);
    int H = c->hidden_size, V = c->vocab_size, B = c->block_size, nt = c->n_target_layer_ids;
    int32_t prompt[64], block[16];
    int L = ids_of(cJSON_GetObjectItem(tj, "prompt_ids"), prompt, 64);
    int nb = ids_of(cJSON_GetObjectItem(cJSON_GetObjectItem(gj, "round0"), "block_input_ids"),
                    block, 16);
    REQUIRE(nb == B);
    const float *fused = tensor_of(gst, "fused_input", (size_t)L * nt * H);
    const float *gh = tensor_of(gst, "round0.block_hidden", (size_t)B * H);
    const float *gl = tensor_of(
        gst, mode == GEN_DSPARK ? "round0.base_logits" : "round0.block_logits", (size_t)B * V);
    REQUIRE(fused && gh && gl);
    struct block_state *st;
    REQUIRE(block_state_new(bm, 256, &st) == 0);
    CHECK(block_ctx_append(st, fused, L, NULL) == 0);
    float *hid = malloc(sizeof(float) * B * H), *lg = malloc(sizeof(float) * B * V);
    const int32_t *ids = block;
    CHECK(block_forward_batch(&st, &ids, 1, B, &hid, &lg) == 0);
    double eh = rel_err(hid, gh, (size_t)B * H), el = rel_err(lg, gl, (size_t)B * V);
    /* the trace */
    const cJSON *tr = cJSON_GetObjectItem(gj, "trace");
    int32_t want[128];
    int n_want = ids_of(cJSON_GetObjectItem(tr, "new_ids"), want, 128);
    struct gen_engine e = {.target = t, .block = bm};
    struct gen_params gp = {.max_tokens = n_want,
                            .ignore_eos = 1,
                            .top_logprobs = -1,
                            .mode = mode,
                            .trace = 1,
                            .confidence_per_slot = 1};
    struct gen_result r;
    REQUIRE(gen_run(&e, prompt, L, &gp, NULL, NULL, &r) == 0);
    int same_ids = r.n_ids == n_want && !memcmp(r.ids, want, sizeof(int32_t) * (size_t)n_want);
    int compared, same = golden_rounds(cJSON_GetObjectItem(tr, "rounds"), &r, &compared);
    printf("  %s on the GPU: block hidden rel err %.2e, logits %.2e; trace %d tokens %s, %d of %d "
           "rounds identical\n",
           name, eh, el, n_want, same_ids ? "equal" : "DIFFER", same, compared);
    /* one-term inputs move the drafter's and target's results beyond the reference's float32
     * rounding, so its trace is compared only where products are exact (gpu_exact_modes
     * holds every mode to the plain decode on the GPU in every build) */
    CHECK(eh <= cpu_tol() && el <= cpu_tol() &&
          (gpu_input_terms() == 1 ||
           (same_ids && same == compared && compared >= r.stats.rounds - 1)));
    gen_result_free(&r);
    free(hid), free(lg);
    block_state_free(st);
    st_close(gst);
    cJSON_Delete(gj), cJSON_Delete(tj);
    block_model_free(bm);
    model_free(t);
}

TEST(gpu_block_golden) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists(GOLD "dspark")) SKIP("../shared/golden is absent");
    block_golden("dspark", GEN_DSPARK);
    block_golden("dflash", GEN_DFLASH);
}

/* models/pycoder's BF16 drafters on the GPU: hidden rows and logits within fp32 tolerance of
 * the CPU drafter's from the same taps, three blocks in one pass equal each alone (bits), and
 * a context saved and loaded again gives the same bits. */
static void block_pycoder(const char *dir) {
    struct model *mc, *mg;
    struct block_model *bc, *bg;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1}, &mc) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &mg) == 0);
    REQUIRE(block_model_load(dir, mc, &bc) == 0);
    setenv("DSPARK_GPU_MARKOV", "1", 1); /* this small Markov head would stay on the CPU */
    REQUIRE(block_model_load(dir, mg, &bg) == 0);
    unsetenv("DSPARK_GPU_MARKOV");
    const struct hf_config *c = block_model_config(bg);
    int H = c->hidden_size, V = c->vocab_size, B = c->block_size, nt = c->n_target_layer_ids;
    enum { L = 50, NS = 3 };
    int32_t prompt[L], block[NS][16];
    for (int i = 0; i < L; i++) prompt[i] = 20 + (i * 151) % 8000;
    REQUIRE(model_set_taps(mc, c->target_layer_ids, nt) == 0);
    struct kv_cache *kv;
    REQUIRE(kv_new(mc, 128, &kv) == 0);
    float *fused = malloc(sizeof(float) * L * nt * H);
    REQUIRE(fused && model_forward_taps(mc, kv, prompt, L, NULL, 0, fused) == 0);
    static const int lens[NS] = {L, L - 7, L - 20};
    struct block_state *sa[NS], *sb[NS], *scpu, *sl;
    float *ha[NS], *la[NS], *hb[NS], *lb[NS];
    const int32_t *ids[NS];
    for (int i = 0; i < NS; i++) {
        REQUIRE(block_state_new(bg, 128, &sa[i]) == 0 && block_state_new(bg, 128, &sb[i]) == 0);
        CHECK(block_ctx_append(sa[i], fused, lens[i], NULL) == 0);
        CHECK(block_ctx_append(sb[i], fused, lens[i], NULL) == 0);
        block[i][0] = prompt[lens[i] - 1];
        for (int j = 1; j < B; j++) block[i][j] = c->mask_token_id;
        ids[i] = block[i];
        ha[i] = malloc(sizeof(float) * B * H), hb[i] = malloc(sizeof(float) * B * H);
        la[i] = malloc(sizeof(float) * B * V), lb[i] = malloc(sizeof(float) * B * V);
        CHECK(block_forward_batch(&sa[i], &ids[i], 1, B, &ha[i], &la[i]) == 0);
    }
    CHECK(block_forward_batch(sb, ids, NS, B, hb, lb) == 0);
    int batched = 0;
    for (int i = 0; i < NS; i++)
        batched += !memcmp(ha[i], hb[i], sizeof(float) * B * H) &&
                   !memcmp(la[i], lb[i], sizeof(float) * B * V);
    /* the CPU drafter from the same taps */
    float *hc = malloc(sizeof(float) * B * H), *lc = malloc(sizeof(float) * B * V);
    REQUIRE(block_state_new(bc, 128, &scpu) == 0);
    CHECK(block_ctx_append(scpu, fused, L, NULL) == 0);
    CHECK(block_forward(scpu, block[0], B, hc, NULL) == 0);
    block_logits(scpu, hc, B, lc);
    double eh = rel_err(ha[0], hc, (size_t)B * H), el = rel_err(la[0], lc, (size_t)B * V);
    int same_argmax = 0;
    for (int j = 0; j < B; j++)
        same_argmax += argmax(la[0] + (size_t)j * V, V) == argmax(lc + (size_t)j * V, V);
    /* the context out and back in */
    float *rows = malloc(sizeof(float) * L * block_ctx_width(bg));
    CHECK(block_ctx_save(sa[0], rows, L) == L);
    REQUIRE(block_state_new(bg, 128, &sl) == 0);
    CHECK(block_ctx_load(sl, rows, L) == 0);
    float *hl = malloc(sizeof(float) * B * H), *ll = malloc(sizeof(float) * B * V);
    CHECK(block_forward_batch(&sl, &ids[0], 1, B, &hl, &ll) == 0);
    int reload =
        !memcmp(hl, ha[0], sizeof(float) * B * H) && !memcmp(ll, la[0], sizeof(float) * B * V);
    /* the hidden rows alone (no logits asked for) are the same rows */
    memset(hl, 0, sizeof(float) * B * H);
    CHECK(block_forward(sl, block[0], B, hl, NULL) == 0);
    reload = reload && !memcmp(hl, ha[0], sizeof(float) * B * H);
    /* DSpark's Markov bias, on the device beside a GPU target (forced for this small head) */
    double eb = 0;
    if (block_has_markov(bg)) {
        float *bgpu[3], *bcpu = malloc(sizeof(float) * V);
        int32_t prev[3] = {block[0][0], 7, 4321};
        for (int i = 0; i < 3; i++) bgpu[i] = malloc(sizeof(float) * V);
        block_markov_bias_batch(bg, prev, 3, bgpu);
        for (int i = 0; i < 3; i++) {
            block_markov_bias(scpu, prev[i], bcpu);
            double e = rel_err(bgpu[i], bcpu, (size_t)V);
            eb = e > eb ? e : eb;
            free(bgpu[i]);
        }
        free(bcpu);
    }
    printf("  %s on the GPU: hidden rel err %.2e and logits %.2e against the CPU drafter, argmax "
           "equal on %d of %d rows; %d of %d blocks batched equal alone; saved context: %s; "
           "Markov bias rel err %.2e\n",
           dir, eh, el, same_argmax, B, batched, NS, reload ? "same bits" : "DIFFERS", eb);
    CHECK(eh <= cpu_tol() && el <= cpu_tol() && batched == NS && reload && eb <= 1e-5);
    for (int i = 0; i < NS; i++) {
        block_state_free(sa[i]), block_state_free(sb[i]);
        free(ha[i]), free(hb[i]), free(la[i]), free(lb[i]);
    }
    block_state_free(scpu), block_state_free(sl);
    free(hc), free(lc), free(rows), free(hl), free(ll), free(fused);
    kv_free(kv);
    block_model_free(bc), block_model_free(bg);
    model_free(mc), model_free(mg);
}

TEST(gpu_block_pycoder) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder-dspark")) SKIP("models/ absent");
    block_pycoder("models/pycoder-dspark");
    block_pycoder("models/pycoder-dflash");
}

/* Every speculative mode keeps the GPU baseline's greedy tokens on models/pycoder, and the
 * GPU baseline equals the CPU's. */
TEST(gpu_exact_modes) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *dm, *cpu;
    struct block_model *ds, *df;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder-draft", &(struct model_opts){.n_threads = 2}, &dm) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &cpu) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", m, &ds) == 0);
    REQUIRE(block_model_load("models/pycoder-dflash", m, &df) == 0);
    int runs = 0, equal = 0, cpu_equal = 0;
    for (int p = 0; p < 20; p++) {
        int n = 8 + p % 17;
        int32_t prompt[64];
        for (int i = 0; i < n; i++) prompt[i] = 20 + (p * 977 + i * 131) % 8000;
        struct gen_engine e = {.target = m, .draft = dm}, ec = {.target = cpu};
        struct gen_params base = {.max_tokens = 48, .ignore_eos = 1, .top_logprobs = -1};
        struct gen_result ref, rc;
        REQUIRE(gen_run(&e, prompt, n, &base, NULL, NULL, &ref) == 0);
        REQUIRE(gen_run(&ec, prompt, n, &base, NULL, NULL, &rc) == 0);
        cpu_equal += rc.n_ids == ref.n_ids && !memcmp(rc.ids, ref.ids, sizeof(int32_t) * 48);
        for (int mode = GEN_LOOKUP; mode <= GEN_DFLASH; mode++) {
            struct gen_params gp = base;
            gp.mode = (enum gen_mode)mode;
            gp.max_draft = mode == GEN_DFLASH ? 0 : 4;
            struct gen_engine eb = {
                .target = m, .draft = dm, .block = mode == GEN_DFLASH ? df : ds};
            struct gen_result r;
            REQUIRE(gen_run(&eb, prompt, n, &gp, NULL, NULL, &r) == 0);
            runs++;
            equal += r.n_ids == ref.n_ids && !memcmp(r.ids, ref.ids, sizeof(int32_t) * 48);
            gen_result_free(&r);
        }
        gen_result_free(&ref), gen_result_free(&rc);
    }
    printf("  speculative modes on the GPU: %d of %d equal to GPU baseline; GPU baseline equals "
           "CPU on %d of 20 prompts\n",
           equal, runs, cpu_equal);
    CHECK(equal == runs);
    block_model_free(ds), block_model_free(df);
    model_free(m), model_free(dm), model_free(cpu);
}

/* Sampling summaries (sample.cu) against the CPU's reference: for rows of real logits and
 * many sampling settings, the device's max, total, draft logit and candidates equal
 * sample_row_summarize() on the same row, bit for bit, and the distribution built from them
 * equals the one built from the row. */
TEST(gpu_sample_summary) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    const int V = model_config(m)->vocab_size, W = 9;
    const struct {
        float t, p;
        int k;
    } set[] = {{0.7f, 0.9f, 0},     {1.0f, 1.0f, 0},  {0.8f, 1.0f, 40},    {1.3f, 0.8f, 5},
               {0.3f, 0.5f, 0},     {2.0f, 0.99f, 0}, {1.0f, 0.95f, 1000}, {0.6f, 1.0f, 1},
               {1.0f, 1.0f, V - 1}, {0.05f, 0.9f, 0}};
    const int NS = (int)(sizeof set / sizeof *set);
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = 20 + (i * 977) % 8000;
    float *lg = malloc(sizeof(float) * V * W), *row = malloc(sizeof(float) * V);
    void *mem = malloc(sample_dist_bytes(V)), *mem2 = malloc(sample_dist_bytes(V));
    struct gpu_row_summary rows[W];
    int32_t *cid = malloc(sizeof(int32_t) * W * GPU_SAMPLE_CAP),
            *rid = malloc(sizeof(int32_t) * GPU_SAMPLE_CAP);
    float *clg = malloc(sizeof(float) * W * GPU_SAMPLE_CAP),
          *rlg = malloc(sizeof(float) * GPU_SAMPLE_CAP);
    REQUIRE(lg && row && mem && mem2 && cid && rid && clg && rlg);
    for (int r = 0; r < W; r++)
        rows[r].ids = cid + r * GPU_SAMPLE_CAP, rows[r].logits = clg + r * GPU_SAMPLE_CAP;
    struct sample_dist d, d2;
    sample_dist_init(&d, mem, V);
    sample_dist_init(&d2, mem2, V);
    int compared = 0, same = 0, built = 0, dist_same = 0, cands = 0, expected = 0;
    for (int c = 0; c < NS; c++) {
        struct kv_cache *kv;
        REQUIRE(kv_new(m, 400, &kv) == 0);
        int P = 40 + 23 * c;
        CHECK(model_forward(m, kv, ids, P, NULL, 0) == 0);
        struct gpu_sample_req req = {
            .temperature = set[c].t, .top_k = set[c].k, .top_p = set[c].p, .rows = rows};
        struct model_batch_item it = {kv, ids + P, W, lg, NULL, NULL, 0, &req};
        CHECK(model_forward_batch(m, &it, 1) == 0);
        /* a top-k past the summaries' capacity brings the logits back */
        CHECK(req.filled == (set[c].k <= GPU_SAMPLE_CAP));
        expected += req.filled ? W : 0;
        for (int r = 0; r < W && req.filled; r++) {
            CHECK(model_logits_row(m, &req, r, row) == 0);
            struct sample_row_summary ref = {0, 0, 0, rid, rlg};
            sample_row_summarize(row, V, set[c].t, set[c].k, set[c].p, GPU_SAMPLE_CAP, &ref);
            const struct gpu_row_summary *g = &rows[r];
            float want_t = r + 1 < W ? row[ids[P + r + 1]] : 0.0f;
            int ok = !memcmp(&g->max, &ref.max, sizeof(float)) &&
                     !memcmp(&g->total, &ref.total, sizeof(double)) && g->n == ref.n &&
                     !memcmp(&g->logit_t, &want_t, sizeof(float));
            for (int j = 0; ok && j < g->n; j++)
                ok = g->ids[j] == ref.ids[j] && !memcmp(&g->logits[j], &ref.logits[j], 4);
            compared++, same += ok, cands += g->n > 0;
            if (!ok && compared - same <= 3)
                printf("  row %d of setting %d: max %g/%g total %.17g/%.17g n %d/%d\n", r, c,
                       g->max, ref.max, g->total, ref.total, g->n, ref.n);
            struct sample_row_summary gs = {g->max, g->total, g->n, g->ids, g->logits};
            if (sample_dist_build_sparse(&d, &gs, set[c].t, set[c].k, set[c].p) == OK) {
                built++;
                CHECK(sample_dist_build(&d2, row, set[c].t, set[c].k, set[c].p) == OK);
                dist_same += d.n == d2.n && d.sorted == d2.sorted && d.mass == d2.mass &&
                             !memcmp(d.ids, d2.ids, sizeof(int32_t) * d.n) &&
                             !memcmp(d.probs, d2.probs, sizeof(float) * d.n);
            }
        }
        kv_free(kv);
    }
    printf("  sampling summaries: %d of %d rows equal the CPU's (%d with candidates); %d of %d "
           "distributions built from them equal the row's\n",
           same, compared, cands, dist_same, built);
    CHECK(compared == expected && expected == (NS - 1) * W && same == compared && cands >= 5 * W &&
          dist_same == built && built >= 5 * W);
    free(lg), free(row), free(mem), free(mem2), free(cid), free(rid), free(clg), free(rlg);
    model_free(m);
}

/* Rows drawn on the device (untruncated sampling: sample.cu's draw_row) pick the token that
 * sample_dist_draw_u() picks from the same row at the same u: passes of 1, 3 and 9 rows, four
 * temperatures, u at 0, just below 1, random, and just either side of a chunk's running
 * total. On models/pycoder (8,192 tokens) and on a 300,000-token model when there is one
 * (bench/run_gpu.sh's test step writes /tmp/dspark-v300k; DSPARK_TEST_V300K names another),
 * whose chunk totals need more than the default 48 KB of shared memory. */
TEST(gpu_sample_draw) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    const char *big =
        getenv("DSPARK_TEST_V300K") ? getenv("DSPARK_TEST_V300K") : "/tmp/dspark-v300k";
    const char *dirs[2] = {"models/pycoder", big};
    int compared = 0, same = 0, dirs_run = 0;
    for (int di = 0; di < 2; di++) {
        if (!fs_exists(dirs[di])) {
            printf("  %s absent%s\n", dirs[di],
                   di ? ": bench/mkmodel /tmp/dspark-v300k --layers 1 --hidden 64 --heads 2 "
                        "--kv-heads 1 --head-dim 32 --ffn 128 --vocab 300000 makes it"
                      : "");
            continue;
        }
        struct model *m;
        REQUIRE(model_load(dirs[di], &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
        dirs_run++;
        const int V = model_config(m)->vocab_size, W = 9;
        static const float temps[] = {1.0f, 0.7f, 1.6f, 0.05f};
        static const int widths[] = {1, 3, 9};
        int32_t ids[200];
        for (int i = 0; i < 200; i++) ids[i] = 20 + (i * 977) % (V < 8000 ? V - 20 : 8000);
        float *lg = malloc(sizeof(float) * V * W), *row = malloc(sizeof(float) * V);
        void *mem = malloc(sample_dist_bytes(V));
        struct gpu_row_summary rows[W];
        REQUIRE(lg && row && mem);
        for (int r = 0; r < W; r++) rows[r].ids = NULL, rows[r].logits = NULL;
        struct sample_dist d;
        sample_dist_init(&d, mem, V);
        struct rng rg;
        rng_seed(&rg, 11);
        for (int ti = 0; ti < 4; ti++)
            for (int wi = 0; wi < 3; wi++)
                for (int ui = 0; ui < 6; ui++) {
                    const int w = widths[wi], P = 30 + 7 * ti + wi;
                    struct kv_cache *kv;
                    REQUIRE(kv_new(m, 64, &kv) == 0);
                    CHECK(model_forward(m, kv, ids, P, NULL, 0) == 0);
                    /* the row, to place u at one of its chunk totals (a first pass) */
                    struct gpu_sample_req req = {
                        .temperature = temps[ti], .top_p = 1.0f, .rows = rows, .draw = 1};
                    struct model_batch_item it = {kv, ids + P, w, lg, NULL, NULL, 0, &req};
                    CHECK(model_forward_batch(m, &it, 1) == 0);
                    CHECK(req.filled && model_logits_row(m, &req, w - 1, row) == 0);
                    CHECK(sample_dist_build(&d, row, temps[ti], 0, 1.0f) == 0);
                    double u = rng_double(&rg);
                    if (ui == 0) u = 0;
                    if (ui == 1) u = 1 - 0x1p-53;
                    if (ui >= 4) { /* the running total of the chunks before a random one */
                        int c = (int)rng_below(&rg, (uint32_t)(V / SAMPLE_DRAW_CHUNK));
                        double cum = 0;
                        for (int i = 0; i < c * SAMPLE_DRAW_CHUNK; i++) cum += d.probs[i];
                        u = cum / d.mass;
                        u = ui == 4 ? nextafter(u, 0) : nextafter(u, 1);
                    }
                    kv_truncate(kv, P);
                    req.u = u;
                    CHECK(model_forward_batch(m, &it, 1) == 0);
                    int32_t want = sample_dist_draw_u(&d, u), got = rows[w - 1].drawn;
                    int ok = req.filled && got == want && !rows[w - 1].in_logits;
                    for (int r = 0; r < w - 1; r++) ok &= rows[r].drawn == -1;
                    compared++, same += ok;
                    if (!ok && compared - same <= 3)
                        printf("  %s T %g width %d u %.17g: drew %d, the CPU %d\n", dirs[di],
                               temps[ti], w, u, got, want);
                    kv_free(kv);
                }
        free(lg), free(row), free(mem);
        model_free(m);
    }
    printf("  draws on the device: %d of %d equal the CPU's at the same u (%d models)\n", same,
           compared, dirs_run);
    CHECK(dirs_run >= 1 && same == compared && compared == dirs_run * 72);
}

/* Presence and frequency penalties applied on the device (sample.cu, from the lists that
 * verify_item() makes): each row of a verify pass holds, bit for bit, the row brought back
 * raw and penalised by penalty_apply() with the drafts before it as extras, for several
 * histories, draft repeats and penalty settings. */
TEST(gpu_sample_penalties) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m) == 0);
    const int V = model_config(m)->vocab_size, W = 9;
    static const float pen[][2] = {{0.5f, 0.3f}, {0, 0.7f}, {1.2f, 0}, {-0.4f, 0.25f}};
    float *lg = malloc(sizeof(float) * V * W), *raw = malloc(sizeof(float) * V * W),
          *row = malloc(sizeof(float) * V);
    REQUIRE(lg && raw && row);
    int compared = 0, same = 0, changed = 0;
    for (int c = 0; c < 4; c++)
        for (int trial = 0; trial < 4; trial++) {
            struct sample_params sp = {0.9f, 0.95f, 0, pen[c][0], pen[c][1], 9};
            struct sampler *s = sampler_new(&sp, V);
            struct kv_cache *kv;
            REQUIRE(s && kv_new(m, 200, &kv) == 0);
            int32_t ids[120];
            for (int i = 0; i < 120; i++) ids[i] = 20 + (i * 977 + c * 31) % 8000;
            int P = 60 + 10 * trial;
            CHECK(model_forward(m, kv, ids, P, NULL, 0) == 0);
            /* the completion so far: the prompt's last tokens, some repeated */
            for (int h = 0; h < 10 + 20 * trial; h++)
                REQUIRE(sampler_accept(s, ids[P - 1 - h % (5 + trial)]) == 0);
            int32_t in[16];
            for (int i = 0; i < W; i++) /* drafts: seen ids, repeats among them, and new ones */
                in[i] = i % 3 == 0 ? ids[P - 1 - i % 4] : i % 3 == 1 ? in[i / 2] : ids[P + i];
            struct verify v;
            setenv("DSPARK_GPU_SAMPLE_SUMMARY", "0", 1);
            REQUIRE(verify_init(&v, m, kv, s, W - 1, -1, 0) == 0);
            unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
            struct model_batch_item it = verify_item(&v, in, W);
            CHECK(it.sample == NULL && model_forward_batch(m, &it, 1) == 0);
            memcpy(raw, v.logits, sizeof(float) * V * W);
            verify_deinit(&v);
            kv_truncate(kv, P);
            REQUIRE(verify_init(&v, m, kv, s, W - 1, -1, 0) == 0);
            it = verify_item(&v, in, W);
            CHECK(it.sample && it.sample->penalised && model_forward_batch(m, &it, 1) == 0);
            CHECK(v.req->filled);
            for (int r = 0; r < W && v.req->filled; r++) {
                CHECK(model_logits_row(m, v.req, r, row) == 0);
                float *want = raw + (size_t)r * V;
                float was = want[in[1]];
                penalty_apply(sampler_counts(s), pen[c][0], pen[c][1], want, V, in + 1, r);
                changed += want[in[1]] != was;
                compared++, same += !memcmp(row, want, sizeof(float) * V);
            }
            verify_deinit(&v);
            kv_free(kv);
            sampler_free(s);
        }
    printf("  penalties on the device: %d of %d rows equal penalty_apply() on the raw row (%d "
           "with a draft's logit changed)\n",
           same, compared, changed);
    CHECK(compared == 16 * W && same == compared && changed >= 8 * W);
    free(lg), free(raw), free(row);
    model_free(m);
}

/* Sampled generation with the summaries equals sampled generation with the logits copied back,
 * token for token, in every mode and for several sampling settings (the same seeds): the
 * decisions from a summary are those the row gives. */
TEST(gpu_sample_summary_modes) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *dm;
    struct block_model *ds, *df;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder-draft", &(struct model_opts){.n_threads = 2}, &dm) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", m, &ds) == 0);
    REQUIRE(block_model_load("models/pycoder-dflash", m, &df) == 0);
    static const struct sample_params sps[] = {
        {0.7f, 0.9f, 0, 0, 0, 1},    {1.0f, 1.0f, 0, 0, 0, 2},         {0.8f, 0.95f, 40, 0, 0, 3},
        {0.5f, 1.0f, 0, 0.4f, 0, 4}, {0.8f, 0.95f, 40, 0.3f, 0.5f, 5}, {0, 1.0f, 0, 0.4f, 0.2f, 6}};
    int runs = 0, equal = 0, accepted = 0, summarised = 0, rounds = 0, fetched = 0, base_drawn = 0;
    for (int p = 0; p < 6; p++) {
        int n = 10 + p * 3;
        int32_t prompt[64];
        for (int i = 0; i < n; i++) prompt[i] = 20 + (p * 977 + (i % 5) * 131) % 8000;
        for (size_t s = 0; s < sizeof sps / sizeof *sps; s++)
            for (int mode = GEN_BASELINE; mode <= GEN_DFLASH; mode++) {
                struct gen_params gp = {.max_tokens = 40,
                                        .ignore_eos = 1,
                                        .top_logprobs = -1,
                                        .sp = sps[s],
                                        .mode = (enum gen_mode)mode,
                                        .max_draft = mode == GEN_DFLASH ? 0 : 4};
                struct gen_engine e = {
                    .target = m, .draft = dm, .block = mode == GEN_DFLASH ? df : ds};
                struct gen_result a, b;
                setenv("DSPARK_GPU_SAMPLE_SUMMARY", "0", 1);
                REQUIRE(gen_run(&e, prompt, n, &gp, NULL, NULL, &a) == 0);
                unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
                REQUIRE(gen_run(&e, prompt, n, &gp, NULL, NULL, &b) == 0);
                runs++;
                equal += a.n_ids == b.n_ids && !memcmp(a.ids, b.ids, sizeof(int32_t) * a.n_ids);
                accepted += b.stats.accepted;
                if (mode != GEN_BASELINE)
                    rounds += b.stats.rounds, summarised += b.stats.summary_rounds,
                        fetched += b.stats.rows_fetched;
                /* baseline's rounds are lone rows: they bring back their logits, unless the
                 * device draws them (no truncation) */
                int drawn = sps[s].top_p >= 1 && sps[s].top_k <= 0;
                CHECK(a.stats.summary_rounds == 0 &&
                      (mode != GEN_BASELINE ||
                       (drawn ? b.stats.summary_rounds == b.stats.rounds && !b.stats.rows_fetched
                              : b.stats.summary_rounds == 0)));
                base_drawn += mode == GEN_BASELINE && drawn ? b.stats.summary_rounds : 0;
                gen_result_free(&a), gen_result_free(&b);
            }
    }
    printf("  sampled generation, summaries against logits: %d of %d runs equal (%d drafts "
           "accepted); %d of %d speculative rounds decided from summaries, "
           "%d rows fetched for a draw; %d baseline steps drawn on the device\n",
           equal, runs, accepted, summarised, rounds, fetched, base_drawn);
    CHECK(equal == runs && accepted > 0 && summarised * 2 >= rounds && fetched > 0 &&
          base_drawn >= 6 * 30);
    block_model_free(ds), block_model_free(df);
    model_free(m), model_free(dm);
}

/* Continuous batching on the GPU: sequences of different lengths and positions in one
 * model_forward_batch() give, row for row, the bits each gives alone (logits, device greedy
 * ids and hidden-state taps), including a pass of more than GPU_GROUP rows; the GPU's taps
 * match the CPU's. */
TEST(gpu_multi_sequence) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *cpu;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &cpu) == 0);
    const struct hf_config *c = model_config(m);
    int V = c->vocab_size, H = c->hidden_size, taps[3] = {0, c->n_layers / 2, c->n_layers - 1};
    REQUIRE(model_set_taps(m, taps, 3) == 0 && model_set_taps(cpu, taps, 3) == 0);
    enum { NS = 7 };
    static const int pre[NS] = {3, 70, 17, 130, 1, 64, 200}, w[NS] = {1, 5, 16, 2, 40, 1, 9};
    int32_t ids[NS][256];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < 256; j++) ids[i][j] = 20 + (i * 977 + j * 131) % 8000;
    struct kv_cache *a[NS], *b[NS];
    float *la[NS], *lb[NS], *ta[NS], *tb[NS];
    int32_t ga[NS][48], gb[NS][48];
    for (int i = 0; i < NS; i++) {
        REQUIRE(kv_new(m, 300, &a[i]) == 0 && kv_new(m, 300, &b[i]) == 0);
        la[i] = malloc(sizeof(float) * V * w[i]), lb[i] = malloc(sizeof(float) * V * w[i]);
        ta[i] = malloc(sizeof(float) * 3 * H * w[i]), tb[i] = malloc(sizeof(float) * 3 * H * w[i]);
        REQUIRE(la[i] && lb[i] && ta[i] && tb[i]);
        CHECK(model_forward(m, a[i], ids[i], pre[i], NULL, 0) == 0);
        CHECK(model_forward(m, b[i], ids[i], pre[i], NULL, 0) == 0);
        /* alone */
        struct model_batch_item it = {a[i], ids[i] + pre[i], w[i], la[i], ta[i], ga[i], 0, NULL};
        CHECK(model_forward_batch(m, &it, 1) == 0);
    }
    struct model_batch_item items[NS];
    for (int i = 0; i < NS; i++)
        items[i] =
            (struct model_batch_item){b[i], ids[i] + pre[i], w[i], lb[i], tb[i], gb[i], 0, NULL};
    CHECK(model_forward_batch(m, items, NS) == 0);
    int same = 0, same_ids = 0, same_taps = 0;
    double tap_err = 0;
    for (int i = 0; i < NS; i++) {
        same += !memcmp(la[i], lb[i], sizeof(float) * V * w[i]);
        same_ids += !memcmp(ga[i], gb[i], sizeof(int32_t) * w[i]);
        same_taps += !memcmp(ta[i], tb[i], sizeof(float) * 3 * H * w[i]);
        int ok = 1;
        for (int t = 0; t < w[i]; t++) ok &= ga[i][t] == argmax(la[i] + (size_t)t * V, V);
        same_ids -= !ok;
        /* the CPU's taps for the same rows */
        struct kv_cache *k;
        REQUIRE(kv_new(cpu, 300, &k) == 0);
        float *tc = malloc(sizeof(float) * 3 * H * (pre[i] + w[i]));
        REQUIRE(tc);
        CHECK(model_forward_taps(cpu, k, ids[i], pre[i] + w[i], NULL, 0, tc) == 0);
        double e = rel_err(ta[i], tc + (size_t)pre[i] * 3 * H, (size_t)3 * H * w[i]);
        if (e > tap_err) tap_err = e;
        free(tc);
        kv_free(k);
    }
    printf("  %d sequences batched: logits equal alone %d, greedy ids %d, taps %d; GPU taps "
           "within %.1e of the CPU's\n",
           NS, same, same_ids, same_taps, tap_err);
    CHECK(same == NS && same_ids == NS && same_taps == NS && tap_err < cpu_tol());
    for (int i = 0; i < NS; i++) {
        kv_free(a[i]), kv_free(b[i]);
        free(la[i]), free(lb[i]), free(ta[i]), free(tb[i]);
    }
    model_free(m), model_free(cpu);
}

/* The engine's batched steps on the GPU: sequences in mixed modes (baseline, lookup, dspark;
 * greedy, and sampled with a seed) stepped together give exactly their outputs alone. */
TEST(gpu_engine_batch) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder-dspark")) SKIP("models/ absent");
    struct model *m;
    struct block_model *ds;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", m, &ds) == 0);
    enum { NS = 8 };
    static const enum gen_mode modes[NS] = {GEN_BASELINE, GEN_LOOKUP, GEN_DSPARK, GEN_BASELINE,
                                            GEN_LOOKUP,   GEN_DSPARK, GEN_DSPARK, GEN_BASELINE};
    struct gen_engine e[NS];
    struct gen_params gp[NS];
    int32_t prompts[NS][64];
    int n[NS];
    struct gen_result alone[NS];
    for (int i = 0; i < NS; i++) {
        e[i] = (struct gen_engine){.target = m, .block = ds};
        gp[i] = (struct gen_params){
            .max_tokens = 40, .ignore_eos = 1, .top_logprobs = -1, .mode = modes[i]};
        if (i >= 3 && i != 6)
            gp[i].sp = (struct sample_params){.temperature = 0.8f, .seed = 7u + i};
        n[i] = 9 + 3 * i;
        for (int j = 0; j < n[i]; j++) prompts[i][j] = 20 + (i * 577 + (j % 11) * 131) % 8000;
        REQUIRE(gen_run(&e[i], prompts[i], n[i], &gp[i], NULL, NULL, &alone[i]) == 0);
    }
    /* the batch twice: with sampling summaries (the default), then with the logits back */
    int equal = 0, summarised = 0;
    for (int pass = 0; pass < 2; pass++) {
        struct gen_seq *seqs[NS];
        if (pass) setenv("DSPARK_GPU_SAMPLE_SUMMARY", "0", 1);
        for (int i = 0; i < NS; i++)
            REQUIRE(gen_seq_new(&e[i], prompts[i], n[i], &gp[i], NULL, NULL, &seqs[i]) == 0);
        unsetenv("DSPARK_GPU_SAMPLE_SUMMARY");
        REQUIRE(gen_run_batch(seqs, NS) == 0);
        for (int i = 0; i < NS; i++) {
            struct gen_result r;
            REQUIRE(gen_seq_finish(seqs[i], &r) == 0);
            int eq = r.n_ids == alone[i].n_ids &&
                     !memcmp(r.ids, alone[i].ids, sizeof(int32_t) * (size_t)r.n_ids);
            if (!eq)
                printf("  sequence %d (%s) differs from its run alone%s\n", i,
                       gen_mode_name(modes[i]), pass ? " (logits back)" : "");
            equal += eq;
            if (!pass) summarised += r.stats.summary_rounds;
            gen_result_free(&r);
        }
    }
    for (int i = 0; i < NS; i++) gen_result_free(&alone[i]);
    printf("  engine batch on the GPU: %d of %d sequences (mixed modes, greedy and sampled) equal "
           "alone, with sampling summaries (%d rounds) and with the logits back\n",
           equal, 2 * NS, summarised);
    CHECK(equal == 2 * NS && summarised > 0);
    block_model_free(ds);
    model_free(m);
}

static int same_ids(const struct gen_result *a, const struct gen_result *b) {
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n_ids);
}

/* The prefix cache over device caches: a follow-up turn served from RAM (a device-to-device
 * copy) and from the spill folder (exported to and imported from the host) prefills only its
 * suffix and answers as a cold run does, in baseline and dspark modes. */
TEST(gpu_prefix_cache) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder-dspark")) SKIP("models/ absent");
    struct model *m;
    struct block_model *ds;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(block_model_load("models/pycoder-dspark", m, &ds) == 0);
    char dir[] = "/tmp/dspark-gpu-spill-XXXXXX";
    REQUIRE(mkdtemp(dir));
    int ok = 0, runs = 0;
    for (int mode = 0; mode < 2; mode++) {
        struct prefix_cache *pc;
        REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_entries = 1, .spill_dir = dir},
                                 &pc) == 0);
        struct gen_engine cached = {.target = m, .block = ds, .cache = pc},
                          plain = {.target = m, .block = ds};
        struct gen_params gp = {.max_tokens = 24,
                                .ignore_eos = 1,
                                .top_logprobs = -1,
                                .mode = mode ? GEN_DSPARK : GEN_BASELINE};
        int32_t p1[120], other[40], p2[160], p3[190];
        for (int i = 0; i < 120; i++) p1[i] = 20 + (i * 131 + mode) % 8000;
        for (int i = 0; i < 40; i++) other[i] = 30 + (i * 577) % 8000;
        struct gen_result a, b, c, d, e, f;
        REQUIRE(gen_run(&cached, p1, 120, &gp, NULL, NULL, &a) == 0);
        REQUIRE(gen_run(&cached, other, 40, &gp, NULL, NULL, &b) == 0); /* turn 1 to disk */
        memcpy(p2, p1, sizeof p1);
        memcpy(p2 + 120, a.ids, sizeof(int32_t) * 24);
        for (int i = 144; i < 160; i++) p2[i] = 40 + i;
        REQUIRE(gen_run(&cached, p2, 160, &gp, NULL, NULL, &c) == 0); /* from disk */
        REQUIRE(gen_run(&plain, p2, 160, &gp, NULL, NULL, &d) == 0);
        memcpy(p3, p2, sizeof p2);
        memcpy(p3 + 160, c.ids, sizeof(int32_t) * 24);
        for (int i = 184; i < 190; i++) p3[i] = 50 + i;
        REQUIRE(gen_run(&cached, p3, 190, &gp, NULL, NULL, &e) == 0); /* from RAM */
        REQUIRE(gen_run(&plain, p3, 190, &gp, NULL, NULL, &f) == 0);
        struct prefix_stats ps = prefix_cache_stats(pc);
        printf("  %s on the GPU: follow-up from disk reused %d of 160 tokens, from RAM %d of 190; "
               "outputs equal cold: %s, %s\n",
               mode ? "dspark" : "baseline", c.stats.cached_tokens, e.stats.cached_tokens,
               same_ids(&c, &d) ? "yes" : "NO", same_ids(&e, &f) ? "yes" : "NO");
        runs++;
        ok += ps.spill_reads >= 1 && c.stats.cached_tokens == 143 && e.stats.cached_tokens == 183 &&
              same_ids(&c, &d) && same_ids(&e, &f);
        gen_result_free(&a), gen_result_free(&b), gen_result_free(&c);
        gen_result_free(&d), gen_result_free(&e), gen_result_free(&f);
        prefix_cache_free(pc);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s/*", dir);
        CHECK(system(cmd) == 0);
    }
    CHECK(ok == runs);
    rmdir(dir);
    block_model_free(ds);
    model_free(m);
}

/* Device caches over the prefix cache's byte limit: room past the positions goes first
 * (kv_fit), then whole pages from the end (kv_trim_own); the kept positions go on with the same
 * logits as a cache that never lost any, and a cache another one reads gives up nothing. Through
 * the prefix cache: the older of two entries that do not fit keeps its first pages, the cache stays
 * under its limit, and a follow-up reuses what was kept and answers as an uncached run does. */
TEST(gpu_cache_trim) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    const int V = model_config(m)->vocab_size;
    int32_t ids[300];
    for (int j = 0; j < 300; j++) ids[j] = 20 + (j * 131 + 11) % 8000;
    float *la = malloc(sizeof(float) * V * 72), *lb = malloc(sizeof(float) * V * 72);
    REQUIRE(la && lb);
    struct kv_cache *kv, *ref, *s;
    REQUIRE(kv_new(m, 512, &kv) == 0 && kv_new(m, 300, &ref) == 0);
    CHECK(model_forward(m, kv, ids, 200, NULL, 0) == 0);
    const size_t b0 = kv_bytes(kv);
    CHECK(kv_fit(kv) == 0); /* the room past 200 positions goes */
    const int room_ok =
        kv_len(kv) == 200 && kv_capacity(kv) == 200 && kv_bytes(kv) * 512 == b0 * 200;
    const int kept = kv_trim_own(kv, 2); /* then 2 of its 4 pages of positions */
    const int pages_ok = kept == 128 && kv_len(kv) == 128 && kv_capacity(kv) == 128;
    REQUIRE(kv_new_shared(m, 300, kv, 100, &s) == 0); /* kv is s's base now */
    CHECK(kv_reserve(kv, 300) == 0); /* room again, which a cache it is the base of keeps */
    const size_t b1 = kv_bytes(kv);
    const int shared_ok = kv_fit(kv) == 0 && kv_trim_own(kv, 1) == 128 && kv_bytes(kv) == b1;
    kv_free(s);
    CHECK(model_forward(m, kv, ids + 128, 72, la, 1) == 0);
    CHECK(model_forward(m, ref, ids, 128, NULL, 0) == 0);
    CHECK(model_forward(m, ref, ids + 128, 72, lb, 1) == 0);
    const int same = !memcmp(la, lb, sizeof(float) * V * 72);
    printf(
        "  GPU cache trim: room given up %s, pages next %s (kept %d of 200), shared kept whole %s; "
        "72 positions on top equal an untrimmed cache's: %s\n",
        room_ok ? "yes" : "NO", pages_ok ? "yes" : "NO", kept, shared_ok ? "yes" : "NO",
        same ? "yes" : "NO");
    CHECK(room_ok && pages_ok && shared_ok && same);
    kv_free(kv), kv_free(ref);

    /* the prefix cache: room for one request's 512 positions and 4 of the other's 8 pages */
    struct kv_cache *probe;
    REQUIRE(kv_new(m, 64, &probe) == 0);
    const size_t per_pos = kv_bytes(probe) / 64, max_bytes = per_pos * 768;
    kv_free(probe);
    struct prefix_cache *pc;
    REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_bytes = max_bytes}, &pc) == 0);
    struct gen_engine cached = {.target = m, .cache = pc}, plain = {.target = m};
    struct gen_params gp = {.max_tokens = 24, .ignore_eos = 1, .top_logprobs = -1};
    int32_t other[300], p2[310];
    for (int j = 0; j < 300; j++) other[j] = 30 + (j * 577 + 3) % 8000;
    struct gen_result a, b, c, d;
    REQUIRE(gen_run(&cached, ids, 300, &gp, NULL, NULL, &a) == 0);
    REQUIRE(gen_run(&cached, other, 300, &gp, NULL, NULL, &b) == 0); /* the first is trimmed */
    struct prefix_stats ps = prefix_cache_stats(pc);
    memcpy(p2, ids, sizeof ids);
    for (int j = 300; j < 310; j++) p2[j] = 40 + j;
    REQUIRE(gen_run(&cached, p2, 310, &gp, NULL, NULL, &c) == 0);
    REQUIRE(gen_run(&plain, p2, 310, &gp, NULL, NULL, &d) == 0);
    const int reused = c.stats.cached_tokens;
    printf("  GPU prefix cache over its limit: %ld tokens trimmed, %.2f of %.2f MB held; a "
           "follow-up reused %d of 310 tokens, output equal cold: %s\n",
           ps.trimmed_tokens, (double)ps.bytes / 1e6, (double)max_bytes / 1e6, reused,
           same_ids(&c, &d) ? "yes" : "NO");
    /* the first entry: 323 positions in 6 pages, 2 of them trimmed */
    CHECK(ps.entries == 2 && ps.trimmed_tokens == 323 - 256 && ps.bytes <= max_bytes);
    CHECK(reused == 256 && same_ids(&c, &d));
    gen_result_free(&a), gen_result_free(&b), gen_result_free(&c), gen_result_free(&d);
    prefix_cache_free(pc);

    /* an entry sharing an older entry's first 150 positions (its base), under a limit of the
     * base's 200: the older entry cannot give up rows another cache reads and leaves; the
     * newer gives up its own rows down to the shared ones, and a follow-up over what it kept
     * reuses them and answers as an uncached run does. When the base alone is over the limit
     * (here its cache took more room while shared), the newer entry, with no rows of its own
     * left to give up, leaves too. */
    int32_t q[180];
    memcpy(q, ids, sizeof(int32_t) * 150);
    for (int j = 150; j < 180; j++) q[j] = 60 + j;
    int kept_ok = 0, left_ok = 0, same_q = 0;
    for (int grow = 0; grow < 2; grow++) {
        REQUIRE(prefix_cache_new(m, &(struct prefix_cache_opts){.max_bytes = per_pos * 200}, &pc) ==
                0);
        cached.cache = pc;
        struct kv_cache *ka, *kq;
        REQUIRE(kv_new(m, 256, &ka) == 0);
        CHECK(model_forward(m, ka, ids, 200, NULL, 0) == 0);
        prefix_cache_put(pc, ids, 200, ka); /* its room goes: 200 positions fit */
        int r = 0;
        REQUIRE((kq = prefix_cache_take(pc, q, 180, 256, &r)) != NULL && r == 150);
        CHECK(model_forward(m, kq, q + 150, 30, NULL, 0) == 0);
        if (grow) CHECK(kv_reserve(ka, 300) == 0);
        prefix_cache_put(pc, q, 180, kq);
        ps = prefix_cache_stats(pc);
        if (grow) {
            left_ok = ps.entries == 0 && ps.bytes == 0;
        } else {
            kept_ok = ps.entries == 1 && ps.trimmed_tokens == 30 && ps.bytes == per_pos * 200;
            REQUIRE(gen_run(&cached, q, 180, &gp, NULL, NULL, &c) == 0);
            REQUIRE(gen_run(&plain, q, 180, &gp, NULL, NULL, &d) == 0);
            same_q = c.stats.cached_tokens == 150 && same_ids(&c, &d);
            gen_result_free(&c), gen_result_free(&d);
        }
        prefix_cache_free(pc);
        cached.cache = pc = NULL;
    }
    printf("  GPU entry over a shared base: keeps the shared 150 positions %s and answers as "
           "cold %s; leaves when the base alone is over %s\n",
           kept_ok ? "yes" : "NO", same_q ? "yes" : "NO", left_ok ? "yes" : "NO");
    CHECK(kept_ok && same_q && left_ok);
    free(la), free(lb);
    model_free(m);
}

/* A device cache sharing another's first positions (kv_new_shared): own rows only for the
 * rest, the same logits as a cache that prefilled everything (also a share of a share, in a
 * batch, after its base is freed, and after a rollback below the share), the same export. */
TEST(gpu_shared_cache) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    const int V = model_config(m)->vocab_size;
    int32_t ids[300];
    for (int j = 0; j < 300; j++) ids[j] = 20 + (j * 131 + 7) % 8000;
    float *la = malloc(sizeof(float) * V * 40), *lb = malloc(sizeof(float) * V * 40);
    REQUIRE(la && lb);
    int same = 0, checks = 0;
#define SAME_STEP(A, B, FROM, N)                                                                   \
    do {                                                                                           \
        CHECK(model_forward(m, A, ids + (FROM), N, la, 1) == 0);                                   \
        CHECK(model_forward(m, B, ids + (FROM), N, lb, 1) == 0);                                   \
        same += !memcmp(la, lb, sizeof(float) * V * (N)), checks++;                                \
    } while (0)
    struct kv_cache *full, *s1, *s2, *r1, *r2;
    REQUIRE(kv_new(m, 300, &full) == 0 && kv_new(m, 300, &r1) == 0 && kv_new(m, 300, &r2) == 0);
    CHECK(model_forward(m, full, ids, 200, NULL, 0) == 0);
    REQUIRE(kv_new_shared(m, 300, full, 150, &s1) == 0);
    CHECK(kv_shared(s1) == 150 && kv_len(s1) == 150 && kv_base(s1) == full);
    CHECK(kv_bytes(s1) * 2 == kv_bytes(full)); /* own rows for 150 of 300 positions */
    CHECK(model_forward(m, r1, ids, 150, NULL, 0) == 0);
    SAME_STEP(s1, r1, 150, 40); /* positions 150..189 on top of the shared 150 */
    /* a share of a share: the base is full's, positions 150..169 copied from s1's own rows */
    REQUIRE(kv_new_shared(m, 300, s1, 170, &s2) == 0);
    CHECK(kv_shared(s2) == 150 && kv_base(s2) == full && kv_len(s2) == 170);
    CHECK(model_forward(m, r2, ids, 170, NULL, 0) == 0);
    SAME_STEP(s2, r2, 170, 30);
    /* both in one batched pass */
    struct model_batch_item it[2] = {{s2, ids + 200, 5, la, NULL, NULL, 0, NULL},
                                     {r2, ids + 200, 5, lb, NULL, NULL, 0, NULL}};
    CHECK(model_forward_batch(m, it, 2) == 0);
    same += !memcmp(la, lb, sizeof(float) * V * 5), checks++;
    float *ea = malloc(sizeof(float) * kv_row_floats(s2) * 205),
          *eb = malloc(sizeof(float) * kv_row_floats(s2) * 205);
    REQUIRE(ea && eb);
    CHECK(kv_export(s2, 205, ea) == 0 && kv_export(r2, 205, eb) == 0);
    int same_export = !memcmp(ea, eb, sizeof(float) * kv_row_floats(s2) * 205);
    /* the base outlives its owner while shared */
    kv_free(full);
    SAME_STEP(s1, r1, 190, 10);
    /* a rollback below the share gives s2 rows of its own */
    kv_truncate(s2, 100), kv_truncate(r2, 100);
    CHECK(kv_shared(s2) == 0 && kv_base(s2) == NULL);
    SAME_STEP(s2, r2, 100, 40);
    printf("  GPU caches sharing a prefix: %d of %d passes equal to unshared caches, export "
           "equal: %s\n",
           same, checks, same_export ? "yes" : "NO");
    CHECK(same == checks && same_export);
#undef SAME_STEP
    kv_free(s1), kv_free(s2), kv_free(r1), kv_free(r2);
    free(la), free(lb), free(ea), free(eb);
    model_free(m);
}

/* Attention's scratch grows with the caches: passes over a small cache before and after a
 * cache of the model's whole context exists give the same logits, and a long prompt's last
 * logits on the GPU match the CPU's. */
TEST(gpu_scratch_growth) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *cpu;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &cpu) == 0);
    const int V = model_config(m)->vocab_size, maxp = model_config(m)->max_pos;
    const int L = maxp - 1 < 1500 ? maxp - 1 : 1500;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)L);
    float *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V),
          *l3 = malloc(sizeof(float) * V);
    REQUIRE(ids && l1 && l2 && l3);
    for (int j = 0; j < L; j++) ids[j] = 20 + (j * 977 + 5) % 8000;
    struct kv_cache *a, *b, *c, *k;
    REQUIRE(kv_new(m, 100, &a) == 0);
    CHECK(model_forward(m, a, ids, 60, l1, 0) == 0);
    REQUIRE(kv_new(m, maxp, &b) == 0); /* the scratch grows to the whole context */
    CHECK(model_forward(m, b, ids, 60, l2, 0) == 0);
    int same_before = !memcmp(l1, l2, sizeof(float) * V);
    CHECK(model_forward(m, b, ids + 60, L - 60, l2, 0) == 0);
    REQUIRE(kv_new(cpu, L, &k) == 0);
    CHECK(model_forward(cpu, k, ids, L, l3, 0) == 0);
    double e = rel_err(l2, l3, (size_t)V);
    CHECK(model_forward(m, a, ids + 60, 20, l1, 0) == 0); /* the small cache goes on */
    REQUIRE(kv_new(m, 100, &c) == 0);
    CHECK(model_forward(m, c, ids, 80, l2, 0) == 0);
    int same_after = !memcmp(l1, l2, sizeof(float) * V);
    printf("  attention scratch growth: small cache equal before %s and after %s; logits at "
           "position %d within %.1e of the CPU's\n",
           same_before ? "yes" : "NO", same_after ? "yes" : "NO", L - 1, e);
    CHECK(same_before && same_after && e < cpu_tol());
    kv_free(a), kv_free(b), kv_free(c), kv_free(k);
    free(ids), free(l1), free(l2), free(l3);
    model_free(m), model_free(cpu);
}

/* A pass longer than a graph's with sequences that want only their last row (a prompt chunk,
 * a decode step) beside one that wants every row: only the wanted rows go through the final
 * norm and lm_head, with the same logits and greedy ids as each sequence alone. */
TEST(gpu_selected_rows) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    const int V = model_config(m)->vocab_size;
    enum { NS = 3 };
    static const int pre[NS] = {10, 50, 30}, w[NS] = {100, 1, 20}, last[NS] = {1, 1, 0};
    int32_t ids[NS][160];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < 160; j++) ids[i][j] = 20 + (i * 577 + j * 131) % 8000;
    struct kv_cache *a[NS], *b[NS];
    float *la[NS], *lb[NS];
    int32_t ga[NS][100], gb[NS][100];
    struct model_batch_item items[NS];
    for (int i = 0; i < NS; i++) {
        int rows = last[i] ? 1 : w[i];
        REQUIRE(kv_new(m, 200, &a[i]) == 0 && kv_new(m, 200, &b[i]) == 0);
        la[i] = malloc(sizeof(float) * V * rows), lb[i] = malloc(sizeof(float) * V * rows);
        REQUIRE(la[i] && lb[i]);
        CHECK(model_forward(m, a[i], ids[i], pre[i], NULL, 0) == 0);
        CHECK(model_forward(m, b[i], ids[i], pre[i], NULL, 0) == 0);
        struct model_batch_item it = {a[i], ids[i] + pre[i], w[i],    la[i],
                                      NULL, ga[i],           last[i], NULL};
        CHECK(model_forward_batch(m, &it, 1) == 0); /* alone */
        items[i] = (struct model_batch_item){b[i], ids[i] + pre[i], w[i],    lb[i],
                                             NULL, gb[i],           last[i], NULL};
    }
    CHECK(model_forward_batch(m, items, NS) == 0); /* 121 rows, 22 of them wanted */
    int same = 0;
    for (int i = 0; i < NS; i++) {
        int rows = last[i] ? 1 : w[i];
        same += !memcmp(la[i], lb[i], sizeof(float) * V * rows) &&
                !memcmp(ga[i], gb[i], sizeof(int32_t) * rows);
    }
    printf("  a 121-row pass wanting 22 rows' logits: %d of %d sequences equal alone\n", same, NS);
    CHECK(same == NS);
    for (int i = 0; i < NS; i++) kv_free(a[i]), kv_free(b[i]), free(la[i]), free(lb[i]);
    model_free(m);
}

/* test_gpu [NAME...]: only the named tests (e.g. under compute-sanitizer) */
static int wanted(int argc, char **argv, const char *name) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (wanted(argc, argv, "gpu_golden")) RUN(gpu_golden);
    if (wanted(argc, argv, "gpu_batch_invariance")) RUN(gpu_batch_invariance);
    if (wanted(argc, argv, "gpu_inputs_bf16")) RUN(gpu_inputs_bf16);
    if (wanted(argc, argv, "gpu_gemm_exact")) RUN(gpu_gemm_exact);
    if (wanted(argc, argv, "gpu_attention_buffers")) RUN(gpu_attention_buffers);
    if (wanted(argc, argv, "gpu_attention_one")) RUN(gpu_attention_one);
    if (wanted(argc, argv, "gpu_chunk_rows")) RUN(gpu_chunk_rows);
    if (wanted(argc, argv, "gpu_split_pairs")) RUN(gpu_split_pairs);
    if (wanted(argc, argv, "gpu_merge_warp")) RUN(gpu_merge_warp);
    if (wanted(argc, argv, "gpu_attention_loads_ahead")) RUN(gpu_attention_loads_ahead);
    if (wanted(argc, argv, "gpu_attention_merge")) RUN(gpu_attention_merge);
    if (wanted(argc, argv, "gpu_attention_prompt")) RUN(gpu_attention_prompt);
    if (wanted(argc, argv, "gpu_kv_bf16")) RUN(gpu_kv_bf16);
    if (wanted(argc, argv, "gpu_attention_many_steps")) RUN(gpu_attention_many_steps);
    if (wanted(argc, argv, "gpu_many_heads_per_kv")) RUN(gpu_many_heads_per_kv);
    if (wanted(argc, argv, "gpu_block_golden")) RUN(gpu_block_golden);
    if (wanted(argc, argv, "gpu_block_pycoder")) RUN(gpu_block_pycoder);
    if (wanted(argc, argv, "gpu_exact_modes")) RUN(gpu_exact_modes);
    if (wanted(argc, argv, "gpu_multi_sequence")) RUN(gpu_multi_sequence);
    if (wanted(argc, argv, "gpu_engine_batch")) RUN(gpu_engine_batch);
    if (wanted(argc, argv, "gpu_prefix_cache")) RUN(gpu_prefix_cache);
    if (wanted(argc, argv, "gpu_cache_trim")) RUN(gpu_cache_trim);
    if (wanted(argc, argv, "gpu_shared_cache")) RUN(gpu_shared_cache);
    if (wanted(argc, argv, "gpu_scratch_growth")) RUN(gpu_scratch_growth);
    if (wanted(argc, argv, "gpu_selected_rows")) RUN(gpu_selected_rows);
    if (wanted(argc, argv, "gpu_sample_summary")) RUN(gpu_sample_summary);
    if (wanted(argc, argv, "gpu_sample_summary_modes")) RUN(gpu_sample_summary_modes);
    if (wanted(argc, argv, "gpu_sample_draw")) RUN(gpu_sample_draw);
    if (wanted(argc, argv, "gpu_sample_penalties")) RUN(gpu_sample_penalties);
    return test_report();
}
