/* chat/tpl_pystr.h: Python str algorithms over template strings (tpl_pystr.c), shared by
 * the filters and the string methods. Indices are code points, as in Python. Results are new
 * string or list values owned by the caller; -1 means the render error is set. */
#ifndef DSPARK_CHAT_TPL_PYSTR_H
#define DSPARK_CHAT_TPL_PYSTR_H

#include "chat/tpl_impl.h"

enum tpl_case { CASE_UPPER, CASE_LOWER, CASE_SWAP, CASE_CAPITALIZE, CASE_TITLE };

/* chars NULL strips whitespace (str.isspace). */
int tpl_py_strip(struct tpl_render *r, const struct tv_str *s, const struct tv_str *chars, int left,
                 int right, struct tv *out);
/* sep NULL splits on whitespace runs; maxsplit < 0 means no limit. */
int tpl_py_split(struct tpl_render *r, int line, const struct tv_str *s, const struct tv_str *sep,
                 int64_t maxsplit, int from_right, struct tv *out);
int tpl_py_splitlines(struct tpl_render *r, const struct tv_str *s, int keepends, struct tv *out);
/* Byte range of s[start:end] (start/end may be NULL or None). */
void tpl_py_range(const struct tv_str *s, const struct tv *start, const struct tv *end, size_t *a,
                  size_t *b);
int64_t tpl_py_find(const struct tv_str *s, const struct tv_str *sub, const struct tv *start,
                    const struct tv *end, int from_right);
int64_t tpl_py_count(const struct tv_str *s, const struct tv_str *sub, const struct tv *start,
                     const struct tv *end);
int tpl_py_replace(struct tpl_render *r, int line, const struct tv_str *s, const struct tv_str *old,
                   const struct tv_str *rep, int64_t count, struct tv *out);
int tpl_py_case(struct tpl_render *r, const struct tv_str *s, enum tpl_case mode, struct tv *out);
uint32_t tpl_py_lower(uint32_t cp);
/* str.center (mode 0), ljust (1), rjust (2) with a fill character. */
int tpl_py_pad(struct tpl_render *r, int line, const struct tv_str *s, int64_t width, uint32_t fill,
               int mode, struct tv *out);
/* fmt % args (a tuple, a mapping or one value). */
int tpl_percent_format(struct tpl_render *r, int line, const struct tv_str *fmt,
                       const struct tv *args, struct tv *out);

#endif
