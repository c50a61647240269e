/* tests/unit/test_model.c: the CPU forward against transformers. Golden folders hold a
 * model plus golden.json (prompt_ids, greedy_ids) and golden.safetensors (prompt_logits,
 * greedy_step_logits), made by tools/golden/make_golden.py; ../shared/golden/target is the
 * same kind of data from the original DSpark reference run. Also checks the properties later
 * layers rely on: verify rows equal single steps bit for bit, rollback, chunked prefill. */
#include "test.h"

#include "base/fs.h"
#include "base/log.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

struct golden {
    int32_t prompt[512], greedy[512];
    int n_prompt, n_greedy;
    struct st_set *st;
    const float *prompt_logits; /* [n_prompt, V] */
    const float *step_logits;   /* [n_greedy, V] or NULL */
};

static int read_ids(const cJSON *root, const char *key, int32_t *out, int cap) {
    const cJSON *a = cJSON_GetObjectItem(root, key);
    int n = 0;
    for (const cJSON *it = a ? a->child : NULL; it && n < cap; it = it->next)
        out[n++] = (int32_t)it->valuedouble;
    return n;
}

static int golden_load(const char *json_path, const char *st_path, const char *suffix,
                       struct golden *g) {
    char *text;
    size_t len;
    memset(g, 0, sizeof *g);
    if (fs_read_file(json_path, &text, &len, 1 << 26)) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    g->n_prompt = read_ids(root, "prompt_ids", g->prompt, 512);
    g->n_greedy = read_ids(root, "greedy_ids", g->greedy, 512);
    cJSON_Delete(root);
    if (st_open_file(st_path, &g->st)) return -1;
    char name[64];
    snprintf(name, sizeof name, "prompt_logits%s", suffix);
    const struct st_tensor *t = st_find(g->st, name);
    snprintf(name, sizeof name, "greedy_step_logits%s", suffix);
    const struct st_tensor *s = st_find(g->st, name);
    g->prompt_logits = t ? t->data : NULL;
    g->step_logits = s ? s->data : NULL;
    return g->prompt_logits && g->n_prompt > 0 ? 0 : -1;
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Prefill logits, then greedy decoding with per-step logits, against the golden data whose
 * logits tensors end in `suffix` ("" or "_f32math"). */
static void check_golden(const char *dir, const char *json, const char *st, const char *suffix,
                         double tol, int bf16_acts) {
    struct golden g;
    REQUIRE(golden_load(json, st, suffix, &g) == 0);
    struct model *m;
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 2, .bf16_activations = bf16_acts},
                       &m) == 0);
    int V = model_config(m)->vocab_size;
    struct kv_cache *kv;
    REQUIRE(kv_new(m, 1024, &kv) == 0);
    float *logits = malloc(sizeof(float) * (size_t)V * g.n_prompt);
    CHECK(model_forward(m, kv, g.prompt, g.n_prompt, logits, 1) == 0);
    double e = rel_err(logits, g.prompt_logits, (size_t)V * g.n_prompt);
    printf("  %s%s vs %s: prompt logits rel err %.2e (tol %.0e)\n", dir,
           bf16_acts ? " (bf16 activations)" : "", *suffix ? suffix + 1 : "reference", e, tol);
    if (bf16_acts) goto done; /* bf16 greedy is dominated by ties at one bf16 ulp */
    CHECK(e <= tol);
    int32_t tok = argmax(logits + (size_t)(g.n_prompt - 1) * V, V);
    double worst = 0;
    int same = 0;
    for (int t = 0; t < g.n_greedy; t++) {
        same += tok == g.greedy[t];
        if (tok != g.greedy[t]) break;
        CHECK(model_forward(m, kv, &tok, 1, logits, 0) == 0);
        if (g.step_logits && t + 1 < g.n_greedy) {
            double se = rel_err(logits, g.step_logits + (size_t)(t + 1) * V, (size_t)V);
            if (se > worst) worst = se;
        }
        tok = argmax(logits, V);
    }
    printf("  greedy: %d/%d tokens equal, worst step logits rel err %.2e\n", same, g.n_greedy,
           worst);
    CHECK(same == g.n_greedy);
    CHECK(worst <= tol);
done:
    free(logits);
    kv_free(kv);
    model_free(m);
    st_close(g.st);
}

