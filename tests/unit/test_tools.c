/* tests/unit/test_tools.c: tool calls parsed out of model text for the Hermes/Qwen JSON,
 * Qwen XML, Gemma 4 and Llama 3 formats, including malformed and truncated output, plus the
 * format detection from templates and the call ids. */
#include "test.h"

#include "base/err.h"
#include "base/fs.h"
#include "chat/tools.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Parses text and compares: content (NULL = none), then name/arguments pairs. */
static int expect(enum chat_tool_format f, const char *text, const char *content, int n, ...) {
    struct chat_tool_calls c;
    if (chat_parse_tool_calls(f, text, strlen(text), &c) != OK) return 0;
    int ok = (content == NULL) == (c.content == NULL) && (!content || !strcmp(content, c.content));
    ok = ok && c.n_calls == n;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && ok; i++) {
        const char *name = va_arg(ap, const char *), *args = va_arg(ap, const char *);
        ok = !strcmp(c.calls[i].name, name) && !strcmp(c.calls[i].arguments, args);
    }
    va_end(ap);
    if (!ok) {
        printf("  input: %s\n  content: %s\n", text, c.content ? c.content : "(null)");
        for (int i = 0; i < c.n_calls; i++)
            printf("  call %d: %s %s\n", i, c.calls[i].name, c.calls[i].arguments);
    }
    chat_tool_calls_free(&c);
    return ok;
}

