/* bench/mkmodel.c: writes a random-weight Qwen3 model folder (config.json + model.safetensors,
 * BF16) for benchmarks. The default shape is Qwen3-0.6B; flags change it. Weights are seeded
 * and scaled like a trained model's (linear layers ~ 1/sqrt(fan_in), norms ~ 1), so a forward
 * pass stays finite. No tokenizer is written: benchmarks feed token ids.
 *
 *   cc -O2 -o build/mkmodel bench/mkmodel.c -lm
 *   build/mkmodel OUT_DIR [--layers N] [--hidden H] [--heads N] [--kv-heads N] [--head-dim D]
 *                 [--ffn I] [--vocab V] [--untied] [--seed S]
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct shape {
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, tied;
    uint64_t seed;
};

struct tensor {
    char name[96];
    int n_dims;
    long long dims[2];
    int kind; /* 0: linear (scale 1/sqrt(fan_in)), 1: norm (~1), 2: embedding */
};

static uint64_t rng;

static uint64_t next_u64(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* Roughly normal (sum of four 16-bit uniforms from one draw, variance 1). */
static float gauss(void) {
    uint64_t r = next_u64();
    float s = (float)((r & 0xffff) + (r >> 16 & 0xffff) + (r >> 32 & 0xffff) + (r >> 48)) +
              2.0f; /* each uniform centred in its step */
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static long long numel(const struct tensor *t) {
    long long n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->dims[i];
    return n;
}

static int add(struct tensor *ts, int n, const char *name, int kind, long long d0, long long d1) {
    struct tensor *t = &ts[n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->n_dims = d1 ? 2 : 1;
    return n + 1;
}

static int list_tensors(const struct shape *s, struct tensor *ts) {
    int n = 0, H = s->hidden, QD = s->heads * s->head_dim, KD = s->kv_heads * s->head_dim;
    char nm[96];
    n = add(ts, n, "model.embed_tokens.weight", 2, s->vocab, H);
    for (int i = 0; i < s->layers; i++) {
#define L(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", i, suffix), nm)
        n = add(ts, n, L("input_layernorm.weight"), 1, H, 0);
        n = add(ts, n, L("self_attn.q_proj.weight"), 0, QD, H);
        n = add(ts, n, L("self_attn.k_proj.weight"), 0, KD, H);
        n = add(ts, n, L("self_attn.v_proj.weight"), 0, KD, H);
        n = add(ts, n, L("self_attn.q_norm.weight"), 1, s->head_dim, 0);
        n = add(ts, n, L("self_attn.k_norm.weight"), 1, s->head_dim, 0);
        n = add(ts, n, L("self_attn.o_proj.weight"), 0, H, QD);
        n = add(ts, n, L("post_attention_layernorm.weight"), 1, H, 0);
        n = add(ts, n, L("mlp.gate_proj.weight"), 0, s->ffn, H);
        n = add(ts, n, L("mlp.up_proj.weight"), 0, s->ffn, H);
        n = add(ts, n, L("mlp.down_proj.weight"), 0, H, s->ffn);
#undef L
    }
    n = add(ts, n, "model.norm.weight", 1, H, 0);
    if (!s->tied) n = add(ts, n, "lm_head.weight", 0, s->vocab, H);
    return n;
}

static int write_config(const char *dir, const struct shape *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n"
            "  \"attention_bias\": false,\n  \"bos_token_id\": 151643,\n"
            "  \"eos_token_id\": 151645,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n"
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"max_position_embeddings\": 40960,\n  \"num_attention_heads\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n"
            "  \"rms_norm_eps\": 1e-06,\n  \"rope_scaling\": null,\n  \"rope_theta\": 1000000,\n"
            "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"bfloat16\",\n"
            "  \"use_sliding_window\": false,\n  \"vocab_size\": %d\n}\n",
            s->head_dim, s->hidden, s->ffn, s->heads, s->layers, s->kv_heads,
            s->tied ? "true" : "false", s->vocab);
    return fclose(f);
}

static int write_weights(const char *dir, const struct shape *s) {
    int max_t = 4 + 11 * s->layers;
    struct tensor *ts = calloc((size_t)max_t, sizeof *ts);
    size_t hcap = (size_t)max_t * 192 + 64;
    char *hdr = malloc(hcap);
    if (!ts || !hdr) return -1;
    int nt = list_tensors(s, ts);
    size_t hl = 0;
    long long off = 0;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < nt; i++) {
        long long bytes = numel(&ts[i]) * 2;
        hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld",
                               ts[i].name, ts[i].dims[0]);
        if (ts[i].n_dims == 2) hl += (size_t)snprintf(hdr + hl, hcap - hl, ",%lld", ts[i].dims[1]);
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "],\"data_offsets\":[%lld,%lld]}", off,
                               off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return -1;
    for (int i = 0; i < nt; i++) {
        long long n = numel(&ts[i]);
        long long fan_in = ts[i].n_dims == 2 ? ts[i].dims[1] : 1;
        float scale = ts[i].kind == 0   ? 1.0f / sqrtf((float)fan_in)
                      : ts[i].kind == 2 ? 0.02f
                                        : 0.05f;
        for (long long done = 0; done < n; done += CHUNK) {
            long long c = n - done < CHUNK ? n - done : CHUNK;
            for (long long j = 0; j < c; j++)
                buf[j] = to_bf16(ts[i].kind == 1 ? 1.0f + scale * gauss() : scale * gauss());
            if (fwrite(buf, 2, (size_t)c, f) != (size_t)c) return -1;
        }
    }
    free(buf);
    free(hdr);
    free(ts);
    printf("%s: %d tensors, %.3f GB of BF16\n", path, nt, (double)off / 1e9);
    return fclose(f);
}

int main(int argc, char **argv) {
    struct shape s = {28, 1024, 16, 8, 128, 3072, 151936, 1, 42};
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *iv = !strcmp(a, "--layers")     ? &s.layers
                  : !strcmp(a, "--hidden")   ? &s.hidden
                  : !strcmp(a, "--heads")    ? &s.heads
                  : !strcmp(a, "--kv-heads") ? &s.kv_heads
                  : !strcmp(a, "--head-dim") ? &s.head_dim
                  : !strcmp(a, "--ffn")      ? &s.ffn
                  : !strcmp(a, "--vocab")    ? &s.vocab
                                             : NULL;
        if (iv && i + 1 < argc) {
            *iv = atoi(argv[++i]);
        } else if (!strcmp(a, "--seed") && i + 1 < argc) {
            s.seed = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--untied")) {
            s.tied = 0;
        } else if (a[0] != '-' && !dir) {
            dir = a;
        } else {
            fprintf(stderr,
                    "usage: %s OUT_DIR [--layers N] [--hidden H] [--heads N] "
                    "[--kv-heads N] [--head-dim D] [--ffn I] [--vocab V] [--untied] "
                    "[--seed S]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!dir || s.layers < 1 || s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 ||
        s.heads % s.kv_heads || s.head_dim < 2 || s.head_dim % 2 || s.ffn < 1 || s.vocab < 1) {
        fprintf(stderr, "%s: need OUT_DIR and a consistent shape\n", argv[0]);
        return 2;
    }
    rng = s.seed * 0x9e3779b97f4a7c15ull + 1;
    if (mkdir(dir, 0755) && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    if (write_config(dir, &s) || write_weights(dir, &s)) {
        fprintf(stderr, "%s: write failed: %s\n", dir, strerror(errno));
        return 1;
    }
    return 0;
}
