/* tests/unit/test_tok_units.c: the tokenizer on small hand-written tokenizer.json texts:
 * byte-level and byte-fallback BPE, merge formats, ignore_merges, added tokens and their flags,
 * NFC, invalid UTF-8 input, tokenizer_config.json, the streaming detokenizer over split
 * characters, and malformed files. */
#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* A byte-level tokenizer. Ã© is é (C3 A9) in the GPT-2 byte map; Ġ is the space. */
static const char BL_JSON[] =
    "{\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"added_tokens\":["
    "{\"id\":30,\"content\":\"<|s|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":31,\"content\":\"<|s|>x\",\"special\":true,\"normalized\":false},"
    "{\"id\":32,\"content\":\"[L]\",\"lstrip\":true,\"normalized\":false},"
    "{\"id\":33,\"content\":\"[R]\",\"rstrip\":true,\"normalized\":false},"
    "{\"id\":34,\"content\":\"[W]\",\"single_word\":true,\"normalized\":false},"
    "{\"id\":35,\"content\":\"\xc3\xa9t\xc3\xa9\",\"normalized\":true}],"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,"
    "\"\xc4\xa0\":5,\"\xc4\xa0"
    "a\":6,\"x\":7,\"y\":8,\"xy\":9,\"\xc3\x83\":10,\"\xc2\xa9\":11,"
    "\"\xc3\x83\xc2\xa9\":12,\"t\":13,\"[\":14,\"]\":15,\"L\":16,\"R\":17,\"W\":18},"
    "\"merges\":[[\"a\",\"b\"],\"\xc4\xa0 a\",\"x y\",\"\xc3\x83 \xc2\xa9\"]}}";

/* A byte-fallback tokenizer in the Llama 2 style. */
static const char SPM_JSON[] =
    "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
    "{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
    "\"pre_tokenizer\":null,"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,"
    "\"fuse_unk\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x41>\":2,\"<0xFF>\":3,"
    "\"<0xE4>\":4,\"<0xB8>\":5,\"<0xAD>\":6,\"\xe2\x96\x81\":7,\"h\":8,\"i\":9,\"hi\":10,"
    "\"\xe2\x96\x81hi\":11},"
    "\"merges\":[\"h i\",\"\xe2\x96\x81 hi\"]}}";

static struct tokenizer *load_str(const char *json, const char *config) {
    struct tokenizer *t = NULL;
    int rc = tokenizer_load_json(json, strlen(json), config, config ? strlen(config) : 0, &t);
    return rc == OK ? t : NULL;
}

