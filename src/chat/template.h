/* chat/template.h: Jinja2-compatible chat templates. A template is parsed once and rendered
 * with a JSON object of variables (messages, tools, add_generation_prompt, bos_token,
 * eos_token, enable_thinking, ...); the text equals Python jinja2's with transformers'
 * settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
 * tojson, raise_exception and strftime_now). A parsed template is immutable: any number of
 * threads may render it at once. Rendering is bounded (steps, output, memory, recursion), so
 * no template or context can crash or hang the caller; errors come back as a return code
 * and a message. Output strings are heap copies the caller frees with free().
 *
 * Outside the chat-template subset (errors when used): extends/block/include/import tags,
 * recursive loops, the cycler/joiner/lipsum globals, the filters filesizeformat, groupby,
 * pprint, random, striptags, truncate, urlencode, urlize, wordwrap and xmlattr, str.format
 * specs (`{:>10}`), str.encode/translate/expandtabs. Known differences: integers are 64-bit
 * (overflow is an error, Python has big ints); case mapping maps one code point to one
 * ('ß'.upper() stays 'ß'); generators are lists underneath (iterable twice); methods of
 * Markup strings return plain strings; functions and generators print without addresses. */
#ifndef DSPARK_CHAT_TEMPLATE_H
#define DSPARK_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

struct chat_template;

/* Limits and clock of one render; zero fields take the defaults shown. */
struct chat_render_opts {
    int64_t now;        /* strftime_now() time, seconds since 1970 (local time zone); 0: now */
    uint64_t max_steps; /* statements + expressions evaluated; 0: 50 000 000 */
    size_t max_output;  /* bytes of output (and of any captured block); 0: 32 MiB */
    size_t max_memory;  /* bytes of template values alive at once; 0: 512 MiB */
    int max_depth;      /* macro call nesting; 0: 100 */
};

/* Parses src[0..len). ERR_FORMAT with "template syntax error at line L, column C: ..." in
 * err for invalid templates (including unknown tags and filters, as jinja2 reports them at
 * compile time); ERR_NOMEM. *out belongs to the caller (chat_template_free). */
int chat_template_parse(const char *src, size_t len, struct chat_template **out, char *err,
                        size_t err_cap);
void chat_template_free(struct chat_template *t); /* NULL is a no-op */

/* Renders t with the variables of the JSON object context. opts may be NULL. On success *out
 * is a NUL-terminated heap string of *out_len bytes (it may contain NUL bytes). Errors:
 *   ERR_ARG   the template raised: raise_exception(msg) puts exactly msg in err; other runtime
 *             errors (undefined attribute of undefined, type errors, ...) put
 *             "template error at line L: ..." (a bad request: HTTP 400)
 *   ERR_FULL  a limit of opts was reached (also a 400)
 *   ERR_FORMAT context is not a JSON object (or has invalid UTF-8)
 *   ERR_NOMEM
 * cJSON stores numbers as doubles: integral ones are passed as ints, so 1.0 renders as 1;
 * chat_template_render_json keeps the difference. */
int chat_template_render(const struct chat_template *t, const cJSON *context,
                         const struct chat_render_opts *opts, char **out, size_t *out_len,
                         char *err, size_t err_cap);
/* The same with the context as JSON text (numbers read as Python's json module reads them). */
int chat_template_render_json(const struct chat_template *t, const char *context_json, size_t len,
                              const struct chat_render_opts *opts, char **out, size_t *out_len,
                              char *err, size_t err_cap);

/* 1 when the last failed render on this thread came from raise_exception(). */
int chat_template_last_raised(void);

#endif
