/* tests/fuzz/fuzz_config.c: libFuzzer target for config.json and generation_config.json. */
#include "base/log.h"
#include "format/hf_config.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    log_set_errors_quiet(1);
    struct hf_config c;
    if (hf_config_parse((const char *)data, size, "fuzz", &c) == 0)
        hf_generation_config_parse((const char *)data, size, "fuzz", &c);
    return 0;
}