TEST(shared_golden_target) {
    const char *dir = "../shared/golden/target";
    if (!fs_exists(dir)) SKIP("../shared/golden is absent");
    check_golden(dir, "../shared/golden/target_golden.json",
                 "../shared/golden/target_golden.safetensors", "", 1e-4, 0);
}

TEST(golden_folders) {
    DIR *d = opendir("tests/data/golden");
    if (!d) SKIP("tests/data/golden is absent");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[512], json[600], st[600];
        snprintf(dir, sizeof dir, "tests/data/golden/%s", e->d_name);
        snprintf(json, sizeof json, "%s/golden.json", dir);
        snprintf(st, sizeof st, "%s/golden.safetensors", dir);
        if (!fs_exists(json)) continue;
        if (strstr(e->d_name, "f32")) {
            check_golden(dir, json, st, "", 1e-4, 0);
        } else {
            /* Half-precision weights. Default float32 activations: against transformers'
             * float32 math on the same weights (1e-4), and greedy ids equal to its
             * half-precision run. Then the reference's own precision: f16 runs as is; bf16
             * with bf16 activations, teacher-forced over the prompt. */
            check_golden(dir, json, st, "_f32math", 1e-4, 0);
            int bf16 = strstr(e->d_name, "bf16") != NULL;
            check_golden(dir, json, st, "", 2e-2, bf16);
        }
        n++;
    }
    closedir(d);
    printf("  %d golden folders\n", n);
    CHECK(n > 0);
}

/* The shipped models: our tokenizer gives transformers' prompt ids, and greedy decoding gives
 * its 64 tokens, compared up to the first step whose margin is a near-tie (< 1e-3) that
 * float rounding may break either way. */
static void check_shipped(const char *dir, const char *golden) {
    if (!fs_exists(dir) || !fs_exists(golden)) SKIP("models/ or its golden file is absent");
    char *text;
    size_t len;
    REQUIRE(fs_read_file(golden, &text, &len, 1 << 24) == 0);
    cJSON *root = cJSON_Parse(text);
    free(text);
    REQUIRE(root);
    struct model *m;
    struct tokenizer *tok;
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 2}, &m) == 0);
    REQUIRE(tokenizer_load(dir, &tok) == 0);
    int V = model_config(m)->vocab_size, n_cases = 0, n_tokens = 0;
    float *logits = malloc(sizeof(float) * V);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        int32_t want_prompt[512], want[512];
        int np = read_ids(c, "prompt_ids", want_prompt, 512);
        int ng = read_ids(c, "greedy_ids", want, 512);
        const cJSON *margins = cJSON_GetObjectItem(c, "margins");
        const char *prompt = cJSON_GetObjectItem(c, "prompt")->valuestring;
        int32_t *ids;
        int n;
        REQUIRE(tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n) == 0);
        CHECK(n == np && !memcmp(ids, want_prompt, sizeof(int32_t) * (size_t)n));
        struct kv_cache *kv;
        REQUIRE(kv_new(m, 256, &kv) == 0);
        CHECK(model_forward(m, kv, ids, n, logits, 0) == 0);
        int t = 0;
        for (; t < ng; t++) {
            int32_t tok_id = argmax(logits, V);
            CHECK(tok_id == want[t]);
            if (tok_id != want[t]) break;
            if (cJSON_GetArrayItem(margins, t)->valuedouble < 1e-3) break;
            CHECK(model_forward(m, kv, &tok_id, 1, logits, 0) == 0);
        }
        n_tokens += t;
        n_cases++;
        kv_free(kv);
        free(ids);
    }
    printf("  %s: %d prompts, %d greedy tokens equal to transformers\n", dir, n_cases, n_tokens);
    CHECK(n_cases == 5 && n_tokens >= 5 * 30);
    free(logits);
    tokenizer_free(tok);
    model_free(m);
    cJSON_Delete(root);
}

TEST(shipped_models) {
    check_shipped("models/pycoder", "tests/data/pycoder_greedy.json");
    check_shipped("models/pycoder-draft", "tests/data/pycoder_draft_greedy.json");
}

/* A verify pass over k tokens must give the same rows, bit for bit, as k single steps; and
 * rolling the cache back must reproduce the same logits again. */
