/* base/err.c: names for enum err. */
#include "base/err.h"

const char *err_str(int err) {
    switch (err) {
    case OK:
        return "ok";
    case ERR_IO:
        return "I/O error";
    case ERR_FORMAT:
        return "malformed input";
    case ERR_NOMEM:
        return "out of memory";
    case ERR_UNSUPPORTED:
        return "unsupported";
    case ERR_FULL:
        return "capacity exceeded";
    case ERR_CANCELLED:
        return "cancelled";
    case ERR_ARG:
        return "invalid argument";
    }
    return "unknown error";
}
