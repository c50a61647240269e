/* tests/fuzz/fuzz_tokenizer.c: libFuzzer target for the tokenizer loader. The input is the text
 * of a tokenizer.json; when it loads, a few strings are encoded, decoded and streamed back. */
#include "base/log.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const SAMPLES[] = {
    "Hello world, it's 2024!  \n\t<|endoftext|> caf\xc3\xa9 e\xcc\x81 \xe4\xb8\xad\xf0\x9f\xa4\x97",
    "<s>[INST] hi [/INST] <|im_start|>user\n123456789</s>",
    "a\xff\xfe\xc3 \xed\xa0\x80 bb  ",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    log_set_errors_quiet(1);
    log_set_quiet(1);
    struct tokenizer *t = NULL;
    if (tokenizer_load_json((const char *)data, size, NULL, 0, &t) != 0) return 0;
    for (size_t k = 0; k < sizeof SAMPLES / sizeof *SAMPLES; k++) {
        int32_t *ids = NULL;
        int n = 0;
        if (tokenizer_encode(t, SAMPLES[k], strlen(SAMPLES[k]), &ids, &n) != 0) continue;
        char *out = NULL;
        size_t len = 0;
        if (tokenizer_decode(t, ids, n, &out, &len) == 0) free(out);
        struct detok *d = detok_new(t);
        for (int i = 0; d && i < n; i++) {
            const char *s;
            size_t m;
            detok_push(d, ids[i], &s, &m);
        }
        if (d) {
            const char *s;
            size_t m;
            detok_flush(d, &s, &m);
        }
        detok_free(d);
        free(ids);
    }
    tokenizer_find(t, "a");
    tokenizer_free(t);
    return 0;
}
