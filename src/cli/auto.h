/* cli/auto.h: --mode auto for generate, serve and benchmark: the registry's choice of
 * speculation for a target folder, logged on stderr. */
#ifndef DSPARK_CLI_AUTO_H
#define DSPARK_CLI_AUTO_H

#include "engine/generate.h"

#include <stddef.h>

/* Picks the mode for the target model_dir from the model search path (registry.h) and the
 * target's own parent folder: a given drafter (drafter, else NULL) decides by its kind, else a
 * DSpark drafter, a DFlash drafter, a draft model, or n-gram lookup (the same on the CPU and
 * the GPU, where every drafter runs beside the target). Logs
 * "mode auto: dspark (drafter models/pycoder-dspark)". *drafter_out is the drafter folder
 * (copied into buf of cap bytes), or NULL for lookup. Returns 0, or 2 (the exit code) after
 * printing what is wrong. */
int cli_mode_auto(const char *model_dir, const char *drafter, enum gen_mode *mode, char *buf,
                  size_t cap, const char **drafter_out);

#endif
