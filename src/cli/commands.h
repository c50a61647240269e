/* cli/commands.h: the subcommands of the dspark binary. Each takes the argv that follows
 * "dspark" (argv[0] is the command name) and returns the process exit code. */
#ifndef DSPARK_CLI_COMMANDS_H
#define DSPARK_CLI_COMMANDS_H

int cmd_benchmark(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

#endif
