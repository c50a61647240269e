/* base/json.h: strict JSON parsing on top of cJSON. json_parse() accepts exactly one JSON
 * value in text[0..len), surrounded only by whitespace, and rejects invalid UTF-8 (cJSON
 * alone accepts both). The caller owns the result and frees it with cJSON_Delete(). */
#ifndef DSPARK_BASE_JSON_H
#define DSPARK_BASE_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* NULL on failure; *why (optional) then says what was wrong. */
cJSON *json_parse(const char *text, size_t len, const char **why);
/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
int utf8_valid(const char *s, size_t len);

#endif
