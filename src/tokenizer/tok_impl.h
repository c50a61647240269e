/* tokenizer/tok_impl.h: the tokenizer's internal types, shared by the files of src/tokenizer/
 * only. Encoding runs: added-token split (added.c) -> normalizer (normalize.c) -> added-token
 * split on normalized text -> pre-tokenizer (pretok.c) -> BPE (bpe.c). Decoding (decode.c) runs
 * the decoder steps per token. The JSON reading lives in load.c, load_model.c and the parse
 * functions of each stage. */
#ifndef DSPARK_TOKENIZER_TOK_IMPL_H
#define DSPARK_TOKENIZER_TOK_IMPL_H

#include "base/hash.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define TOK_MAX_IDS   (1 << 24)  /* ids must be below this */
#define TOK_MAX_TOKEN (1 << 16)  /* bytes in one token's text */
#define TOK_MAX_JSON  (1u << 30) /* bytes in tokenizer.json */
#define TOK_MAX_STEPS 32         /* normalizer / pre-tokenizer steps */
/* Normalizers and pre-tokenizers may make text longer (NFKD, Replace, ByteLevel), but a real
 * tokenizer never by more than this factor (plus a constant); a crafted file could. */
#define TOK_MAX_GROWTH 32

/* ---- growable byte buffer and piece lists ---- */

struct tok_buf {
    char *p;
    size_t n, cap;
};

/* One piece of text on its way through the pipeline. id >= 0: already a token (an added token
 * matched in the text); then off/len are unused. first: the piece starts the original input. */
struct tok_piece {
    size_t off, len; /* bytes in the owning list's buf */
    int32_t id;
    uint8_t first;
};

struct tok_pieces {
    struct tok_buf buf;
    struct tok_piece *v;
    size_t n, cap;
};

int tok_buf_add(struct tok_buf *b, const void *p, size_t n);
int tok_buf_reserve(struct tok_buf *b, size_t extra);
void tok_buf_free(struct tok_buf *b);
/* Appends a text piece copied from p (empty pieces are dropped) or an id piece. */
int tok_pieces_add(struct tok_pieces *l, const char *p, size_t n, int first);
int tok_pieces_add_id(struct tok_pieces *l, int32_t id);
void tok_pieces_reset(struct tok_pieces *l);
void tok_pieces_free(struct tok_pieces *l);

/* ---- UTF-8 (tok_utf8.c) ---- */

/* Length of the character at s (1..4), or 1 for a byte that starts no valid character; *cp
 * gets the code point, or -1 for such a byte. n > 0. */
int tok_utf8_next(const char *s, size_t n, int32_t *cp);
int tok_utf8_valid(const char *s, size_t n);
int tok_utf8_put(char *dst, int32_t cp); /* writes 1..4 bytes */
int tok_is_space(int32_t cp);            /* Unicode White_Space */
int tok_is_word(int32_t cp);             /* letter, mark, decimal digit, connector, joiner */
int tok_is_numeric(int32_t cp);          /* Nd, Nl, No */

/* ---- regex (regex.c): PCRE2 in UTF mode; invalid UTF-8 bytes match nothing ---- */

struct tok_regex;
int tok_regex_new(const char *pattern, size_t len, int literal, struct tok_regex **out,
                  const char *what);
void tok_regex_free(struct tok_regex *re);
/* Finds non-overlapping matches of re in s[0..n) from start on; calls fn for each match.
 * Empty matches are reported, then the search moves on one character. */
typedef int tok_match_fn(void *ctx, size_t start, size_t end);
int tok_regex_each(const struct tok_regex *re, const char *s, size_t n, tok_match_fn *fn,
                   void *ctx);

/* ---- normalizer (normalize.c) ---- */

enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_STRIP,
};

struct tok_norm {
    enum tok_norm_kind kind;
    char *a, *b; /* PREPEND: a; REPLACE: a (literal pattern, when re is NULL) -> b */
    size_t a_len, b_len;
    struct tok_regex *re; /* REPLACE with a Regex pattern */
    int left, right;      /* STRIP */
};

int tok_norm_parse(const cJSON *j, struct tok_norm **steps, int *n, const char *file);
void tok_norm_free(struct tok_norm *steps, int n);
/* Normalizes s[0..n) into out (cleared first). */
int tok_normalize(const struct tok_norm *steps, int n_steps, const char *s, size_t n,
                  struct tok_buf *out);

/* ---- pre-tokenizer (pretok.c) ---- */

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};

enum tok_pretok_kind { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE, TOK_PRE_DIGITS };

enum tok_prepend { TOK_PREPEND_NEVER, TOK_PREPEND_FIRST, TOK_PREPEND_ALWAYS };

struct tok_pretok {
    enum tok_pretok_kind kind;
    struct tok_regex *re; /* SPLIT; BYTELEVEL when use_regex */
    enum tok_split_behavior behavior;
    int invert;           /* SPLIT */
    int add_prefix_space; /* BYTELEVEL */
    char repl[8];         /* METASPACE replacement character */
    int repl_len;
    enum tok_prepend prepend; /* METASPACE */
    int split;                /* METASPACE */
    int individual;           /* DIGITS */
};

