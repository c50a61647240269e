/* tests/unit/test_registry.c: the model registry: folder names reduced to stems, drafters
 * matched to targets (published names, quantized targets, never 4B with 8B), the search path,
 * and the --mode auto choice table. Fake model folders (a config.json, a tiny safetensors file,
 * a tokenizer.json) are built in a temporary folder. */
#include "test.h"

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "format/safetensors.h"
#include "registry/registry.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_root[256];

/* ---- fake model folders ---- */

static int mkdirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    return mkdir(p, 0755) == 0 || fs_exists(p) ? 0 : -1;
}

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A one-tensor safetensors file of the given dtype whose header claims numel elements (only
 * the header is read when folders are listed; the data is 8 bytes). */
static void write_weights(const char *dir, const char *dtype, int64_t numel) {
    char h[160], buf[256];
    int n =
        snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[0,8]}}",
                 dtype, (long long)numel);
    for (int i = 0; i < 8; i++) buf[i] = (char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, h, (size_t)n);
    memset(buf + 8 + n, 0, 8);
    write_file(dir, "model.safetensors", buf, (size_t)(8 + n + 8));
}

struct fake {
    const char *name; /* path under the test root */
    const char *arch; /* "Qwen3ForCausalLM", "Qwen3DSparkModel", "DFlashDraftModel", ... */
    int hidden, layers, inter, vocab;
    int target_layers; /* block drafters */
    const char *tok;   /* tokenizer.json contents, or NULL */
    const char *extra; /* more config.json fields (",\"k\": v"), or NULL; when they set the
                        * heads, they also set the KV heads, head_dim and tie_word_embeddings */
    const char *dtype; /* safetensors dtype; NULL: no weights */
};

/* Writes root/f->name as a model folder; returns its path in a static buffer. */
static const char *make(const char *root, const struct fake *f) {
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, f->name);
    mkdirs(dir);
    char cfg[2048];
    int heads = f->hidden / 64 > 0 ? f->hidden / 64 : 1;
    int block =
        strcmp(f->arch, "Qwen3DSparkModel") == 0 || strcmp(f->arch, "DFlashDraftModel") == 0;
    int n =
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"%s\"], \"model_type\": \"qwen3\", \"hidden_size\": %d, "
                 "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"vocab_size\": %d, "
                 "\"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6, "
                 "\"rope_theta\": 1000000, \"torch_dtype\": \"bfloat16\"",
                 f->arch, f->hidden, f->inter, f->layers, f->vocab);
    if (!f->extra || !strstr(f->extra, "num_attention_heads"))
        n += snprintf(cfg + n, sizeof cfg - (size_t)n,
                      ", \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
                      "\"head_dim\": 64, \"tie_word_embeddings\": %s",
                      heads, heads > 1 ? heads / 2 : 1, block ? "false" : "true");
    if (block)
        n += snprintf(cfg + n, sizeof cfg - (size_t)n,
                      ", \"block_size\": 7, \"num_target_layers\": %d, \"mask_token_id\": 5, "
                      "\"target_layer_ids\": [1, 2]",
                      f->target_layers);
    n += snprintf(cfg + n, sizeof cfg - (size_t)n, "%s}", f->extra ? f->extra : "");
    write_file(dir, "config.json", cfg, (size_t)n);
    if (f->tok) write_file(dir, "tokenizer.json", f->tok, strlen(f->tok));
    /* a parameter count that grows with the shapes, as real ones do */
    if (f->dtype) write_weights(dir, f->dtype, (int64_t)f->hidden * f->hidden * f->layers * 12);
    return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh empty folder under the test root (a buffer per name: tests hold several). */
static const char *fresh(const char *name) {
    static char dirs[8][512];
    static int next;
    char *dir = dirs[next++ % 8];
    snprintf(dir, sizeof dirs[0], "%s/%s", tmp_root, name);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    mkdirs(dir);
    return dir;
}

static int index_of(const struct registry *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->m[i].name, name)) return i;
    return -1;
}

