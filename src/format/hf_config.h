/* format/hf_config.h: config.json and generation_config.json of a Hugging Face model folder.
 * Supports Qwen3, Qwen2, Llama (incl. rope_scaling "llama3") and Mistral decoder configs,
 * with RoPE written either top-level (rope_theta, rope_scaling) or under rope_parameters.
 * Every field is range-checked; errors name the file and the field. Plain data, no ownership. */
#ifndef DSPARK_FORMAT_HF_CONFIG_H
#define DSPARK_FORMAT_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum arch {
    ARCH_QWEN3,
    ARCH_QWEN2,
    ARCH_LLAMA,
    ARCH_MISTRAL,
    ARCH_DSPARK, /* Qwen3DSparkModel: a block drafter reading the target's hidden states */
    ARCH_DFLASH, /* DFlashDraftModel: likewise, without Markov and confidence heads */
};

#define HF_MAX_TAPS 16

#define HF_MAX_EOS 8

struct hf_config {
    enum arch arch;
    char arch_name[64]; /* architectures[0], e.g. "Qwen3ForCausalLM" */
    int vocab_size;
    int hidden_size;       /* H */
    int intermediate_size; /* FFN width */
    int n_layers;
    int n_heads;        /* query heads */
    int n_kv_heads;     /* key/value heads (GQA: n_heads % n_kv_heads == 0) */
    int head_dim;       /* D */
    int max_pos;        /* max_position_embeddings */
    int sliding_window; /* 0: full attention */
    int tie_embeddings; /* lm_head = embed_tokens */
    int qk_norm;        /* per-head RMSNorm on q and k (Qwen3) */
    float rms_eps;
    float rope_theta;
    /* rope_scaling "llama3" (rope_factor == 0: none) */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_max_pos;
    /* token ids from config.json and generation_config.json (-1: none) */
    int32_t bos_id;
    int32_t eos_ids[HF_MAX_EOS];
    int n_eos;
    /* block drafters (ARCH_DSPARK, ARCH_DFLASH), top-level or under "dflash_config" */
    int block_size;
    int n_target_layers;
    int target_layer_ids[HF_MAX_TAPS];
    int n_target_layer_ids;
    int mask_token_id;
    int markov_rank;            /* 0: no Markov head */
    int confidence_head;        /* enable_confidence_head */
    int confidence_with_markov; /* the confidence head reads [h ; W1[prev]] */
    /* sampling defaults from generation_config.json */
    int do_sample;
    float temperature, top_p;
    int top_k;
};

/* Parses dir/config.json and, when present, dir/generation_config.json. */
int hf_config_load(const char *dir, struct hf_config *out);
/* Parses config.json text (label names it in messages); used by fuzzers and tests. */
int hf_config_parse(const char *json, size_t len, const char *label, struct hf_config *out);
int hf_generation_config_parse(const char *json, size_t len, const char *label,
                               struct hf_config *cfg);
int hf_config_is_eos(const struct hf_config *c, int32_t id);

#endif