TEST(verify_rows_equal_single_steps) {
    const char *dir = "../shared/golden/target";
    if (!fs_exists(dir)) SKIP("../shared/golden is absent");
    for (int threads = 1; threads <= 2; threads++) {
        struct model *m;
        REQUIRE(model_load(dir, &(struct model_opts){.n_threads = threads}, &m) == 0);
        int V = model_config(m)->vocab_size;
        struct kv_cache *kv;
        REQUIRE(kv_new(m, 512, &kv) == 0);
        int32_t ids[300];
        for (int i = 0; i < 300; i++) ids[i] = (i * 37 + 11) % V;
        float *a = malloc(sizeof(float) * V * 300), *b = malloc(sizeof(float) * V * 300);
        /* chunked prefill (300 > one chunk) vs token by token */
        CHECK(model_forward(m, kv, ids, 300, a, 1) == 0);
        CHECK(kv_len(kv) == 300);
        kv_truncate(kv, 0);
        for (int i = 0; i < 300; i++)
            CHECK(model_forward(m, kv, ids + i, 1, b + (size_t)i * V, 0) == 0);
        CHECK(memcmp(a, b, sizeof(float) * V * 300) == 0);
        /* rollback to 290 and verify 8 tokens: rows equal */
        kv_truncate(kv, 290);
        CHECK(kv_len(kv) == 290);
        CHECK(model_forward(m, kv, ids + 290, 8, a, 1) == 0);
        CHECK(memcmp(a, b + (size_t)290 * V, sizeof(float) * V * 8) == 0);
        /* a full cache refuses and stays as it was */
        log_set_errors_quiet(1);
        CHECK(model_forward(m, kv, ids, 300, a, 1) != 0);
        log_set_errors_quiet(0);
        CHECK(kv_len(kv) == 298);
        free(a), free(b);
        kv_free(kv);
        model_free(m);
    }
}

/* Several sequences in one batched pass give, row for row, the logits each gives alone. */
TEST(batched_forward_equals_single) {
    const char *dir = "tests/data/golden/qwen3_f32";
    if (!fs_exists(dir)) SKIP("tests/data/golden is absent");
    struct model *m;
    REQUIRE(model_load(dir, &(struct model_opts){.n_threads = 2}, &m) == 0);
    int V = model_config(m)->vocab_size;
    enum { NS = 5 };
    struct kv_cache *a[NS], *b[NS];
    int32_t ids[NS][40];
    int pre[NS] = {3, 17, 1, 30, 9}, step[NS] = {1, 8, 3, 1, 5};
    for (int i = 0; i < NS; i++) {
        REQUIRE(kv_new(m, 128, &a[i]) == 0 && kv_new(m, 128, &b[i]) == 0);
        for (int j = 0; j < 40; j++) ids[i][j] = (int32_t)((i * 31 + j * 7) % V);
        CHECK(model_forward(m, a[i], ids[i], pre[i], NULL, 0) == 0);
        CHECK(model_forward(m, b[i], ids[i], pre[i], NULL, 0) == 0);
    }
    float *la = malloc(sizeof(float) * V * 8 * NS), *lb = malloc(sizeof(float) * V * 8);
    struct model_batch_item items[NS];
    for (int i = 0; i < NS; i++)
        items[i] = (struct model_batch_item){
            a[i], ids[i] + pre[i], step[i], la + (size_t)i * 8 * V, NULL, NULL, 0, NULL};
    CHECK(model_forward_batch(m, items, NS) == 0);
    int same = 0;
    for (int i = 0; i < NS; i++) {
        CHECK(model_forward(m, b[i], ids[i] + pre[i], step[i], lb, 1) == 0);
        same += !memcmp(la + (size_t)i * 8 * V, lb, sizeof(float) * V * step[i]);
        CHECK(kv_len(a[i]) == kv_len(b[i]));
    }
    printf("  %d of %d sequences bit-identical in a batch of %d rows\n", same, NS, 18);
    CHECK(same == NS);
    for (int i = 0; i < NS; i++) kv_free(a[i]), kv_free(b[i]);
    free(la), free(lb);
    model_free(m);
}

int main(void) {
    RUN(batched_forward_equals_single);
    RUN(shared_golden_target);
    RUN(golden_folders);
    RUN(verify_rows_equal_single_steps);
    RUN(shipped_models);
    return test_report();
}
