/* tests/fuzz/fuzz_spill.c: libFuzzer target for the prefix cache's spill files. The input is
 * a file: a 96-byte header, token ids, then the compressed payload. So that mutations get past
 * the checksums to the parsing behind them, the harness first makes the header agree with the
 * model and the file (magic, version, fingerprint, geometry, sizes, the three xxhash64 sums;
 * the token count is taken modulo 64, 0 as 1; the drafter context's width modulo 17, its tag
 * set when the width is not 0), then lets the spill folder index the file, match its tokens
 * (asking for that context) and load it into a KV cache of tests/data/golden/qwen3_f32 and a
 * context buffer. Run from the repository root. */
#include "base/log.h"
#include "cache/spill.h"
#include "model/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define HDR     96 /* the header's size; field offsets as in src/cache/spill.c */
#define MAX_CTX 16 /* context floats per position */
#define CTX_TAG 0x5eedull

static struct model *m;
static struct kv_cache *kv;
static struct spill_geometry g;
static char dir[64], sub[96];
static float ctx[64 * MAX_CTX];

static void put32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    log_set_errors_quiet(1);
    if (model_load("tests/data/golden/qwen3_f32", &(struct model_opts){.n_threads = 1}, &m) ||
        kv_new(m, 64, &kv)) {
        fprintf(stderr, "fuzz_spill: run from the repository root (tests/data/golden/qwen3_f32)\n");
        exit(1);
    }
    const struct hf_config *c = model_config(m);
    g = (struct spill_geometry){c->n_layers, c->n_kv_heads, c->head_dim};
    snprintf(dir, sizeof dir, "/tmp/dspark-fuzz-spill-%d", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HDR) return 0;
    uint8_t *f = malloc(size);
    if (!f) return 0;
    memcpy(f, data, size);
    uint32_t n;
    memcpy(&n, f + 24, 4);
    n = n % 64 ? n % 64 : 1;
    uint32_t width;
    memcpy(&width, f + 44, 4);
    width %= MAX_CTX + 1;
    size_t row = 2 * sizeof(float) * (size_t)g.n_layers * (size_t)g.n_kv_heads * g.head_dim;
    if (size < HDR + 4 * (size_t)n) n = (uint32_t)((size - HDR) / 4);
    if (!n) {
        free(f);
        return 0;
    }
    const uint64_t fp = 0x0123456789abcdefull;
    memcpy(f, "DSPKKV\r\n", 8);
    put32(f + 8, 1), put32(f + 12, HDR), put64(f + 16, fp), put32(f + 24, n);
    put32(f + 28, (uint32_t)g.n_layers), put32(f + 32, (uint32_t)g.n_kv_heads);
    put32(f + 36, (uint32_t)g.head_dim), put32(f + 40, 0);
    put32(f + 44, width), put64(f + 48, width ? CTX_TAG : 0);
    int32_t *tok = (int32_t *)(void *)(f + HDR); /* malloc'd: aligned */
    for (uint32_t i = 0; i < n; i++) tok[i] = (int32_t)((uint32_t)tok[i] % 512);
    size_t comp = size - HDR - 4 * (size_t)n;
    put64(f + 56, (uint64_t)n * (row + 4 * width)), put64(f + 64, comp);
    put64(f + 72, XXH64(tok, 4 * (size_t)n, 0));
    put64(f + 80, XXH64(f + HDR + 4 * (size_t)n, comp, 0));
    put64(f + 88, XXH64(f, 88, 0));
    uint64_t th;
    memcpy(&th, f + 72, 8);
    char path[192];
    snprintf(sub, sizeof sub, "%s/%016llx", dir, (unsigned long long)fp);
    mkdir(dir, 0700), mkdir(sub, 0700);
    snprintf(path, sizeof path, "%s/%016llx.kv", sub, (unsigned long long)th);
    FILE *out = fopen(path, "wb");
    if (out) {
        fwrite(f, 1, size, out);
        fclose(out);
        struct spill *sp;
        if (!spill_open(dir, fp, &g, 0, &sp)) {
            struct spill_hit hit;
            spill_match_ctx(sp, tok, (int)n, 64, width ? CTX_TAG : 0, &hit);
            kv_truncate(kv, 0);
            if (hit.n > 0) (void)spill_load_ctx(sp, &hit, tok, kv, ctx, (int)width);
            spill_close(sp);
        }
        unlink(path);
    }
    free(f);
    return 0;
}
