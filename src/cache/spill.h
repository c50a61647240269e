/* cache/spill.h: the prefix cache's disk tier. Each saved entry is one file holding a token
 * prefix and the KV rows of those tokens, under DIR/<model fingerprint>/<hash of the
 * tokens>.kv, so caches of different models never meet and a restarted server finds its
 * files again. A file is a fixed header (magic, version, fingerprint, geometry, sizes,
 * checksums), the token ids, and the rows as float32 split into byte planes and
 * zstd-compressed. The header and the tokens are verified when the folder is scanned, the
 * payload's xxhash64 and size before any row is used; a file that fails a check is logged,
 * deleted and never used. The folder is kept under a byte budget by deleting the least
 * recently used files (by modification time, which a hit refreshes). Files are written to a
 * temporary name and renamed, so a crash never leaves a partial .kv file.
 * One thread uses a struct spill; it owns its index (token prefixes of the files). */
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
    int files;
    size_t bytes; /* on disk */
};

/* Opens (creating when needed) dir's folder for this fingerprint and indexes the files in it.
 * max_bytes bounds the folder (0: no bound). ERR_IO with a message when it cannot be made. */
int spill_open(const char *dir, uint64_t fingerprint, const struct spill_geometry *g,
               size_t max_bytes, struct spill **out);
void spill_close(struct spill *sp); /* NULL is a no-op */

/* Saves tokens[0..n) with kv's first n rows. Nothing is written when a file already holds
 * these tokens or a longer sequence starting with them; files holding a shorter prefix of
 * them are replaced. */
int spill_save(struct spill *sp, const int32_t *tokens, int n, const struct kv_cache *kv);
/* The longest prefix of prompt[0..n), at most max_len tokens, that a file holds; its index
 * goes to *file (-1 when no file shares a token). */
int spill_match(const struct spill *sp, const int32_t *prompt, int n, int max_len, int *file);
/* Verifies file and puts its first n rows into kv (capacity >= n). ERR_FORMAT when the file
 * is corrupt: it is then deleted, and the index changes (earlier indices are void). */
int spill_load(struct spill *sp, int file, int n, struct kv_cache *kv);

struct spill_stats spill_stats(const struct spill *sp);
/* The path of file i (for messages and tests). */
const char *spill_path(const struct spill *sp, int file);

#endif
