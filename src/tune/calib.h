/* tune/calib.h: calibration for --max-draft auto. What a round costs on this machine (a target
 * pass of 1..max_cap+1 rows, the drafter proposing 1..max_cap tokens, the per-round overhead,
 * and with batching the passes of 2, 4, ... sequences) is measured once, in a few seconds, and
 * cached in a JSON file (default $XDG_CACHE_HOME/dspark/calibration.json, else
 * ~/.cache/dspark/calibration.json). The cache key names everything the costs depend on: the
 * device (CPU model and flags, or the GPU), the backend, this build (a hash of the running
 * executable), the target's and drafter's folders (config.json, and each safetensors file's
 * header, size and modification time), the mode, activations, threads, caps and batch size;
 * any change recalibrates. Measuring runs the models: call it from the thread that owns them. */
#ifndef DSPARK_TUNE_CALIB_H
#define DSPARK_TUNE_CALIB_H

#include "tune/controller.h"

#include <stddef.h>
#include <stdint.h>

struct model;
struct block_model;

#define TUNE_CACHE_SCHEMA  1
#define TUNE_CACHE_ENTRIES 32 /* oldest entries beyond this are dropped */

struct tune_subject {
    struct model *target;
    struct model *draft;       /* mode "draft": the draft model, else NULL */
    struct block_model *block; /* modes "dspark" and "dflash": the block drafter, else NULL */
    const char *mode;          /* "lookup", "draft", "dspark" or "dflash" */
    const char *target_dir;    /* folders, hashed into the key */
    const char *drafter_dir;   /* NULL for lookup */
    int max_cap;               /* price caps 0..max_cap (1..TUNE_MAX_CAP) */
    int max_batch;             /* > 1: also batched passes of up to this many sequences */
    int n_threads;             /* threads the models run on */
    int bf16_activations, gpu;
};

struct tune_calib_opts {
    const char *cache_path; /* NULL: the default path */
    int show_progress;      /* a progress bar on stderr while measuring */
    int force;              /* measure even when the cache has the key */
};

/* The widest cap --max-draft auto considers for a mode: 8 for lookup and draft (a 9-row pass),
 * the block for dspark, the block less its anchor for dflash. */
int tune_default_max_cap(const char *mode, int block_size);

/* Loads the costs from the cache, or measures and stores them. *from_cache (optional) says
 * which. A cache that cannot be read or written is reported and otherwise ignored. */
int tune_calibrate(const struct tune_subject *s, const struct tune_calib_opts *o,
                   struct tune_costs *out, int *from_cache);
/* Measures only (no cache). */
int tune_measure(const struct tune_subject *s, int show_progress, struct tune_costs *out);

/* ---- parts of the measurement (exposed for tests) ---- */

/* The widths a batched sweep measures, into w (B + 1 entries at most), and their count: every
 * one of 1..B+1 (dense), or 1, 2, 4, 8, ... and B+1. */
int tune_grid_widths(int B, int dense, int *w);
/* out[w[0]..w[nw-1]] from the costs c[i] measured at widths w[i] (ascending): linear between
 * the measured widths, exact at them. */
void tune_interpolate(const int *w, const double *c, int nw, double *out);

/* ---- the cache (cache.c) ---- */

/* The default cache path into buf; ERR_ARG when neither XDG_CACHE_HOME nor HOME is set. */
int tune_cache_default_path(char *buf, size_t cap);
/* The key of s (s's models are not used). ERR_ARG when it does not fit in cap. */
int tune_cache_key(const struct tune_subject *s, char *key, size_t cap);
/* A hash of what in a model folder decides its speed: config.json's bytes, and for each
 * *.safetensors file (and the shard index) its name, size, modification time and header. */
int tune_dir_hash(const char *dir, uint64_t *out);
/* OK and *out filled when path holds a valid entry for key with caps 0..max_cap; ERR_IO when
 * there is no such entry (a missing file included); a damaged file or entry is reported. */
int tune_cache_load(const char *path, const char *key, int max_cap, struct tune_costs *out);
/* Adds or replaces key's entry, keeping the others (atomically: a temporary file renamed);
 * creates the folder. */
int tune_cache_store(const char *path, const char *key, const struct tune_costs *c);

#endif
