/* tests/fuzz/fuzz_safetensors.c: libFuzzer target for the safetensors header parser. Any
 * input must parse or fail cleanly; a parsed file's tensors must lie inside the input. */
#include "base/log.h"
#include "format/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    log_set_errors_quiet(1);
    struct st_set *s;
    if (st_parse(data, size, "fuzz", &s) == 0) {
        for (int i = 0; i < st_count(s); i++) {
            const struct st_tensor *t = st_at(s, i);
            const uint8_t *p = t->data;
            if (p < data || p + t->n_bytes > data + size) abort();
            volatile uint8_t x = t->n_bytes ? p[t->n_bytes - 1] : 0;
            (void)x;
        }
        st_close(s);
    }
    return 0;
}
