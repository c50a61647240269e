/* tests/unit/test_gpu.c: the CUDA forward against transformers' golden data and against the
 * CPU: logits within fp32 tolerance, greedy continuations equal, passes of every width 1..40
 * equal single steps bit for bit (graphs and direct launches alike), device greedy ids equal
 * the argmax of the logits, speculative modes equal to baseline. Skips without a CUDA build
 * and a device (CI has neither; results are recorded in docs/perf.md). */
#include "test.h"

#include "backend/gpu.h"
#include "base/fs.h"
#include "engine/generate.h"
#include "format/safetensors.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK(e <= 1e-4 && same == nw);
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
    setenv("DSPARK_GPU_GRAPHS", "0", 1);
    int rc2 = model_load("models/pycoder", &(struct model_opts){.n_threads = 1, .gpu = 1}, &m2);
    unsetenv("DSPARK_GPU_GRAPHS");
    REQUIRE(rc2 == 0);
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
        kv_truncate(a, 0);
        CHECK(model_forward(m, a, ids, P, NULL, 0) == 0);
        CHECK(model_forward(m, a, ids + P, w, la, 1) == 0);
        if (memcmp(la, lb, sizeof(float) * V * w)) {
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

/* Every speculative mode keeps the GPU baseline's greedy tokens on models/pycoder, and the
 * GPU baseline equals the CPU's. */
TEST(gpu_exact_modes) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *dm, *cpu;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder-draft", &(struct model_opts){.n_threads = 2}, &dm) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &cpu) == 0);
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
        for (int mode = GEN_LOOKUP; mode <= GEN_DRAFT; mode++) {
            struct gen_params gp = base;
            gp.mode = (enum gen_mode)mode;
            gp.max_draft = 4;
            struct gen_result r;
            REQUIRE(gen_run(&e, prompt, n, &gp, NULL, NULL, &r) == 0);
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
    model_free(m), model_free(dm), model_free(cpu);
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
    if (wanted(argc, argv, "gpu_exact_modes")) RUN(gpu_exact_modes);
    return test_report();
}
