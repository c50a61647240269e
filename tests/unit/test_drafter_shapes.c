/* tests/unit/test_drafter_shapes.c: drafters laid out like the published checkpoints
 * (deepseek-ai/dspark_qwen3_4b_block7: Qwen3DSparkModel, 5 layers, taps [1, 9, 17, 25, 33],
 * embed_tokens/lm_head copies, Markov and confidence heads; z-lab/Qwen3-4B-DFlash-b16:
 * DFlashDraftModel, dflash_config, no embedding or head) at reduced width, with random
 * weights written here, beside a 36-layer random Qwen3 target. They must load, draft and
 * leave greedy output unchanged; a drafter for another target must be refused. */
#include "test.h"

#include "base/log.h"
#include "engine/generate.h"
#include "model/model.h"
#include "spec/block_model.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { H = 64, L = 36, NH = 4, NKV = 2, HD = 16, FF = 96, V = 320, R = 16 };

struct tw { /* tensors to write: names and shapes, data generated from a seed */
    char name[96];
    int rows, cols; /* cols 0: a vector */
    float scale, mean;
};

static struct tw list[512];
static int n_list;

static void add(const char *name, int rows, int cols, float mean) {
    struct tw *t = &list[n_list++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols, t->mean = mean;
    t->scale = cols ? 1.0f / sqrtf((float)cols) : 0.1f;
}

static void add_layers(const char *prefix, int n) {
    char b[96];
    static const struct {
        const char *name;
        int rows, cols;
    } w[] = {{"self_attn.q_proj.weight", NH * HD, H},  {"self_attn.k_proj.weight", NKV * HD, H},
             {"self_attn.v_proj.weight", NKV * HD, H}, {"self_attn.o_proj.weight", H, NH * HD},
             {"mlp.gate_proj.weight", FF, H},          {"mlp.up_proj.weight", FF, H},
             {"mlp.down_proj.weight", H, FF}};
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < sizeof w / sizeof w[0]; j++) {
            snprintf(b, sizeof b, "%s.%d.%s", prefix, i, w[j].name);
            add(b, w[j].rows, w[j].cols, 0);
        }
        snprintf(b, sizeof b, "%s.%d.self_attn.q_norm.weight", prefix, i), add(b, HD, 0, 1);
        snprintf(b, sizeof b, "%s.%d.self_attn.k_norm.weight", prefix, i), add(b, HD, 0, 1);
        snprintf(b, sizeof b, "%s.%d.input_layernorm.weight", prefix, i), add(b, H, 0, 1);
        snprintf(b, sizeof b, "%s.%d.post_attention_layernorm.weight", prefix, i), add(b, H, 0, 1);
    }
}

/* Writes list[] as BF16 safetensors with seeded pseudo-random values. */
static int write_st(const char *path, uint64_t seed) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    char *hdr = malloc(1 << 20);
    size_t n = 0, off = 0;
    n += (size_t)sprintf(hdr + n, "{");
    for (int i = 0; i < n_list; i++) {
        const struct tw *t = &list[i];
        size_t bytes = (size_t)t->rows * (t->cols ? t->cols : 1) * 2;
        if (t->cols)
            n += (size_t)sprintf(hdr + n, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],",
                                 i ? "," : "", t->name, t->rows, t->cols);
        else
            n += (size_t)sprintf(hdr + n, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],",
                                 i ? "," : "", t->name, t->rows);
        n += (size_t)sprintf(hdr + n, "\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    n += (size_t)sprintf(hdr + n, "}");
    uint64_t hl = n;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, n, f);
    free(hdr);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n_list; i++) {
        const struct tw *t = &list[i];
        size_t cnt = (size_t)t->rows * (t->cols ? t->cols : 1);
        for (size_t j = 0; j < cnt; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float u = (float)((x >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; /* [-1, 1) */
            uint16_t b = f32_to_bf16(t->mean + 1.7f * t->scale * u);
            fwrite(&b, 2, 1, f);
        }
    }
    return fclose(f);
}

static const char *QWEN3_KEYS =
    "\"hidden_size\":64,\"intermediate_size\":96,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":16,\"vocab_size\":320,\"rms_norm_eps\":1e-6,"
    "\"rope_theta\":1000000,\"max_position_embeddings\":512,\"hidden_act\":\"silu\","
    "\"model_type\":\"qwen3\",\"attention_bias\":false,\"bos_token_id\":null,"
    "\"eos_token_id\":null";

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static char dir[256];

static int make_folders(void) {
    char p[512], cfg[4096];
    snprintf(dir, sizeof dir, "/tmp/dspark-shapes-%d", (int)getpid());
    snprintf(p, sizeof p, "%s/target", dir), mkdir(dir, 0700), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/dspark", dir), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/dflash", dir), mkdir(p, 0700);
    /* target: 36 layers, tied embeddings */
    n_list = 0;
    add("model.embed_tokens.weight", V, H, 0);
    add("model.norm.weight", H, 0, 1);
    add_layers("model.layers", L);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3ForCausalLM\"],%s,\"num_hidden_layers\":36,"
             "\"tie_word_embeddings\":true}",
             QWEN3_KEYS);
    snprintf(p, sizeof p, "%s/target/config.json", dir);
    if (write_file(p, cfg)) return -1;
    snprintf(p, sizeof p, "%s/target/model.safetensors", dir);
    if (write_st(p, 1)) return -1;
    /* DSpark, the DeepSpec layout */
    n_list = 0;
    add("embed_tokens.weight", V, H, 0);
    add("lm_head.weight", V, H, 0);
    add("fc.weight", H, 5 * H, 0);
    add("hidden_norm.weight", H, 0, 1);
    add("norm.weight", H, 0, 1);
    add_layers("layers", 5);
    add("markov_head.markov_w1.weight", V, R, 0);
    add("markov_head.markov_w2.weight", V, R, 0);
    add("confidence_head.proj.weight", 1, H + R, 0);
    add("confidence_head.proj.bias", 1, 0, 0);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3DSparkModel\"],%s,\"num_hidden_layers\":5,"
             "\"num_target_layers\":36,\"block_size\":7,\"target_layer_ids\":[1,9,17,25,33],"
             "\"mask_token_id\":319,\"num_anchors\":512,\"layer_types\":[\"full_attention\","
             "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\"],"
             "\"tie_word_embeddings\":false,\"enable_confidence_head\":true,"
             "\"confidence_head_with_markov\":true,\"markov_rank\":16,"
             "\"markov_head_type\":\"vanilla\"}",
             QWEN3_KEYS);
    snprintf(p, sizeof p, "%s/dspark/config.json", dir);
    if (write_file(p, cfg)) return -1;
    snprintf(p, sizeof p, "%s/dspark/model.safetensors", dir);
    if (write_st(p, 2)) return -1;
    /* DFlash, the z-lab layout: no embedding, no head, keys under dflash_config */
    n_list = 0;
    add("fc.weight", H, 5 * H, 0);
    add("hidden_norm.weight", H, 0, 1);
    add("norm.weight", H, 0, 1);
    add_layers("layers", 5);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"DFlashDraftModel\"],%s,\"num_hidden_layers\":5,"
             "\"num_target_layers\":36,\"block_size\":16,\"auto_map\":{\"AutoModel\":"
             "\"dflash.DFlashDraftModel\"},\"dflash_config\":{\"mask_token_id\":319,"
             "\"target_layer_ids\":[1,9,17,25,33]}}",
             QWEN3_KEYS);
    snprintf(p, sizeof p, "%s/dflash/config.json", dir);
    if (write_file(p, cfg)) return -1;
    snprintf(p, sizeof p, "%s/dflash/model.safetensors", dir);
    return write_st(p, 3);
}