TEST(hermes) {
    enum chat_tool_format H = CHAT_TOOLS_HERMES;
    CHECK(expect(H,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                 "\"n\": 1.0, \"k\": 2}}\n</tool_call>",
                 NULL, 1, "get_weather", "{\"city\": \"Paris\", \"n\": 1.0, \"k\": 2}"));
    CHECK(expect(H,
                 "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
                 "{}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, "
                 "{\"y\": null}]}}</tool_call>",
                 "Let me check.", 2, "a", "{}", "b", "{\"x\": [1, {\"y\": null}]}"));
    CHECK(expect(H,
                 "<tool_call>{\"name\": \"z\", \"arguments\": {\"city\": \"Z\xc3\xbcrich "
                 "\xe6\x9d\xb1\"}}</tool_call>",
                 NULL, 1, "z", "{\"city\": \"Z\xc3\xbcrich \xe6\x9d\xb1\"}"));
    /* arguments given as a string pass through; a missing one is {} */
    CHECK(expect(H, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"a\\\":1}\"}</tool_call>",
                 NULL, 1, "s", "{\"a\":1}"));
    CHECK(expect(H, "<tool_call>{\"name\": \"noargs\"}</tool_call>", NULL, 1, "noargs", "{}"));
    /* malformed blocks stay in the content; no name is no call */
    CHECK(expect(H, "<tool_call>{\"name\": \"bad\", \"arguments\": {</tool_call>",
                 "<tool_call>{\"name\": \"bad\", \"arguments\": {</tool_call>", 0));
    CHECK(expect(H, "<tool_call>{\"arguments\": {}}</tool_call>",
                 "<tool_call>{\"arguments\": {}}</tool_call>", 0));
    CHECK(expect(H, "<tool_call>not json</tool_call> ok", "<tool_call>not json</tool_call> ok", 0));
    CHECK(expect(H, "<tool_call>{\"name\": 5}</tool_call>", "<tool_call>{\"name\": 5}</tool_call>",
                 0));
    /* a truncated call at the end is dropped */
    CHECK(expect(H, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argu", "Sure.", 0));
    CHECK(
        expect(H, "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"na", NULL, 1, "a", "{}"));
    /* plain text is untouched, whitespace included */
    CHECK(expect(H, "  just text\n", "  just text\n", 0));
    CHECK(expect(H, "", "", 0));
    CHECK(expect(H, "before <tool_call>{\"name\": \"a\"}</tool_call> after", "before  after", 1,
                 "a", "{}"));
}

TEST(qwen_xml) {
    enum chat_tool_format X = CHAT_TOOLS_QWEN_XML;
    CHECK(expect(X,
                 "I'll "
                 "look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</"
                 "parameter>\n<parameter=days>\n3\n</parameter>\n"
                 "<parameter=opts>\n{\"exact\": true}\n</parameter>\n</function>\n</tool_call>",
                 "I'll look.", 1, "get_weather",
                 "{\"city\": \"Paris\", \"days\": 3, \"opts\": {\"exact\": true}}"));
    CHECK(expect(X, "<tool_call><function=noop></function></tool_call>", NULL, 1, "noop", "{}"));
    CHECK(expect(X,
                 "<tool_call><function=f><parameter=text>\nline 1\nline "
                 "2\n</parameter></function></tool_call>",
                 NULL, 1, "f", "{\"text\": \"line 1\\nline 2\"}"));
    CHECK(expect(X, "<tool_call>no function</tool_call>", "<tool_call>no function</tool_call>", 0));
    CHECK(expect(X, "<tool_call><function=f><parameter=a>1</tool_call>",
                 "<tool_call><function=f><parameter=a>1</tool_call>", 0));
    CHECK(expect(X, "text <tool_call><function=f>", "text", 0));
}

TEST(gemma4) {
    enum chat_tool_format G = CHAT_TOOLS_GEMMA4;
    CHECK(expect(
        G,
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,flag:true,ratio:0.5,none:null,"
        "tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],opts:{exact:false}}<tool_call|><|tool_response>",
        NULL, 1, "get_weather",
        "{\"city\": \"Paris\", \"days\": 3, \"flag\": true, \"ratio\": 0.5, \"none\": null, "
        "\"tags\": [\"a\", \"b\"], \"opts\": {\"exact\": false}}"));
    CHECK(expect(G, "<|tool_call>call:q{text:<|\"|>a, b} [c]: \"d\"<|\"|>,mode:fast}<tool_call|>",
                 NULL, 1, "q", "{\"text\": \"a, b} [c]: \\\"d\\\"\", \"mode\": \"fast\"}"));
    CHECK(expect(
        G,
        "Checking.<|tool_call>call:a{}<tool_call|><|tool_call>call:b{<|\"|>k<|\"|>:1}<tool_call|>",
        "Checking.", 2, "a", "{}", "b", "{\"k\": 1}"));
    CHECK(expect(G, "<|tool_call>call:broken{city:<|\"|>Paris}<tool_call|>",
                 "<|tool_call>call:broken{city:<|\"|>Paris}<tool_call|>", 0));
    CHECK(expect(G, "<|tool_call>call:x{a:1<tool_call|>", "<|tool_call>call:x{a:1<tool_call|>", 0));
    CHECK(expect(G, "<|tool_call>nocall{}<tool_call|>", "<|tool_call>nocall{}<tool_call|>", 0));
    CHECK(expect(G, "answer <|tool_call>call:f{a:", "answer", 0));
    CHECK(expect(G, "no calls <|tool_response>", "no calls <|tool_response>", 0));
}

TEST(llama3) {
    enum chat_tool_format L = CHAT_TOOLS_LLAMA3;
    CHECK(expect(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NULL, 1,
                 "get_weather", "{\"city\": \"Paris\"}"));
    CHECK(expect(L,
                 "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", "
                 "\"arguments\": {\"x\": \"}\"}}",
                 NULL, 2, "f", "{}", "g", "{\"x\": \"}\"}"));
    CHECK(expect(L, "Hello, I am fine.", "Hello, I am fine.", 0));
    CHECK(expect(L, "{\"name\": \"f\", \"parameters\": {\"x\": 1}} and more",
                 "{\"name\": \"f\", \"parameters\": {\"x\": 1}} and more", 0));
    CHECK(expect(L, "{\"foo\": 1}", "{\"foo\": 1}", 0));
    CHECK(expect(L, "{\"name\": \"f\", \"parameters\": [1]}",
                 "{\"name\": \"f\", \"parameters\": [1]}", 0));
    CHECK(expect(L, "{\"name\": \"f\", \"parame", "{\"name\": \"f\", \"parame", 0));
    CHECK(expect(CHAT_TOOLS_NONE, "<tool_call>{\"name\": \"a\"}</tool_call>",
                 "<tool_call>{\"name\": \"a\"}</tool_call>", 0));
}

TEST(detect) {
    CHECK(chat_tool_format_of_template("x <tool_call> y", 15) == CHAT_TOOLS_HERMES);
    CHECK(chat_tool_format_of_template("<tool_call>\n<function=", 22) == CHAT_TOOLS_QWEN_XML);
    CHECK(chat_tool_format_of_template("{{ '<|tool_call>call:' }}", 25) == CHAT_TOOLS_GEMMA4);
    CHECK(chat_tool_format_of_template("<|python_tag|>", 14) == CHAT_TOOLS_LLAMA3);
    CHECK(chat_tool_format_of_template("plain {{ x }}", 13) == CHAT_TOOLS_NONE);
    static const struct {
        const char *file;
        enum chat_tool_format f;
    } shared[] = {
        {"Qwen-Qwen3-0.6B.jinja", CHAT_TOOLS_HERMES},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", CHAT_TOOLS_HERMES},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", CHAT_TOOLS_HERMES},
        {"Qwen3-Coder.jinja", CHAT_TOOLS_QWEN_XML},
        {"Qwen3.5-4B.jinja", CHAT_TOOLS_QWEN_XML},
        {"google-gemma-4-31B-it.jinja", CHAT_TOOLS_GEMMA4},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", CHAT_TOOLS_LLAMA3},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", CHAT_TOOLS_LLAMA3},
        {"microsoft-Phi-3.5-mini-instruct.jinja", CHAT_TOOLS_NONE},
    };
    if (!fs_exists("../shared/templates")) SKIP("../shared is absent: real templates not checked");
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        char path[512], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "../shared/templates/%s", shared[i].file);
        REQUIRE(fs_read_file(path, &text, &len, 1 << 24) == 0);
        enum chat_tool_format f = chat_tool_format_of_template(text, len);
        if (f != shared[i].f) printf("  %s: %s\n", shared[i].file, chat_tool_format_name(f));
        CHECK(f == shared[i].f);
        free(text);
    }
}

TEST(stop_text) {
    CHECK(!strcmp(chat_tool_stop_text(CHAT_TOOLS_GEMMA4), "<|tool_response>"));
    CHECK(chat_tool_stop_text(CHAT_TOOLS_HERMES) == NULL);
}

TEST(ids) {
    uint64_t a = 42, b = 42;
    char x[30], y[30], z[30];
    chat_tool_call_id(&a, x);
    chat_tool_call_id(&b, y);
    chat_tool_call_id(&a, z);
    CHECK(strlen(x) == 29 && !strncmp(x, "call_", 5));
    CHECK(strspn(x + 5, "0123456789abcdef") == 24);
    CHECK(!strcmp(x, y));
    CHECK(strcmp(x, z));
}

int main(void) {
    RUN(hermes);
    RUN(qwen_xml);
    RUN(gemma4);
    RUN(llama3);
    RUN(detect);
    RUN(stop_text);
    RUN(ids);
    return test_report();
}
