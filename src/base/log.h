/* base/log.h: diagnostics on stderr. log_error() states what went wrong; log_hint() adds
 * one line on how to fix it. log_set_quiet(1) silences info (tests, JSON output).
 * Thread-safe: each call writes one line with a single fprintf. */
#ifndef DSPARK_BASE_LOG_H
#define DSPARK_BASE_LOG_H

void log_set_quiet(int quiet);
int log_set_errors_quiet(int quiet); /* fuzzers, malformed-input tests; returns the old one */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