static void cleanup(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("  could not remove %s\n", dir);
}

TEST(published_layouts_load_and_run) {
    REQUIRE(make_folders() == 0);
    char p[512];
    struct model *t;
    snprintf(p, sizeof p, "%s/target", dir);
    REQUIRE(model_load(p, &(struct model_opts){.n_threads = 2}, &t) == 0);
    struct block_model *ds, *df;
    snprintf(p, sizeof p, "%s/dspark", dir);
    REQUIRE(block_model_load(p, t, &ds) == 0);
    const struct hf_config *c = block_model_config(ds);
    CHECK(c->arch == ARCH_DSPARK && c->n_layers == 5 && c->block_size == 7);
    CHECK(c->n_target_layer_ids == 5 && c->target_layer_ids[4] == 33 && c->markov_rank == 16);
    CHECK(block_has_markov(ds) && block_has_confidence(ds));
    snprintf(p, sizeof p, "%s/dflash", dir);
    REQUIRE(block_model_load(p, t, &df) == 0);
    c = block_model_config(df);
    CHECK(c->arch == ARCH_DFLASH && c->block_size == 16 && c->mask_token_id == 319);
    CHECK(c->n_target_layer_ids == 5 && c->target_layer_ids[0] == 1);
    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (i * 37 + 5) % 300;
    struct gen_params base = {.max_tokens = 40, .ignore_eos = 1, .top_logprobs = -1};
    struct gen_engine e = {.target = t};
    struct gen_result ref, r;
    REQUIRE(gen_run(&e, prompt, 24, &base, NULL, NULL, &ref) == 0);
    for (int m = 0; m < 2; m++) {
        struct gen_engine es = {.target = t, .block = m ? df : ds};
        struct gen_params gp = base;
        gp.mode = m ? GEN_DFLASH : GEN_DSPARK;
        gp.confidence_threshold = m ? 0 : 0.3f;
        REQUIRE(gen_run(&es, prompt, 24, &gp, NULL, NULL, &r) == 0);
        CHECK(r.n_ids == ref.n_ids && !memcmp(r.ids, ref.ids, sizeof(int32_t) * 40));
        CHECK(r.stats.rounds > 0 && r.stats.drafted > 0); /* the drafter did propose */
        gen_result_free(&r);
    }
    gen_result_free(&ref);
    /* a drafter for another target is refused with a message, not run */
    struct model *other;
    struct block_model *bad = NULL;
    REQUIRE(model_load("tests/data/golden/qwen3_f32", &(struct model_opts){.n_threads = 1},
                       &other) == 0);
    log_set_errors_quiet(1);
    CHECK(block_model_load(p, other, &bad) != 0 && bad == NULL);
    snprintf(p, sizeof p, "%s/target", dir);
    CHECK(block_model_load(p, t, &bad) != 0); /* a target is not a drafter */
    log_set_errors_quiet(0);
    model_free(other);
    block_model_free(ds), block_model_free(df);
    model_free(t);
    cleanup();
}

int main(void) {
    RUN(published_layouts_load_and_run);
    return test_report();
}
