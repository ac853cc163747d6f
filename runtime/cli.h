/* cli.h -- the command line's entry points, shared by main.c and the host. */
#ifndef MW_CLI_H
#define MW_CLI_H
#include <stddef.h>

int mw__cli_main(int argc, char **argv);
int mw__serve_main(int argc, char **argv);   /* server.c */
/* Takes HOME/serve.lock (held while serving); the fd, or -1 with a message. */
int mw__cli_lock_home(const char *home, const char *cmd);
/* Where the fold is: $MW_SCRIPTS/fold.lua, else the installed scripts
 * directory (the lookup `mw serve` makes too). */
int mw__cli_fold_path(const char *home, char *out, size_t n);
#endif
