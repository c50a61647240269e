/* tests/unit/test_gpu.c: the CUDA forward against transformers' golden data and against the
 * CPU: logits within fp32 tolerance, greedy continuations equal, verify rows equal single
 * steps bit for bit, speculative modes equal to baseline. Skips without a CUDA build and a
 * device (CI has neither; results are recorded in docs/perf.md). */
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
    static const char *names[] = {"qwen3_f32",   "qwen2_f32",  "llama3_f32",
                                  "mistral_f32", "qwen3_bf16", "qwen3_f16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) golden(names[i]);
}

/* On the GPU too, a verify pass over 8 rows gives the rows of 8 single steps bit for bit, and
 * every speculative mode keeps the baseline's greedy tokens on models/pycoder. */
TEST(gpu_exact_modes) {
    if (!gpu_available()) SKIP("no CUDA build or no GPU");
    if (!fs_exists("models/pycoder")) SKIP("models/ absent");
    struct model *m, *dm, *cpu;
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2, .gpu = 1}, &m) == 0);
    REQUIRE(model_load("models/pycoder-draft", &(struct model_opts){.n_threads = 2}, &dm) == 0);
    REQUIRE(model_load("models/pycoder", &(struct model_opts){.n_threads = 2}, &cpu) == 0);
    int V = model_config(m)->vocab_size;
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 20 + (i * 131) % 8000;
    struct kv_cache *a, *b;
    REQUIRE(kv_new(m, 128, &a) == 0 && kv_new(m, 128, &b) == 0);
    float *la = malloc(sizeof(float) * V * 8), *lb = malloc(sizeof(float) * V * 8);
    CHECK(model_forward(m, a, ids, 32, NULL, 0) == 0 && model_forward(m, b, ids, 32, NULL, 0) == 0);
    CHECK(model_forward(m, a, ids + 32, 8, la, 1) == 0);
    for (int i = 0; i < 8; i++)
        CHECK(model_forward(m, b, ids + 32 + i, 1, lb + (size_t)i * V, 0) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * V * 8) == 0);
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
    free(la), free(lb);
    kv_free(a), kv_free(b);
    model_free(m), model_free(dm), model_free(cpu);
}

int main(void) {
    RUN(gpu_golden);
    RUN(gpu_exact_modes);
    return test_report();
}
