/* tests/fuzz/fuzz_toolcall.c: libFuzzer target for tool-call parsing. The first byte picks
 * the format, the rest is model output. Every parsed call must have a name and arguments
 * that are a valid JSON object, and the content must be valid UTF-8 when the input is. */
#include "base/json.h"
#include "base/log.h"
#include "chat/tools.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    log_set_errors_quiet(1);
    if (size < 1) return 0;
    enum chat_tool_format f = (enum chat_tool_format)(data[0] % 5);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct chat_tool_calls c;
    if (chat_parse_tool_calls(f, text, len, &c) != 0) return 0;
    for (int i = 0; i < c.n_calls; i++) {
        if (!c.calls[i].name || !c.calls[i].name[0]) abort();
        cJSON *a = json_parse(c.calls[i].arguments, strlen(c.calls[i].arguments), NULL);
        if (!cJSON_IsObject(a) &&
            !memmem(text, len, c.calls[i].arguments, strlen(c.calls[i].arguments)))
            abort(); /* serialized arguments must be an object (strings pass through as given) */
        cJSON_Delete(a);
    }
    if (c.content && c.content_len > len) abort();
    if (c.content && utf8_valid(text, len) && !utf8_valid(c.content, c.content_len)) abort();
    chat_tool_calls_free(&c);
    return 0;
}
