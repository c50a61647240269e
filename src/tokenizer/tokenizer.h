/* tokenizer/tokenizer.h: Hugging Face tokenizer.json tokenizers (BPE: byte-level as in GPT-2,
 * Qwen and Llama 3, or SentencePiece-style with byte fallback as in Llama 2 and Mistral).
 * A struct tokenizer is immutable after loading: encode, decode and detok_new may be called
 * from many threads at once. A struct detok is one stream's state and belongs to one thread.
 * Arrays and strings returned through out parameters are heap copies the caller frees with
 * free(), except detok text, which stays valid until the next call on that detok. */
#ifndef DSPARK_TOKENIZER_TOKENIZER_H
#define DSPARK_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct detok;

/* Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json (added tokens, BOS and
 * EOS). Logs the file and the problem on error: ERR_IO, ERR_FORMAT, ERR_UNSUPPORTED, ERR_NOMEM. */
int tokenizer_load(const char *dir, struct tokenizer **out);
/* The same from memory: json is tokenizer.json's text (len bytes, no NUL needed); config is
 * tokenizer_config.json's text or NULL. */
int tokenizer_load_json(const char *json, size_t len, const char *config, size_t config_len,
                        struct tokenizer **out);
void tokenizer_free(struct tokenizer *t); /* NULL is a no-op */

/* Number of ids: one more than the largest id of the vocabulary and the added tokens. */
int tokenizer_n_vocab(const struct tokenizer *t);

/* Encodes len bytes of text without adding BOS/EOS. Added and special tokens written in the
 * text are matched. Bytes that are not valid UTF-8 are kept as single-byte units: byte-level
 * models encode them as their bytes, byte-fallback models as <0xNN> tokens, and other models
 * as the unknown token (or drop them when the model has none). *ids is a heap array. */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int32_t **ids,
                     int *n_ids);
/* Decodes ids to the raw bytes the tokens stand for (NUL-terminated heap copy, len excludes the
 * NUL). Special tokens decode to their text. An id outside [0, n_vocab) gives ERR_ARG. */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, char **out, size_t *len);

int32_t tokenizer_find(const struct tokenizer *t, const char *token_text); /* id or -1 */
/* The token text of id (not decoded: "Ġthe", "<0x0A>"), or NULL for an unknown id. */
const char *tokenizer_token(const struct tokenizer *t, int32_t id, size_t *len);
int tokenizer_is_special(const struct tokenizer *t, int32_t id);
int32_t tokenizer_bos_id(const struct tokenizer *t); /* from tokenizer_config.json; -1 if none */
int32_t tokenizer_eos_id(const struct tokenizer *t);

/* Streaming detokenizer: push ids one at a time and get back only the text completed so far,
 * always whole UTF-8 characters. Bytes that can never form a valid character are replaced by
 * U+FFFD, so the stream is valid UTF-8. O(1) work per token besides the token's own bytes. */
struct detok *detok_new(const struct tokenizer *t); /* NULL when out of memory */
void detok_free(struct detok *d);                   /* NULL is a no-op */
/* Pushes one id; *text and *len get the newly completed text (possibly empty), valid until the
 * next call on d. ERR_ARG for an id outside [0, n_vocab). */
int detok_push(struct detok *d, int32_t id, const char **text, size_t *len);
/* Emits what is held back at the end of a stream (an incomplete character becomes U+FFFD) and
 * resets d for a new stream. */
int detok_flush(struct detok *d, const char **text, size_t *len);

#endif
