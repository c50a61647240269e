/* base/err.h: error codes shared by every module.
 * Functions return int: OK (0) or a negative enum err; results go through out parameters.
 * The detail (file, tensor, how to fix) is logged with log_error() where the error is found. */
#ifndef DSPARK_BASE_ERR_H
#define DSPARK_BASE_ERR_H

enum err {
    OK = 0,
    ERR_IO = -1,          /* a file could not be opened, read or mapped */
    ERR_FORMAT = -2,      /* bytes that do not follow the format they claim */
    ERR_NOMEM = -3,       /* an allocation failed */
    ERR_UNSUPPORTED = -4, /* valid input that dspark does not handle (yet) */
    ERR_FULL = -5,        /* a fixed-capacity structure (KV cache, queue) is full */
    ERR_CANCELLED = -6,   /* the caller asked to stop */
    ERR_ARG = -7,         /* a bad argument from the user (CLI flag, request field) */
};

const char *err_str(int err);

#endif