int tok_pretok_parse(const cJSON *j, struct tok_pretok **steps, int *n, const char *file);
void tok_pretok_free(struct tok_pretok *steps, int n);
/* Runs the steps over the text pieces of *in; id pieces pass through. Swaps lists as it goes:
 * the result is left in *in, *tmp is scratch. */
int tok_pretokenize(const struct tok_pretok *steps, int n_steps, struct tok_pieces *in,
                    struct tok_pieces *tmp);
/* The GPT-2 byte-to-character map: appends the characters for s[0..n) to out. */
int tok_bytes_to_chars(const char *s, size_t n, struct tok_buf *out);
/* The inverse for one character: the byte, or -1 when cp is not in the map. */
int tok_char_to_byte(int32_t cp);

/* ---- decoder (decode.c) ---- */

enum tok_dec_kind {
    TOK_DEC_BYTELEVEL,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_METASPACE,
};

struct tok_dec {
    enum tok_dec_kind kind;
    char *a, *b; /* REPLACE: a -> b */
    size_t a_len, b_len;
    char ch[8]; /* STRIP content / METASPACE replacement character */
    int ch_len;
    int start, stop;          /* STRIP */
    enum tok_prepend prepend; /* METASPACE */
    int joined;               /* an earlier step joins all tokens into one (Fuse, ByteLevel) */
    int bytes_grouped;        /* an earlier ByteFallback step groups runs of byte tokens */
};

#define TOK_MAX_DEC 16 /* decoder steps */

/* Where a stream of tokens stands, for the steps that treat the first token(s) specially. */
struct tok_dec_state {
    size_t n_tokens;             /* tokens decoded so far */
    size_t n_groups;             /* the same, counting a run of byte tokens once */
    int prev_byte;               /* the previous token was a <0xNN> token */
    int strip_left[TOK_MAX_DEC]; /* joined Strip steps: leading characters still to strip */
};

int tok_dec_parse(const cJSON *j, struct tok_dec **steps, int *n, const char *file);
void tok_dec_free(struct tok_dec *steps, int n);
void tok_dec_begin(const struct tokenizer *t, struct tok_dec_state *st);
/* Appends the bytes of id (in [0, n_vocab)) to out; scratch is two work buffers. */
int tok_dec_token(const struct tokenizer *t, struct tok_dec_state *st, int32_t id,
                  struct tok_buf *out, struct tok_buf *scratch);

/* ---- added tokens (added.c) ---- */

struct tok_added {
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
};

struct tok_trie_node {
    int32_t child, sibling; /* node indices, -1: none */
    int32_t added;          /* index into tokenizer.added of the token ending here, or -1 */
    uint8_t byte;
};

struct tok_trie {
    struct tok_trie_node *nodes; /* nodes[0] is the root */
    size_t n, cap;
    int32_t root[256]; /* the root's child for each first byte, -1: none (valid once n > 0) */
};

int tok_trie_add(struct tok_trie *tr, const char *key, size_t len, int32_t added);
void tok_trie_free(struct tok_trie *tr);
/* Splits the text pieces of *in on the added tokens of trie (leftmost-longest, with the
 * tokens' lstrip/rstrip/single_word flags) into *out (reset first). */
int tok_split_added(const struct tokenizer *t, const struct tok_trie *trie,
                    const struct tok_pieces *in, struct tok_pieces *out);

/* ---- BPE (bpe.c) ---- */

struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
int tok_ids_add(struct tok_ids *ids, int32_t id);
/* Appends the BPE tokens of one pre-token to ids. */
int tok_bpe(const struct tokenizer *t, const char *s, size_t n, struct tok_ids *ids);

/* ---- the tokenizer ---- */

#define TOK_NO_TOKEN UINT32_MAX

struct tokenizer {
    int32_t n_vocab; /* one past the largest id */
    char *blob;      /* every token text, each NUL-terminated */
    size_t blob_len;
    uint32_t *tok_off;         /* [n_vocab] offset of the id's text in blob */
    uint32_t *tok_len;         /* [n_vocab] its length, or TOK_NO_TOKEN for a hole */
    uint8_t *tok_special;      /* [n_vocab] 1 for special added tokens */
    struct hash_str vocab;     /* model vocabulary: text -> id */
    struct hash_str added_ids; /* added tokens: text -> id */
    struct hash_u64 merges;    /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t unk_id;            /* -1 when the model has no unknown token */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t byte_id[256]; /* ids of <0xNN>, -1 where missing */

    struct tok_added *added;
    int n_added;
    struct tok_trie trie_raw;  /* added tokens matched before normalization */
    struct tok_trie trie_norm; /* added tokens matched after it */

    struct tok_norm *norm;
    int n_norm;
    struct tok_pretok *pretok;
    int n_pretok;
    struct tok_dec *dec;
    int n_dec;
    int has_decoder; /* without one, HF joins the tokens with spaces */

    int32_t bos_id, eos_id;
};

/* load_model.c: model section, added tokens, blob and id tables. */
int tok_load_model(struct tokenizer *t, const cJSON *root, const cJSON *config, const char *file,
                   const char *config_file);
/* JSON helpers: a string member (NULL when absent or null; *bad set for other types). */
const char *tok_json_str(const cJSON *obj, const char *key, int *bad);
int tok_json_bool(const cJSON *obj, const char *key, int dflt, int *bad);

#endif
