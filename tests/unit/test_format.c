/* tests/unit/test_format.c: safetensors and config.json parsing, above all the refusal of
 * malformed files: each must give an error code, never a crash (ASan runs these too). */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "format/hf_config.h"
#include "format/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Builds a file image: 8-byte length, header, then n_data bytes of data. */
static size_t build(uint8_t *buf, const char *header, size_t n_data) {
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < n_data; i++) buf[8 + n + i] = (uint8_t)i;
    return 8 + n + n_data;
}

static int parse(const char *header, size_t n_data) {
    static uint8_t buf[1 << 16];
    size_t n = build(buf, header, n_data);
    struct st_set *s = NULL;
    int rc = st_parse(buf, n, "test.safetensors", &s);
    st_close(s);
    return rc;
}

TEST(valid_file) {
    static uint8_t buf[4096];
    size_t n = build(buf,
                     "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[28,36]}}",
                     36);
    struct st_set *s;
    REQUIRE(st_parse(buf, n, "t", &s) == OK);
    CHECK(st_count(s) == 3);
    const struct st_tensor *a = st_find(s, "a"), *b = st_find(s, "b"), *i = st_find(s, "i");
    REQUIRE(a && b && i);
    CHECK(a->dtype == DTYPE_F32 && a->n_dims == 1 && a->shape[0] == 4 && a->n_bytes == 16);
    CHECK(b->dtype == DTYPE_BF16 && b->n_dims == 2 && st_numel(b) == 6);
    CHECK((const uint8_t *)b->data - (const uint8_t *)a->data == 16);
    CHECK(!i->dtype_known && strcmp(i->dtype_name, "I64") == 0 && st_numel(i) == 1);
    CHECK(st_find(s, "missing") == NULL);
    st_close(s);
}

TEST(malformed_files) {
    log_set_errors_quiet(1);
    static uint8_t buf[64];
    struct st_set *s = NULL;
    CHECK(st_parse(buf, 5, "t", &s) == ERR_FORMAT); /* shorter than the length field */
    /* header length larger than the file, and an enormous one */
    uint64_t huge[2] = {UINT64_MAX, 0};
    CHECK(st_parse(huge, 16, "t", &s) == ERR_FORMAT);
    uint64_t big[2] = {100, 0};
    CHECK(st_parse(big, 16, "t", &s) == ERR_FORMAT);
    CHECK(parse("not json", 0) == ERR_FORMAT);
    CHECK(parse("[1,2]", 0) == ERR_FORMAT);
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16) ==
          ERR_FORMAT); /* truncated JSON */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8) ==
          ERR_FORMAT); /* data truncated */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,16]}}", 16) ==
          ERR_FORMAT); /* shape disagrees with byte count */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16) ==
          ERR_FORMAT); /* negative dim */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,16]}}", 16) ==
          ERR_FORMAT); /* huge dim */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                "\"data_offsets\":[0,16]}}",
                16) == ERR_FORMAT); /* product overflows */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", 16) ==
          ERR_FORMAT);
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16) ==
          ERR_FORMAT); /* begin > end */
    CHECK(parse("{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16) ==
          ERR_FORMAT); /* unknown dtype */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16) == ERR_FORMAT);
    CHECK(parse("{\"a\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,16]}}", 16) == ERR_FORMAT);
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,4],"
                "\"data_offsets\":[0,16]}}",
                16) == ERR_FORMAT); /* too many dims */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                16) == ERR_FORMAT); /* duplicate name */
    CHECK(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}\xff\xfe", 16) ==
          ERR_FORMAT); /* trailing garbage / invalid UTF-8 */
    log_set_errors_quiet(0);
}

static const char *QWEN3 =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":512,\"hidden_size\":128,"
    "\"intermediate_size\":256,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":32,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000,"
    "\"tie_word_embeddings\":true,\"eos_token_id\":[5,7],\"max_position_embeddings\":4096}";

TEST(config_fields) {
    struct hf_config c;
    REQUIRE(hf_config_parse(QWEN3, strlen(QWEN3), "config.json", &c) == OK);
    CHECK(c.arch == ARCH_QWEN3 && c.qk_norm && c.tie_embeddings);
    CHECK(c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32 && c.n_layers == 2);
    CHECK(c.rope_theta == 1e6f && c.rope_factor == 0);
    CHECK(c.n_eos == 2 && hf_config_is_eos(&c, 7) && !hf_config_is_eos(&c, 6));
    const char *llama =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":100,\"hidden_size\":64,"
        "\"intermediate_size\":96,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"rope_parameters\":{\"rope_theta\":500000.0,\"rope_type\":\"llama3\",\"factor\":8.0,"
        "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":8192}}";
    REQUIRE(hf_config_parse(llama, strlen(llama), "config.json", &c) == OK);
    CHECK(c.arch == ARCH_LLAMA && !c.qk_norm && c.head_dim == 16 && c.n_kv_heads == 4);
    CHECK(c.rope_theta == 500000.0f && c.rope_factor == 8.0f && c.rope_orig_max_pos == 8192);
    const char *gen = "{\"eos_token_id\":9,\"do_sample\":true,\"temperature\":0.6,\"top_k\":20}";
    REQUIRE(hf_generation_config_parse(gen, strlen(gen), "generation_config.json", &c) == OK);
    CHECK(hf_config_is_eos(&c, 9) && c.do_sample && c.top_k == 20);
    CHECK_NEAR(c.temperature, 0.6, 1e-6);
}

TEST(config_malformed) {
    log_set_errors_quiet(1);
    struct hf_config c;
    static const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"architectures\":[\"GPT2LMHeadModel\"]}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"]}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":-5,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":1e30,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":\"64\","
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":3}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":63,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4}",
        "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":10,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
        "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":10,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"hidden_act\":\"gelu\"}",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":64,"
        "\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"eos_token_id\":[1,\"x\"]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(hf_config_parse(bad[i], strlen(bad[i]), "config.json", &c) != OK);
    CHECK(hf_config_parse("{\"a\":\xff}", 7, "config.json", &c) != OK); /* invalid UTF-8 */
    log_set_errors_quiet(0);
}

int main(void) {
    RUN(valid_file);
    RUN(malformed_files);
    RUN(config_fields);
    RUN(config_malformed);
    return test_report();
}
