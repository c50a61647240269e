/* tests/fuzz/fuzz_tune_cache.c: libFuzzer target for the calibration cache file
 * (tune_cache_load): the input is the file; the entry looked up is the one the seed corpus
 * holds, so mutations of a real entry reach the field checks. */
#include "base/err.h"
#include "base/log.h"
#include "tune/calib.h"
#include "tune/controller.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define KEY "v1|k"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dspark-fuzz-tune-%d.json", (int)getpid());
    log_set_errors_quiet(1);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct tune_costs c;
    for (int max_cap = 1; max_cap <= 8; max_cap *= 2)
        if (tune_cache_load(path, KEY, max_cap, &c) == OK) {
            /* an accepted entry must be usable as it is */
            for (int k = 0; k <= c.max_cap; k++) (void)tune_round_seconds(&c, k, 1 + k % 3, k & 1);
        }
    return 0;
}
