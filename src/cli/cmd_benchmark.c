/* cli/cmd_benchmark.c: `dspark benchmark` (being written; see issue 4). */
#include "cli/commands.h"

#include <stdio.h>

int cmd_benchmark(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "error: dspark benchmark is not implemented yet\n");
    return 2;
}
