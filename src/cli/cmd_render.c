/* cli/cmd_render.c: `dspark render`: render a chat template with a JSON context and print the
 * prompt. (Placeholder until the chat module lands.) */
#include "cli/commands.h"

#include <stdio.h>

int cmd_render(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "error: render is not implemented yet\n");
    return 2;
}
