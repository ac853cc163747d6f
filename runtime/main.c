/* main.c -- the `mw` binary: the host and its command line. */
#include "cli.h"

int main(int argc, char **argv) { return mw__cli_main(argc, argv); }