/* Encodes s and compares with the ids in want (terminated by -1). */
static int enc_is(const struct tokenizer *t, const char *s, size_t n, const int32_t *want) {
    int32_t *ids = NULL;
    int m = 0, ok = tokenizer_encode(t, s, n, &ids, &m) == OK;
    for (int i = 0; ok && i <= m; i++) ok = i == m ? want[i] == -1 : ids[i] == want[i];
    if (!ok) {
        printf("  encoding \"%.*s\" gave", (int)n, s);
        for (int i = 0; i < m; i++) printf(" %d", ids[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

static int round_trips(const struct tokenizer *t, const char *s, size_t n) {
    int32_t *ids = NULL;
    int m = 0;
    char *out = NULL;
    size_t len = 0;
    int ok = tokenizer_encode(t, s, n, &ids, &m) == OK &&
             tokenizer_decode(t, ids, m, &out, &len) == OK && len == n && !memcmp(out, s, n);
    free(ids);
    free(out);
    return ok;
}

#define ENC(t, s, ...) enc_is(t, s, strlen(s), (const int32_t[]){__VA_ARGS__, -1})

TEST(byte_level_merges) {
    struct tokenizer *t = load_str(BL_JSON, NULL);
    REQUIRE(t);
    CHECK(tokenizer_n_vocab(t) == 36);
    CHECK(ENC(t, "abc", 3, 2));      /* "abc" is in the vocab, but no merge makes it */
    CHECK(ENC(t, "ab ab", 3, 5, 3)); /* a+b (rank 0) goes before Ġ+a (rank 1) */
    CHECK(ENC(t, " abab", 5, 3, 3));
    CHECK(ENC(t, " a", 6));
    CHECK(ENC(t, "xy", 9));
    CHECK(ENC(t, "\xc3\xa9", 12)); /* é */
    CHECK(ENC(t,
              "e\xcc\x81"
              "a",
              12, 0)); /* NFC first */
    CHECK(round_trips(t, "ab xy abc", 9));
    CHECK(tokenizer_find(t, "ab") == 3);
    CHECK(tokenizer_find(t, "<|s|>") == 30);
    CHECK(tokenizer_find(t, "nope") == -1);
    CHECK(tokenizer_bos_id(t) == -1 && tokenizer_eos_id(t) == -1);
    tokenizer_free(t);
}

TEST(ignore_merges) {
    /* The same vocabulary with ignore_merges: a pre-token that is a whole token is kept. */
    const char *at = strstr(BL_JSON, "\"type\":\"BPE\"");
    REQUIRE(at);
    size_t cut = (size_t)(at - BL_JSON) + strlen("\"type\":\"BPE\"");
    char *json = malloc(sizeof BL_JSON + 32);
    REQUIRE(json);
    memcpy(json, BL_JSON, cut);
    strcpy(json + cut, ",\"ignore_merges\":true");
    strcat(json, BL_JSON + cut);
    struct tokenizer *t = load_str(json, NULL);
    REQUIRE(t);
    CHECK(ENC(t, "abc", 4));
    CHECK(ENC(t, "abcabc", 3, 2, 3, 2)); /* not a token as a whole: merges as usual */
    tokenizer_free(t);
    free(json);
}

TEST(added_tokens) {
    struct tokenizer *t = load_str(BL_JSON, NULL);
    REQUIRE(t);
    CHECK(ENC(t, "a<|s|>b", 0, 30, 1));
    CHECK(ENC(t, "<|s|>xy", 31, 8));    /* longest match wins */
    CHECK(ENC(t, "a  [L]b", 0, 32, 1)); /* lstrip eats the spaces before */
    CHECK(ENC(t, "a[R]  b", 0, 33, 1)); /* rstrip eats the spaces after */
    CHECK(ENC(t, "a [W] b", 0, 5, 34, 5, 1));
    CHECK(ENC(t, "a[W]b", 0, 14, 18, 15, 1)); /* single_word: not inside a word */
    /* A normalized added token matches the NFC form of NFD input. */
    CHECK(ENC(t, "e\xcc\x81te\xcc\x81", 35));
    CHECK(ENC(t, "\xc3\xa9t\xc3\xa9", 35));
    char *out = NULL;
    size_t len = 0;
    int32_t ids[] = {30, 0, 31};
    CHECK(tokenizer_decode(t, ids, 3, &out, &len) == OK && len == 12 &&
          !memcmp(out, "<|s|>a<|s|>x", 12));
    free(out);
    CHECK(tokenizer_is_special(t, 30) && !tokenizer_is_special(t, 32));
    int32_t bad = 36;
    log_set_errors_quiet(1);
    CHECK(tokenizer_decode(t, &bad, 1, &out, &len) == ERR_ARG);
    log_set_errors_quiet(0);
    tokenizer_free(t);
}

TEST(byte_level_invalid_utf8) {
    struct tokenizer *t = load_str(BL_JSON, NULL);
    REQUIRE(t);
    /* Only the bytes in the vocab survive here; with a full byte alphabet (tiny_bpe) every byte
     * round-trips, which the golden-free check below covers. */
    CHECK(ENC(t,
              "a\xff"
              "b",
              0, 1));
    tokenizer_free(t);
    int rc = tokenizer_load("tests/data/tokenizer/tiny_bpe", &t);
    REQUIRE(rc == OK); /* REQUIRE evaluates its argument twice: no calls inside */
    const char bytes[] = "a\xff\xfe b\xc3 \xe4\xb8 \xed\xa0\x80 \xf4\x90\x80\x80 \x80x\xc0\xaf";
    CHECK(round_trips(t, bytes, sizeof bytes - 1));
    CHECK(round_trips(t, "\0a\0", 3));
    tokenizer_free(t);
}

TEST(spm_byte_fallback) {
    struct tokenizer *t = load_str(SPM_JSON, NULL);
    REQUIRE(t);
    CHECK(ENC(t, "hi", 11));
    CHECK(ENC(t, "hi hi", 11, 11));
    CHECK(ENC(t, "A", 7, 2));                  /* A only as a byte token */
    CHECK(ENC(t, "\xe4\xb8\xad", 7, 4, 5, 6)); /* 中 as three byte tokens */
    CHECK(ENC(t, "Z", 7, 0));                  /* no byte token for Z: unknown */
    CHECK(ENC(t, "ZZ", 7, 0));                 /* fuse_unk */
    CHECK(ENC(t, "<s>hi", 1, 11));
    /* Invalid UTF-8: each bad byte is its own unit; 0xFF has a byte token. */
    CHECK(ENC(t, "hi\xff", 11, 3));
    CHECK(round_trips(t, "hi\xff", 3));
    CHECK(round_trips(t, "hi A \xe4\xb8\xad", 8));
    CHECK(round_trips(t, " hi", 3));
    char *out = NULL;
    size_t len = 0;
    int32_t ids[] = {1, 11, 11};
    CHECK(tokenizer_decode(t, ids, 3, &out, &len) == OK && !strcmp(out, "<s> hi hi"));
    free(out);
    tokenizer_free(t);
}

TEST(config_tokens) {
    struct tokenizer *t = load_str(SPM_JSON, "{\"bos_token\":\"<s>\",\"eos_token\":"
                                             "{\"content\":\"</s>\"},\"added_tokens_decoder\":{"
                                             "\"12\":{\"content\":\"</s>\",\"special\":true}}}");
    REQUIRE(t);
    CHECK(tokenizer_bos_id(t) == 1);
    CHECK(tokenizer_eos_id(t) == 12);
    CHECK(tokenizer_n_vocab(t) == 13);
    CHECK(ENC(t, "hi</s>", 11, 12));
    tokenizer_free(t);
}

/* ---- streaming ---- */

static int pushes(struct detok *d, int32_t id, const char *want) {
    const char *s;
    size_t n;
    if (detok_push(d, id, &s, &n) != OK) return 0;
    int ok = n == strlen(want) && !memcmp(s, want, n);
    if (!ok) printf("  detok gave \"%.*s\", want \"%s\"\n", (int)n, s, want);
    return ok;
}

TEST(detok_split_characters) {
    struct tokenizer *t = NULL;
    int rc = tokenizer_load("tests/data/tokenizer/tiny_bpe", &t);
    REQUIRE(rc == OK);
    /* 中 is E4 B8 AD: the tiny vocab has ä¸Ń (E4 B8 AD) but 文 (E6 96 87) is byte by byte. */
    int32_t *ids = NULL;
    int n = 0;
    rc = tokenizer_encode(t, "\xe6\x96\x87\xf0\x9f\xa4\x97!", 8, &ids, &n);
    REQUIRE(rc == OK);
    REQUIRE(n == 8);
    struct detok *d = detok_new(t);
    REQUIRE(d);
    CHECK(pushes(d, ids[0], ""));
    CHECK(pushes(d, ids[1], ""));
    CHECK(pushes(d, ids[2], "\xe6\x96\x87"));
    CHECK(pushes(d, ids[3], ""));
    CHECK(pushes(d, ids[4], ""));
    CHECK(pushes(d, ids[5], ""));
    CHECK(pushes(d, ids[6], "\xf0\x9f\xa4\x97"));
    CHECK(pushes(d, ids[7], "!"));
    /* An incomplete character at the end of the stream becomes U+FFFD. */
    CHECK(pushes(d, ids[3], ""));
    const char *s;
    size_t len;
    CHECK(detok_flush(d, &s, &len) == OK && len == 3 && !memcmp(s, "\xef\xbf\xbd", 3));
    /* A lead byte followed by a character that cannot continue it. */
    CHECK(pushes(d, ids[3], ""));
    CHECK(pushes(d, ids[7], "\xef\xbf\xbd!"));
    CHECK(detok_flush(d, &s, &len) == OK && len == 0);
    log_set_errors_quiet(1);
    CHECK(detok_push(d, tokenizer_n_vocab(t), &s, &len) == ERR_ARG);
    log_set_errors_quiet(0);
    detok_free(d);
    detok_free(NULL);
    free(ids);
    tokenizer_free(t);
}

TEST(detok_strip_and_specials) {
    struct tokenizer *t = load_str(SPM_JSON, NULL);
    REQUIRE(t);
    struct detok *d = detok_new(t);
    REQUIRE(d);
    CHECK(pushes(d, 11, "hi")); /* the leading space of the stream is stripped */
    CHECK(pushes(d, 11, " hi"));
    CHECK(pushes(d, 1, "<s>"));
    CHECK(pushes(d, 4, ""));
    CHECK(pushes(d, 5, ""));
    CHECK(pushes(d, 6, "\xe4\xb8\xad"));
    const char *s;
    size_t len;
    CHECK(detok_flush(d, &s, &len) == OK && len == 0);
    CHECK(pushes(d, 7, "")); /* a new stream: its first space is stripped again */
    CHECK(pushes(d, 11, " hi"));
    detok_free(d);
    tokenizer_free(t);
}

/* ---- malformed files ---- */

static int load_fails(const char *json, size_t n, int want) {
    struct tokenizer *t = NULL;
    int rc = tokenizer_load_json(json, n, NULL, 0, &t);
    tokenizer_free(t);
    if (rc != want) printf("  got %d (want %d) for %.80s\n", rc, want, json);
    return rc == want && !t;
}

#define BAD(json) load_fails(json, strlen(json), ERR_FORMAT)

TEST(malformed) {
    log_set_errors_quiet(1);
    CHECK(BAD(""));
    CHECK(BAD("[]"));
    CHECK(BAD("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}"));
    CHECK(BAD("{}"));
    CHECK(BAD("{\"model\":5}"));
    CHECK(BAD("{\"model\":{\"vocab\":[],\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":\"0\"},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0.5},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":99999999999},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":1000000},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"ab\":1},\"merges\":[\"a b\"]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[\"a a a\"]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[\"aa\"]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[[\"a\"]]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[[\"a\",1]]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":{}}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[],\"byte_fallback\":1}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":{}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":0,"
              "\"content\":\"b\"}]}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1,"
              "\"content\":\"a\"}]}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1,"
              "\"content\":\"b\"},{\"id\":2,\"content\":\"b\"}]}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1,"
              "\"content\":\"b\",\"special\":\"yes\"}]}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\\ud800\":0},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\xff\":0},\"merges\":[]}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":"
              "\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":"
              "\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":[]}"));
    CHECK(BAD("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"Strip\"}}"));
    CHECK(load_fails("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":"
                     "\"Precompiled\"}}",
                     75, ERR_UNSUPPORTED));
    CHECK(load_fails("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", 39, ERR_UNSUPPORTED));
    /* Every prefix of a real file fails cleanly. */
    char *text = NULL;
    size_t n = 0;
    int rc = fs_read_file("tests/data/tokenizer/tiny_bpe/tokenizer.json", &text, &n, 1 << 20);
    REQUIRE(rc == OK);
    int all = 1;
    for (size_t k = 0; k + 2 < n; k += 7) all &= load_fails(text, k, ERR_FORMAT);
    CHECK(all);
    free(text);
    struct tokenizer *t = NULL;
    CHECK(tokenizer_load("tests/data/tokenizer/no_such_dir", &t) == ERR_IO && !t);
    CHECK(tokenizer_load_json(BL_JSON, strlen(BL_JSON), "{", 1, &t) == ERR_FORMAT && !t);
    log_set_errors_quiet(0);
    tokenizer_free(NULL);
}

/* A crafted normalizer that doubles the text at each step is stopped, not run out of memory. */
TEST(runaway_growth) {
    char json[4096];
    size_t k = (size_t)snprintf(json, sizeof json,
                                "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},"
                                "\"normalizer\":{\"type\":\"Sequence\","
                                "\"normalizers\":[");
    for (int i = 0; i < 30; i++)
        k += (size_t)snprintf(json + k, sizeof json - k,
                              "%s{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},"
                              "\"content\":\"aa\"}",
                              i ? "," : "");
    snprintf(json + k, sizeof json - k, "]}}");
    struct tokenizer *t = load_str(json, NULL);
    REQUIRE(t);
    int32_t *ids = NULL;
    int n = 0;
    log_set_errors_quiet(1);
    CHECK(tokenizer_encode(t, "aaaa", 4, &ids, &n) == ERR_UNSUPPORTED && !ids);
    CHECK(tokenizer_encode(t, "b", 1, &ids, &n) == OK && n == 0);
    free(ids);
    tokenizer_free(t);
    /* More steps than any real file has. */
    k = (size_t)snprintf(json, sizeof json,
                         "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},"
                         "\"pre_tokenizer\":{\"type\":\"Sequence\","
                         "\"pretokenizers\":[");
    for (int i = 0; i < 40; i++)
        k +=
            (size_t)snprintf(json + k, sizeof json - k, "%s{\"type\":\"ByteLevel\"}", i ? "," : "");
    snprintf(json + k, sizeof json - k, "]}}");
    CHECK(load_fails(json, strlen(json), ERR_UNSUPPORTED));
    log_set_errors_quiet(0);
}

int main(void) {
    log_set_quiet(1);
    RUN(byte_level_merges);
    RUN(ignore_merges);
    RUN(added_tokens);
    RUN(byte_level_invalid_utf8);
    RUN(spm_byte_fallback);
    RUN(config_tokens);
    RUN(detok_split_characters);
    RUN(detok_strip_and_specials);
    RUN(malformed);
    RUN(runaway_growth);
    return test_report();
}