/* The names of target's drafters in mode, best first, joined by ','. */
static const char *drafters(const struct registry *r, const char *target, enum reg_mode mode) {
    static char out[512];
    int t = index_of(r, target), idx[16];
    out[0] = 0;
    if (t < 0) return "(no target)";
    int n = registry_drafters(r, t, mode, idx, 16);
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "," : "",
                 r->m[idx[i]].name);
    return out;
}

/* --mode auto for target as "mode name-of-drafter" (or "lookup"); block_ok 0: a backend that
 * runs no block drafters. */
static const char *choose_on(const struct registry *r, const char *target, const char *given,
                             int block_ok) {
    static char out[300];
    struct reg_choice c;
    int t = index_of(r, target), g = given ? index_of(r, given) : -1;
    if (t < 0 || (given && g < 0)) return "(missing)";
    if (registry_choose(r, t, g, block_ok, &c)) return "error";
    snprintf(out, sizeof out, "%s%s%s", registry_mode_name(c.mode), c.drafter >= 0 ? " " : "",
             c.drafter >= 0 ? r->m[c.drafter].name : "");
    return out;
}

static const char *choose(const struct registry *r, const char *target, const char *given) {
    return choose_on(r, target, given, 1);
}

/* ---- tests ---- */

static int stem_is(const char *name, const char *stem, const char *sizes) {
    char s[128], z[32];
    registry_stem(name, s, sizeof s, z, sizeof z);
    if (strcmp(s, stem) || strcmp(z, sizes)) {
        printf("  %s: stem \"%s\" sizes \"%s\"\n", name, s, z);
        return 0;
    }
    return 1;
}

TEST(stems_ignore_org_quantization_and_drafter_markers) {
    CHECK(stem_is("Qwen/Qwen3-4B", "qwen 3", "4b"));
    CHECK(stem_is("deepseek-ai/dspark_qwen3_4b_block7", "qwen 3", "4b"));
    CHECK(stem_is("z-lab/Qwen3-4B-DFlash-b16", "qwen 3", "4b"));
    CHECK(stem_is("mlx-community/Qwen3-8B-4bit", "qwen 3", "8b"));
    CHECK(stem_is("Qwen3-8B-MLX-8bit", "qwen 3", "8b"));
    CHECK(stem_is("Qwen3-0.6B-GGUF", "qwen 3", "0.6b"));
    CHECK(stem_is("Qwen3-4B-GPTQ-Int4", "qwen 3", "4b"));
    CHECK(stem_is("Qwen3-30B-A3B-FP8", "qwen 3", "30b a3b"));
    CHECK(stem_is("Qwen2.5-7B-Instruct-AWQ", "qwen 2.5 instruct", "7b"));
    CHECK(stem_is("Meta-Llama-3.1-8B-Instruct-Q4_K_M", "meta llama 3.1 instruct", "8b"));
    CHECK(stem_is("Mixtral-8x7B-v0.1-bf16", "mixtral v 0.1", "8x7b"));
    CHECK(stem_is("gemma-4-12B-it-8bit", "gemma 4 it", "12b"));
    CHECK(stem_is("gemma4-12B-it-DFlash", "gemma 4 it", "12b"));
    CHECK(stem_is("pycoder", "pycoder", ""));
    CHECK(stem_is("pycoder-dspark", "pycoder", ""));
    CHECK(stem_is("pycoder-draft", "pycoder", ""));
}

