/* base/json.c: see json.h. */
#include "base/json.h"

#include <stdint.h>

int utf8_valid(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s, *end = p + len;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0)
            n = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            n = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0;
        if (end - p <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        p += n + 1;
    }
    return 1;
}

cJSON *json_parse(const char *text, size_t len, const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    if (!utf8_valid(text, len)) {
        *why = "invalid UTF-8";
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        *why = "not valid JSON";
        return NULL;
    }
    while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end != text + len && !(end == text + len - 1 && *end == 0)) {
        cJSON_Delete(j);
        *why = "trailing bytes after the JSON value";
        return NULL;
    }
    return j;
}
