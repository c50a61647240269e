/* format/safetensors.h: safetensors files, single or sharded, memory-mapped read-only.
 * Every header field is checked against the file (lengths, offsets, dtype sizes, overflow):
 * a truncated or lying file is ERR_FORMAT with a message naming the file and the tensor.
 * A struct st_set owns its maps; tensor data pointers live until st_close(). */
#ifndef DSPARK_FORMAT_SAFETENSORS_H
#define DSPARK_FORMAT_SAFETENSORS_H

#include "tensor/dtype.h"

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

struct st_tensor {
    char *name;
    char dtype_name[8]; /* as written in the header, e.g. "BF16", "I64" */
    int dtype_known;    /* 1 when dtype is F32/F16/BF16 */
    enum dtype dtype;   /* valid when dtype_known */
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* shape[n_dims-1] is contiguous */
    const void *data;           /* points into the file's map */
    size_t n_bytes;
    const char *file; /* path of the file holding it */
};

struct st_set;

/* Opens dir/model.safetensors, or every shard listed in dir/model.safetensors.index.json. */
int st_open_dir(const char *dir, struct st_set **out);
/* Opens one file. */
int st_open_file(const char *path, struct st_set **out);
/* Parses a whole safetensors file image held in memory (no copy: tensors point into buf).
 * label names the file in messages. Used by fuzzers and by st_open_file. */
int st_parse(const void *buf, size_t n_bytes, const char *label, struct st_set **out);
void st_close(struct st_set *s); /* NULL is a no-op */

int st_count(const struct st_set *s);
const struct st_tensor *st_at(const struct st_set *s, int i);
const struct st_tensor *st_find(const struct st_set *s, const char *name); /* NULL on a miss */
int64_t st_numel(const struct st_tensor *t);

#endif
