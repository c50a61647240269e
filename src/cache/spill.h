/* cache/spill.h: the prefix cache's disk tier. Each saved entry is one file holding a token
 * prefix and the KV rows of those tokens, under DIR/<model fingerprint>/<hash of the
 * tokens>.kv, so caches of different models never meet and a restarted server finds its
 * files again. A file is a fixed header (magic, version, fingerprint, geometry, sizes,
 * checksums), the token ids, and the rows as float32 split into byte planes and
 * zstd-compressed; the rows may be followed by a drafter's context for the same positions
 * (prefix.h, struct prefix_ctx), tagged with the drafter's digest. The header and the tokens are
 * verified when the folder is scanned, the payload's xxhash64, the tokens and the sizes again
 * before any row is used; a file that fails a check is logged, deleted and never used. The folder
 * is kept under a byte budget by deleting the least recently used files (by modification time,
 * which a hit refreshes). Files are written to a temporary name and renamed, so a crash never
 * leaves a partial file. Saving copies the rows and returns; a writer thread compresses and writes
 * them, so the caller (the engine thread) never waits for the disk; until then the copy itself
 * serves hits. One thread calls these functions; the struct spill owns its index (the token
 * prefixes of the files) and its writer thread. */
#ifndef DSPARK_CACHE_SPILL_H
#define DSPARK_CACHE_SPILL_H

#include <stddef.h>
#include <stdint.h>

struct kv_cache;
struct spill;

struct spill_geometry {
    int n_layers, n_kv_heads, head_dim; /* of the KV rows the files hold */
};

struct spill_stats {
    long writes;  /* files written */
    long reads;   /* files loaded into a cache */
    long rejects; /* files deleted because a check failed */
    long evicted; /* files deleted to stay under the budget */
    long dropped; /* saves given up: too much was waiting for the writer, or writing failed */
    int files;
    size_t bytes;   /* on disk */
    size_t pending; /* rows waiting for the writer */
};

/* A file found by spill_match(): its name and the tokens it shares with the prompt. */
struct spill_hit {
    char name[24];
    int n;
    uint64_t ctx_tag; /* the drafter context asked for (spill_match_ctx), or 0 */
};

/* Opens (creating when needed) dir's folder for this fingerprint, indexes the files in it and
 * starts the writer. max_bytes bounds the folder (0: no bound). ERR_IO with a message when
 * the folder cannot be made. */
int spill_open(const char *dir, uint64_t fingerprint, const struct spill_geometry *g,
               size_t max_bytes, struct spill **out);
/* Finishes the pending writes, then frees. NULL is a no-op. */
void spill_close(struct spill *sp);

/* Queues tokens[0..n) with a copy of kv's first n rows for writing. Nothing is written when a
 * file already holds these tokens or a longer sequence starting with them; files holding a
 * shorter prefix of them are replaced. ERR_FULL (counted as dropped) when the rows waiting
 * for the writer already take SPILL_MAX_PENDING bytes. */
#define SPILL_MAX_PENDING ((size_t)256 << 20)
int spill_save(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv);
/* The same with a drafter context for the n positions, ctx_rows[n, ctx_width] (copied; none
 * when ctx_tag is 0). A file without a context, or with another tag, does not count as
 * holding these tokens. */
int spill_save_ctx(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv,
                   uint64_t ctx_tag, int ctx_width, const float *ctx_rows);
void spill_flush(struct spill *sp); /* waits until every queued save is on disk */
/* The longest prefix of prompt[0..n), at most max_len tokens, that a file holds (hit->n is 0
 * when no file shares a token). */
void spill_match(struct spill *sp, const int32_t *prompt, int n, int max_len,
                 struct spill_hit *hit);
/* spill_match() among the files holding a drafter context of ctx_tag (0: all files). */
void spill_match_ctx(struct spill *sp, const int32_t *prompt, int n, int max_len, uint64_t ctx_tag,
                     struct spill_hit *hit);
/* Verifies the file of hit (it must hold prompt[0..hit->n)) and puts those rows into kv
 * (capacity >= hit->n). ERR_FORMAT when the file is corrupt (it is then deleted), ERR_IO when
 * it has gone meanwhile. */
int spill_load(struct spill *sp, const struct spill_hit *hit, const int32_t *prompt,
               struct kv_cache *kv);
/* spill_load() that also writes, when hit->ctx_tag is set, the drafter context of the hit->n
 * positions to ctx[hit->n, ctx_width]; a file whose context has another width is corrupt. */
int spill_load_ctx(struct spill *sp, const struct spill_hit *hit, const int32_t *prompt,
                   struct kv_cache *kv, float *ctx, int ctx_width);

struct spill_stats spill_stats(struct spill *sp);
/* The path of the i-th indexed file, into buf (tests use it to damage files). */
int spill_file_path(struct spill *sp, int i, char *buf, size_t cap);

#endif