/* The shipped family: pycoder with its DSpark, DFlash and draft-model folders. */
TEST(default_family_in_models) {
    if (!fs_exists("models/pycoder"))
        SKIP("models/pycoder is absent (run from the repository root)");
    struct registry r = {0};
    REQUIRE(registry_scan(&r, "models") == OK);
    CHECK(!strcmp(drafters(&r, "pycoder", REG_MODE_DSPARK), "pycoder-dspark"));
    CHECK(!strcmp(drafters(&r, "pycoder", REG_MODE_DFLASH), "pycoder-dflash"));
    CHECK(!strcmp(drafters(&r, "pycoder", REG_MODE_DRAFT), "pycoder-draft"));
    CHECK(!strcmp(choose(&r, "pycoder", NULL), "dspark pycoder-dspark"));
    /* the draft model shares the name stem but not the shapes: no drafter fits it */
    CHECK(!strcmp(choose(&r, "pycoder-draft", NULL), "lookup"));
    int t = index_of(&r, "pycoder");
    REQUIRE(t >= 0);
    const struct reg_model *m = &r.m[t];
    CHECK(m->kind == REG_CAUSAL_LM && m->servable && !strcmp(m->dtype, "bf16"));
    CHECK(r.m[index_of(&r, "pycoder-dspark")].kind == REG_DSPARK);
    CHECK(r.m[index_of(&r, "pycoder-dflash")].kind == REG_DFLASH);
    /* size on disk and the parameter estimate against the weights themselves */
    struct st_set *s;
    REQUIRE(st_open_dir("models/pycoder", &s) == OK);
    int64_t numel = 0;
    for (int i = 0; i < st_count(s); i++) numel += st_numel(st_at(s, i));
    st_close(s);
    struct stat st;
    REQUIRE(stat("models/pycoder/model.safetensors", &st) == 0);
    CHECK(m->n_bytes == (int64_t)st.st_size);
    CHECK_NEAR((double)m->n_params / (double)numel, 1.0, 0.01);
    registry_free(&r);
}

#define QWEN_TOK  "{\"model\": \"qwen tokenizer\"}"
#define LLAMA_TOK "{\"model\": \"llama tokenizer\"}"

