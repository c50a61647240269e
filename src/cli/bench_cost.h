/* cli/bench_cost.h: forward-pass cost by width for `dspark benchmark --widths N`: what one
 * verify round of k drafts (width k + 1) costs against a plain decode step (width 1), the
 * number that bounds every speculative speedup. Single-threaded use, like the models. */
#ifndef DSPARK_CLI_BENCH_COST_H
#define DSPARK_CLI_BENCH_COST_H

#include <cjson/cJSON.h>

struct model;

/* Times model_forward() of widths 1..max_width after a context of n_ctx synthetic tokens
 * (median of the timed repetitions, the cache trimmed back after each), prints a table and,
 * when json is not NULL, adds {"ctx", "widths": [{"width", "ms", "ratio"}]} to it under name.
 * Returns OK or an error code. */
int bench_cost(struct model *m, const char *name, int n_ctx, int max_width, cJSON *json);

#endif
