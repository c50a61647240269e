/* registry/registry.h: the local model folders dspark can find, what each one is, and which
 * drafters fit which target. A folder is a model when it holds config.json; folders are found
 * in search-path roots (directly, one level down as in "Qwen/Qwen3-4B", or in a Hugging Face
 * hub cache "models--ORG--NAME/snapshots/REV"). Drafters match a target by name: organisation
 * prefixes, quantization suffixes (-4bit, -MLX, -GGUF, -Q4_K_M, -AWQ, -FP8, ...) and drafter
 * markers (dspark_, -dspark, -dflash, -draft, _block7, -DFlash-b16) are ignored, parameter
 * sizes (4B, 0.6B) must agree, and block drafters must fit the target's shapes. A draft model
 * is a causal LM with the target's tokenizer.json and at most a quarter of its parameters.
 * A struct registry owns its entries; not thread-safe. */
#ifndef DSPARK_REGISTRY_REGISTRY_H
#define DSPARK_REGISTRY_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

enum reg_kind {
    REG_CAUSAL_LM, /* a decoder LM: a target, or a draft model for a larger one */
    REG_DSPARK,    /* Qwen3DSparkModel block drafter */
    REG_DFLASH,    /* DFlashDraftModel block drafter */
};

/* Speculation modes in the order --mode auto prefers them (best last). */
enum reg_mode { REG_MODE_LOOKUP, REG_MODE_DRAFT, REG_MODE_DFLASH, REG_MODE_DSPARK };

struct reg_model {
    char *dir;      /* folder as found (heap) */
    char *real;     /* its realpath, to spot one folder reached twice (heap) */
    char name[256]; /* relative to its root, e.g. "Qwen/Qwen3-4B" */
    char arch[64];  /* architectures[0], else model_type */
    enum reg_kind kind;
    int servable;     /* dspark can load it (architecture, dtype, weights present) */
    char note[160];   /* when not servable: why */
    char dtype[24];   /* "bf16", "f16", "f32", "4-bit", "fp8", ... */
    int64_t n_params; /* counted in the weights, or estimated from config.json (0: unknown) */
    int64_t n_bytes;  /* *.safetensors bytes on disk */
    int vocab_size, hidden_size, n_layers;
    int n_target_layers; /* block drafters: layers of the target they read */
    uint64_t tok_hash;   /* hash of tokenizer.json; 0: none */
    char stem[128];      /* name tokens for matching, e.g. "qwen 3" */
    char sizes[32];      /* parameter-size tokens, e.g. "4b" */
};

struct registry {
    struct reg_model *m;
    int n;
    char **roots; /* folders scanned, in order (heap) */
    int n_roots;
};

/* Scans one root (a missing root adds nothing). Returns OK or ERR_NOMEM. */
int registry_scan(struct registry *r, const char *root);
/* Scans the search path: models_dir (optional; ERR_ARG when given and not a folder), each
 * folder of $DSPARK_MODELS (colon-separated), ./models, then $XDG_CACHE_HOME/dspark/models
 * (~/.cache/dspark/models when XDG_CACHE_HOME is unset). */
int registry_scan_default(struct registry *r, const char *models_dir);
/* Adds one model folder under name (its basename when NULL); *index gets its entry (an
 * existing one when the folder is already known). ERR_IO when dir has no config.json. */
int registry_add(struct registry *r, const char *dir, const char *name, int *index);
/* The entry of folder dir, or -1. */
int registry_find(const struct registry *r, const char *dir);
void registry_free(struct registry *r);

/* The name tokens of a folder name: "deepseek-ai/dspark_qwen3_4b_block7" gives stem "qwen 3"
 * and sizes "4b". */
void registry_stem(const char *name, char *stem, size_t stem_cap, char *sizes, size_t sizes_cap);
/* The mode in which drafter d serves target t (REG_MODE_DRAFT, _DFLASH, _DSPARK), or
 * REG_MODE_LOOKUP when it does not fit. */
enum reg_mode registry_match(const struct reg_model *t, const struct reg_model *d);
/* Entries that serve target t in mode, best first (the DIR-draft/-dspark/-dflash folder next
 * to the target, then a folder of that name elsewhere, loadable ones, then draft models
 * smallest first, then by name). Returns how many (up to cap). */
int registry_drafters(const struct registry *r, int t, enum reg_mode mode, int *out, int cap);

struct reg_choice {
    enum reg_mode mode;
    int drafter; /* entry index, or -1 (lookup) */
};
/* --mode auto: the given drafter (given >= 0) decides by its kind; otherwise the best match:
 * DSpark, then DFlash (unless !block_ok: a backend that cannot run block drafters), then a
 * draft model, then n-gram lookup. ERR_ARG (logged) when the given drafter cannot serve t (a
 * causal LM with another tokenizer, or the target itself). */
int registry_choose(const struct registry *r, int t, int given, int block_ok,
                    struct reg_choice *out);
const char *registry_mode_name(enum reg_mode m); /* "lookup", "draft", "dflash", "dspark" */
const char *registry_kind_name(enum reg_kind k); /* "model", "dspark drafter", ... */

#endif
