/* base/fs.c: see fs.h. */
#include "base/fs.h"

#include "base/err.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_read_file(const char *path, char **out, size_t *n_bytes, size_t max_bytes) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        log_error("cannot open %s: %s", path, strerror(errno));
        return ERR_IO;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        log_error("%s is not a regular file", path);
        fclose(f);
        return ERR_IO;
    }
    if ((size_t)st.st_size > max_bytes) {
        log_error("%s is %lld bytes, more than the %zu this file may have", path,
                  (long long)st.st_size, max_bytes);
        fclose(f);
        return ERR_FORMAT;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return ERR_NOMEM;
    }
    if (n && fread(buf, 1, n, f) != n) {
        log_error("short read on %s", path);
        free(buf);
        fclose(f);
        return ERR_IO;
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (n_bytes) *n_bytes = n;
    return OK;
}

int fs_map(const char *path, struct fs_map *out) {
    out->data = NULL;
    out->n_bytes = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        log_error("cannot open %s: %s", path, strerror(errno));
        return ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        log_error("%s is not a regular file", path);
        close(fd);
        return ERR_IO;
    }
    out->n_bytes = (size_t)st.st_size;
    if (out->n_bytes) {
        void *p = mmap(NULL, out->n_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            log_error("cannot map %s: %s", path, strerror(errno));
            close(fd);
            return ERR_IO;
        }
        out->data = p;
    }
    close(fd);
    return OK;
}

void fs_unmap(struct fs_map *m) {
    if (m->data) munmap(m->data, m->n_bytes);
    m->data = NULL;
    m->n_bytes = 0;
}

int fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int fs_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) {
        log_error("path too long: %s/%s", dir, name);
        return ERR_ARG;
    }
    return OK;
}
