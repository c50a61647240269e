/* tests/fuzz/fuzz_template.c: libFuzzer target for chat templates. The input is a template,
 * optionally followed by a NUL byte and a JSON context (otherwise a fixed chat context is
 * used). It is parsed and rendered under tight step, output, memory and depth limits, once
 * with the context as is and once through chat_render (message normalization, special
 * tokens). Nothing may crash, leak or run long. */
#include "base/log.h"
#include "chat/chat.h"
#include "chat/template.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char CONTEXT[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": \"hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"abc123DEF\", "
    "\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1.5, \\\"y\\\": [1, "
    "\\\"z\\\"]}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"abc123DEF\", \"content\": [{\"type\": \"text\", "
    "\"text\": \"ok\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}, "
    "\"required\": [\"x\"]}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", "
    "\"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    log_set_errors_quiet(1);
    log_set_quiet(1);
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    const char *ctx = nul ? (const char *)nul + 1 : CONTEXT;
    size_t clen = nul ? size - tlen - 1 : sizeof CONTEXT - 1;
    struct chat_render_opts o = {.now = 1721952000,
                                 .max_steps = 20000,
                                 .max_output = 1 << 20,
                                 .max_memory = 32 << 20,
                                 .max_depth = 30};
    struct chat_template *t = NULL;
    char err[512], *out = NULL;
    size_t n = 0;
    if (chat_template_parse(src, tlen, &t, err, sizeof err) != 0) return 0;
    if (chat_template_render_json(t, ctx, clen, &o, &out, &n, err, sizeof err) == 0) free(out);
    chat_template_free(t);

    struct chat *c = NULL;
    if (chat_from_text(src, tlen,
                       "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}}", 55, &c,
                       err, sizeof err) != 0)
        return 0;
    cJSON *j = cJSON_Parse(CONTEXT);
    struct chat_request q = {.messages = cJSON_GetObjectItem(j, "messages"),
                             .tools = cJSON_GetObjectItem(j, "tools"),
                             .add_generation_prompt = 1,
                             .kwargs = j,
                             .opts = &o};
    if (chat_render(c, &q, &out, &n, err, sizeof err) == 0) free(out);
    cJSON_Delete(j);
    chat_free(c);
    return 0;
}
