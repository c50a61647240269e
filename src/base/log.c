/* base/log.c: see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

static int quiet_info, quiet_errors;

void log_set_quiet(int quiet) {
    quiet_info = quiet;
}
int log_set_errors_quiet(int quiet) {
    int old = quiet_errors;
    quiet_errors = quiet;
    return old;
}

static void emit(const char *prefix, const char *fmt, va_list ap) {
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "%s%s\n", prefix, line);
}

void log_error(const char *fmt, ...) {
    if (quiet_errors) return;
    va_list ap;
    va_start(ap, fmt);
    emit("error: ", fmt, ap);
    va_end(ap);
}

void log_hint(const char *fmt, ...) {
    if (quiet_errors) return;
    va_list ap;
    va_start(ap, fmt);
    emit("hint: ", fmt, ap);
    va_end(ap);
}

void log_info(const char *fmt, ...) {
    if (quiet_info) return;
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
}
