/* cli/main.c: `dspark <command> [flags]`. Dispatches to the subcommands in commands.h. */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

#define DSPARK_VERSION "0.1.0"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"generate", cmd_generate, "generate text from a prompt on the CPU"},
    {"render", cmd_render, "render a chat template with a JSON context"},
    {"serve", cmd_serve, "serve the OpenAI-compatible HTTP API"},
    {"tokenize", cmd_tokenize, "print the token ids of text"},
    {"benchmark", cmd_benchmark, "measure decoding speed of each mode over prompt sets"},
    {"models", cmd_models, "list the model folders found and the drafters that fit each"},
    {"doctor", cmd_doctor, "check this machine and build: CPU, memory, GPU, libraries, models"},
};

static void usage(FILE *f) {
    fprintf(f,
            "dspark %s: fast, lossless LLM inference\n\n"
            "usage: dspark <command> [flags]\n\ncommands:\n",
            DSPARK_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`dspark <command> --help` lists the command's flags.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("dspark %s\n", DSPARK_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