/* Published layouts: org folders, DSpark/DFlash names, an MLX 4-bit target. */
TEST(published_names) {
    const char *root = fresh("published");
    const struct fake f[] = {
        {"Qwen/Qwen3-4B", "Qwen3ForCausalLM", 2560, 36, 9728, 151936, 0, QWEN_TOK, NULL, "BF16"},
        {"Qwen/Qwen3-0.6B", "Qwen3ForCausalLM", 1024, 28, 3072, 151936, 0, QWEN_TOK, NULL, "BF16"},
        /* Qwen3-8B's shapes: its parameters are estimated from config.json */
        {"mlx-community/Qwen3-8B-4bit", "Qwen3ForCausalLM", 4096, 36, 12288, 151936, 0, QWEN_TOK,
         ", \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128, "
         "\"tie_word_embeddings\": false, \"quantization\": {\"group_size\": 64, \"bits\": 4}",
         "U32"},
        {"deepseek-ai/dspark_qwen3_4b_block7", "Qwen3DSparkModel", 2560, 1, 9728, 151936, 36, NULL,
         NULL, "BF16"},
        {"deepseek-ai/dspark_qwen3_8b_block7", "Qwen3DSparkModel", 4096, 1, 12288, 151936, 36, NULL,
         NULL, "BF16"},
        {"z-lab/Qwen3-4B-DFlash-b16", "DFlashDraftModel", 2560, 1, 9728, 151936, 36, NULL, NULL,
         "BF16"},
        {"meta-llama/Llama-3.2-1B", "LlamaForCausalLM", 2048, 16, 8192, 128256, 0, LLAMA_TOK, NULL,
         "BF16"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) make(root, &f[i]);
    struct registry r = {0};
    REQUIRE(registry_scan(&r, root) == OK);
    CHECK(r.n == (int)(sizeof f / sizeof f[0]));
    CHECK(!strcmp(drafters(&r, "Qwen/Qwen3-4B", REG_MODE_DSPARK),
                  "deepseek-ai/dspark_qwen3_4b_block7"));
    CHECK(!strcmp(drafters(&r, "Qwen/Qwen3-4B", REG_MODE_DFLASH), "z-lab/Qwen3-4B-DFlash-b16"));
    CHECK(!strcmp(drafters(&r, "Qwen/Qwen3-4B", REG_MODE_DRAFT), "Qwen/Qwen3-0.6B"));
    CHECK(!strcmp(drafters(&r, "mlx-community/Qwen3-8B-4bit", REG_MODE_DSPARK),
                  "deepseek-ai/dspark_qwen3_8b_block7"));
    CHECK(!strcmp(drafters(&r, "mlx-community/Qwen3-8B-4bit", REG_MODE_DFLASH), ""));
    /* 4B has under half of 8B's parameters but more than a quarter: not a draft model */
    CHECK(!strcmp(drafters(&r, "mlx-community/Qwen3-8B-4bit", REG_MODE_DRAFT), "Qwen/Qwen3-0.6B"));
    /* another tokenizer is never a draft model; a drafter has no drafters */
    CHECK(!strcmp(drafters(&r, "Qwen/Qwen3-4B", REG_MODE_DRAFT), "Qwen/Qwen3-0.6B"));
    CHECK(!strcmp(choose(&r, "meta-llama/Llama-3.2-1B", NULL), "lookup"));
    CHECK(!strcmp(choose(&r, "deepseek-ai/dspark_qwen3_4b_block7", NULL), "lookup"));
    int q = index_of(&r, "mlx-community/Qwen3-8B-4bit");
    REQUIRE(q >= 0);
    CHECK(!r.m[q].servable && strstr(r.m[q].note, "4-bit") && !strcmp(r.m[q].dtype, "4-bit"));
    CHECK_NEAR(r.m[q].n_params / 1e9, 8.19, 0.05); /* Qwen3-8B has 8.19B parameters */
    CHECK(r.m[index_of(&r, "Qwen/Qwen3-4B")].servable);
    registry_free(&r);
}

/* Names alone keep 4B and 8B apart, even when the shapes would allow it. */
TEST(never_4b_with_8b) {
    const char *root = fresh("sizes");
    const struct fake f[] = {
        {"Qwen3-4B", "Qwen3ForCausalLM", 512, 4, 1024, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"Qwen3-8B-bf16", "Qwen3ForCausalLM", 512, 4, 1024, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"dspark_qwen3_8b_block7", "Qwen3DSparkModel", 512, 1, 1024, 1000, 4, NULL, NULL, "BF16"},
        {"Qwen3-4B-DFlash-b16", "DFlashDraftModel", 512, 1, 1024, 1000, 4, NULL, NULL, "BF16"},
        {"Qwen3-dspark", "Qwen3DSparkModel", 512, 1, 1024, 1000, 4, NULL, NULL, "BF16"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) make(root, &f[i]);
    struct registry r = {0};
    REQUIRE(registry_scan(&r, root) == OK);
    CHECK(!strcmp(choose(&r, "Qwen3-4B", NULL), "dflash Qwen3-4B-DFlash-b16"));
    CHECK(!strcmp(choose(&r, "Qwen3-8B-bf16", NULL), "dspark dspark_qwen3_8b_block7"));
    CHECK(!strcmp(drafters(&r, "Qwen3-8B-bf16", REG_MODE_DFLASH), ""));
    /* a drafter without a size in its name matches no sized target */
    CHECK(!strcmp(drafters(&r, "Qwen3-4B", REG_MODE_DSPARK), ""));
    registry_free(&r);
}

/* A drafter built for another target shape does not match even with the right name. */
TEST(shapes_must_fit) {
    const char *root = fresh("shapes");
    const struct fake f[] = {
        {"tiny", "Qwen3ForCausalLM", 512, 4, 1024, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"tiny-dspark", "Qwen3DSparkModel", 512, 1, 1024, 1000, 6, NULL, NULL, "BF16"},
        {"tiny-dflash", "DFlashDraftModel", 256, 1, 1024, 1000, 4, NULL, NULL, "BF16"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) make(root, &f[i]);
    struct registry r = {0};
    REQUIRE(registry_scan(&r, root) == OK);
    CHECK(!strcmp(choose(&r, "tiny", NULL), "lookup"));
    registry_free(&r);
}

/* dspark > dflash > draft > lookup; a given drafter wins; unloadable drafters are skipped. */
TEST(auto_choice_table) {
    const struct fake target = {"m", "Qwen3ForCausalLM", 512,  8,     2048, 1000,
                                0,   QWEN_TOK,           NULL, "BF16"};
    const struct fake ds = {"m-dspark", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL,
                            "BF16"};
    const struct fake df = {"m-dflash", "DFlashDraftModel", 512, 1, 2048, 1000, 8, NULL, NULL,
                            "BF16"};
    const struct fake dm = {"m-draft", "Qwen3ForCausalLM", 128,  2,     512, 1000,
                            0,         QWEN_TOK,           NULL, "BF16"};
    const struct {
        int dspark, dflash, draft;
        const char *given, *want;
    } table[] = {
        {1, 1, 1, NULL, "dspark m-dspark"},
        {0, 1, 1, NULL, "dflash m-dflash"},
        {0, 0, 1, NULL, "draft m-draft"},
        {0, 0, 0, NULL, "lookup"},
        {1, 0, 0, NULL, "dspark m-dspark"},
        {1, 1, 1, "m-dflash", "dflash m-dflash"},
        {1, 1, 1, "m-draft", "draft m-draft"},
        {0, 0, 1, "m-draft", "draft m-draft"},
        {1, 1, 1, "m", "error"},
    };
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
        const char *root = fresh("auto");
        make(root, &target);
        if (table[k].dspark) make(root, &ds);
        if (table[k].dflash) make(root, &df);
        if (table[k].draft) make(root, &dm);
        struct registry r = {0};
        REQUIRE(registry_scan(&r, root) == OK);
        int quiet = log_set_errors_quiet(1);
        const char *got = choose(&r, "m", table[k].given);
        log_set_errors_quiet(quiet);
        if (strcmp(got, table[k].want)) printf("  row %zu: got \"%s\"\n", k, got);
        CHECK(!strcmp(got, table[k].want));
        /* without block drafters (the GPU backend): the draft model, else lookup */
        if (!table[k].given)
            CHECK(
                !strcmp(choose_on(&r, "m", NULL, 0), table[k].draft ? "draft m-draft" : "lookup"));
        registry_free(&r);
    }
}

TEST(auto_given_and_preferences) {
    const char *root = fresh("prefs");
    const struct fake f[] = {
        {"Qwen3-4B", "Qwen3ForCausalLM", 512, 8, 2048, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"DSpark-Qwen3-4B", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL, "BF16"},
        {"Qwen3-4B-dspark", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL, "BF16"},
        /* a DFlash drafter without weights: listed, never chosen */
        {"Qwen3-4B-DFlash-b16", "DFlashDraftModel", 512, 1, 2048, 1000, 8, NULL, NULL, NULL},
        {"Qwen3-tiny", "Qwen3ForCausalLM", 128, 2, 512, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"Qwen3-small", "Qwen3ForCausalLM", 256, 2, 512, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"other-tok", "Qwen3ForCausalLM", 128, 2, 512, 1000, 0, LLAMA_TOK, NULL, "BF16"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) make(root, &f[i]);
    struct registry r = {0};
    REQUIRE(registry_scan(&r, root) == OK);
    /* the folder named after the target comes first */
    CHECK(!strcmp(drafters(&r, "Qwen3-4B", REG_MODE_DSPARK), "Qwen3-4B-dspark,DSpark-Qwen3-4B"));
    CHECK(!strcmp(choose(&r, "Qwen3-4B", NULL), "dspark Qwen3-4B-dspark"));
    CHECK(!strcmp(choose(&r, "Qwen3-4B", "DSpark-Qwen3-4B"), "dspark DSpark-Qwen3-4B"));
    /* draft models: the smallest first */
    CHECK(!strcmp(drafters(&r, "Qwen3-4B", REG_MODE_DRAFT), "Qwen3-tiny,Qwen3-small"));
    int dflash = index_of(&r, "Qwen3-4B-DFlash-b16");
    REQUIRE(dflash >= 0);
    CHECK(!r.m[dflash].servable && strstr(r.m[dflash].note, "safetensors"));
    int quiet = log_set_errors_quiet(1);
    CHECK(!strcmp(choose(&r, "Qwen3-4B", "other-tok"), "error"));
    log_set_errors_quiet(quiet);
    registry_free(&r);
    /* without the DSpark drafters, the unloadable DFlash one is passed over for a draft model */
    const char *root2 = fresh("prefs2");
    make(root2, &f[0]);
    make(root2, &f[3]);
    make(root2, &f[4]);
    REQUIRE(registry_scan(&r, root2) == OK);
    CHECK(!strcmp(choose(&r, "Qwen3-4B", NULL), "draft Qwen3-tiny"));
    registry_free(&r);
    /* the folder next to the target beats a same-named one elsewhere */
    const char *root3 = fresh("prefs3");
    const struct fake g[] = {
        {"m", "Qwen3ForCausalLM", 512, 8, 2048, 1000, 0, QWEN_TOK, NULL, "BF16"},
        {"m-dspark", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL, "BF16"},
        {"a/m-dspark", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL, "BF16"},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) make(root3, &g[i]);
    REQUIRE(registry_scan(&r, root3) == OK);
    CHECK(!strcmp(drafters(&r, "m", REG_MODE_DSPARK), "m-dspark,a/m-dspark"));
    registry_free(&r);
}

/* Hugging Face hub cache folders, $DSPARK_MODELS, a missing --models-dir, duplicates. */
TEST(search_path) {
    const char *root = fresh("hub");
    const struct fake snap = {"models--Qwen--Qwen3-4B/snapshots/abc123",
                              "Qwen3ForCausalLM",
                              512,
                              8,
                              2048,
                              1000,
                              0,
                              QWEN_TOK,
                              NULL,
                              "BF16"};
    make(root, &snap);
    const char *other = fresh("env");
    const struct fake d = {
        "Qwen3-4B-dspark", "Qwen3DSparkModel", 512, 1, 2048, 1000, 8, NULL, NULL, "BF16"};
    make(other, &d);
    char env[1200];
    snprintf(env, sizeof env, "%s/nowhere:%s:%s", tmp_root, other, root);
    setenv("DSPARK_MODELS", env, 1);
    struct registry r = {0};
    REQUIRE(registry_scan_default(&r, root) == OK);
    CHECK(index_of(&r, "Qwen/Qwen3-4B") >= 0);
    CHECK(!strcmp(choose(&r, "Qwen/Qwen3-4B", NULL), "dspark Qwen3-4B-dspark"));
    int found = 0; /* root is both --models-dir and in $DSPARK_MODELS: listed once */
    for (int i = 0; i < r.n; i++)
        found += strstr(r.m[i].name, "Qwen3-4B") && r.m[i].kind == REG_CAUSAL_LM;
    CHECK(found == 1);
    CHECK(r.n_roots >= 4 && !strcmp(r.roots[0], root));
    registry_free(&r);
    unsetenv("DSPARK_MODELS");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nowhere", tmp_root);
    int quiet = log_set_errors_quiet(1);
    CHECK(registry_scan_default(&r, missing) == ERR_ARG);
    log_set_errors_quiet(quiet);
    registry_free(&r);
    /* a broken config.json is listed with a note, not an error */
    const char *broken = fresh("broken");
    char dir[700];
    snprintf(dir, sizeof dir, "%s/bad", broken);
    mkdirs(dir);
    write_file(dir, "config.json", "{\"hidden_size\": ", 16);
    REQUIRE(registry_scan(&r, broken) == OK);
    CHECK(r.n == 1 && !r.m[0].servable && *r.m[0].note);
    registry_free(&r);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "%s/dspark_registry_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(stems_ignore_org_quantization_and_drafter_markers);
    RUN(default_family_in_models);
    RUN(published_names);
    RUN(never_4b_with_8b);
    RUN(shapes_must_fit);
    RUN(auto_choice_table);
    RUN(auto_given_and_preferences);
    RUN(search_path);
    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return test_report();
}
