/* spec/block_model.h: the backbone shared by the DSpark and DFlash drafters. It reads the
 * target's hidden states: each committed position's tapped layers are fused into a context
 * row, ctx = hidden_norm(fc(taps)), whose keys and values every drafter layer caches once.
 * A block [anchor, mask, ...] then runs through the drafter layers at the next positions,
 * attending to the whole context and to the whole block (no causal mask).
 * On the GPU (when the target runs there) the layers, the context cache, lm_head and a large
 * Markov head live in device memory; the confidence head stays on the host.
 * struct block_model holds weights and the activation scratch, and is shared by the states of
 * one thread (it uses the target's thread pool, which admits one user at a time); struct
 * block_state is one sequence's context cache. The target model must outlive both
 * (embeddings, lm_head and thread pool are the target's unless the checkpoint ships its own
 * embed_tokens/lm_head). Every function gives a sequence's rows bit-identical results
 * whether it runs alone or in a batch (the kernels are batch-invariant). */
#ifndef DSPARK_SPEC_BLOCK_MODEL_H
#define DSPARK_SPEC_BLOCK_MODEL_H

#include "format/hf_config.h"

#include <stdint.h>

#define BLOCK_MAX_BATCH 64 /* states per block_forward_batch() */

struct model;
struct block_model;
struct block_state;

/* Loads dir (config.json with Qwen3DSparkModel or DFlashDraftModel, model.safetensors) to run
 * beside target, checking that the two fit together (hidden size, layers, vocabulary). */
int block_model_load(const char *dir, struct model *target, struct block_model **out);
void block_model_free(struct block_model *bm);
const struct hf_config *block_model_config(const struct block_model *bm);

/* A context cache for up to cap positions (context plus one block). */
int block_state_new(struct block_model *bm, int cap, struct block_state **out);
void block_state_free(struct block_state *st);
void block_state_reset(struct block_state *st);
int block_state_len(const struct block_state *st); /* context rows held */

/* Appends n context rows for the next positions from the target's taps fused[n, n_taps * H].
 * ctx_rows (optional) receives the rows [n, H]. */
int block_ctx_append(struct block_state *st, const float *fused, int n, float *ctx_rows);
/* Runs ids[0..B) at positions len..len+B-1: hidden[B, H] after the final norm; layer_out
 * (optional) [n_layers, B, H] holds the residual after each layer. The context is unchanged. */
int block_forward(struct block_state *st, const int32_t *ids, int B, float *hidden,
                  float *layer_out);
/* block_forward() for n (<= BLOCK_MAX_BATCH) states of one model in one pass: block i is
 * ids[i][0..B) of sts[i], its rows go to hidden[i][B, H]. Each attends only to its own
 * context and block. logits (NULL, or where block_logits_in_forward()): the same pass also
 * gives every row's logits[i][B, V] with the lm_head block_logits() uses. */
int block_forward_batch(struct block_state *const *sts, const int32_t *const *ids, int n, int B,
                        float *const *hidden, float *const *logits);
/* 1 when the drafter runs on the GPU (beside a target there), whose passes bring back the
 * logits of every block row with the hidden rows. */
int block_logits_in_forward(const struct block_model *bm);
/* logits[n, V] from hidden rows, with the drafter's lm_head or the target's. */
void block_logits(struct block_state *st, const float *hidden, int n, float *logits);
/* The same for n sequences in shared passes: logits[i][rows[i], V] from hidden[i][rows[i], H]. */
void block_logits_batch(struct block_model *bm, const float *const *hidden, const int *rows,
                        float *const *logits, int n);
/* DSpark heads: bias[V] = W2 · W1[prev]; the confidence logit w·[h ; W1[prev]] + b. */
void block_markov_bias(struct block_state *st, int32_t prev, float *bias);
void block_markov_bias_batch(struct block_model *bm, const int32_t *prev, int n,
                             float *const *bias); /* bias[i][V] for prev[i] */
float block_confidence_logit(struct block_state *st, const float *h, int32_t prev);
int block_has_markov(const struct block_model *bm);

/* ---- the context as rows, to save it with a prefix-cache entry ----
 * A row is block_ctx_width() floats: position p's keys and values in every layer. Rows depend
 * only on the target's taps and the weights that block_model_fingerprint() covers. */
int block_ctx_width(const struct block_model *bm);
uint64_t block_model_fingerprint(struct block_model *bm); /* 0 only when out of memory */
/* Writes the first n (at most len) positions' rows to rows[n, width]; returns how many. */
int block_ctx_save(const struct block_state *st, float *rows, int n);
/* Makes rows[n, width] the whole context (ERR_FULL beyond the capacity). */
int block_ctx_load(struct block_state *st, const float *rows, int n);
int block_has_confidence(const struct block_model *bm);

#endif
