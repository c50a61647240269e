/* base/fs.h: whole-file reads and read-only memory maps.
 * fs_read_file() returns a NUL-terminated heap copy the caller frees with free().
 * A struct fs_map owns its mapping until fs_unmap(). Not thread-safe per object. */
#ifndef DSPARK_BASE_FS_H
#define DSPARK_BASE_FS_H

#include <stddef.h>

struct fs_map {
    void *data;     /* start of the mapping (NULL for an empty file) */
    size_t n_bytes; /* file size */
};

int fs_read_file(const char *path, char **out, size_t *n_bytes, size_t max_bytes);
int fs_map(const char *path, struct fs_map *out);
void fs_unmap(struct fs_map *m);
int fs_exists(const char *path);
/* Joins dir and name into buf (size cap); returns ERR_ARG when it does not fit. */
int fs_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
