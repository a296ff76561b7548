// pipec: the command line, checked, then the command. The driver is the files beside this one:
// options.c (the options as one table, parsed into a Config), rules.c (the rules that span
// several options, as a table, yielding a checked Config), passes.c (the passes as a table and
// their runner), commands.c (the commands as a table: what each runs and prints), report.c
// (what they print) and help.c (--help). driver.h says what they share.
//
// Exit status: 0 ok, 1 error in the model (or a run), 2 usage error.
#include <string.h>

#include "driver.h"

// The command line parsed and checked, then the command run: its exit status.
static int pipec(Driver *dr, int argc, char **argv) {
  int rc = options_parse(dr, argc, argv);
  if (rc >= 0) return rc;
  const Config *c = &dr->cfg;
  if (c->npos == 0)
    return driver_usage_error("%s", "no command given (check, print, plan, compile, run, profile)");
  if (strcmp(c->positional[0], "import") == 0)
    return run_import(dr, c->npos > 1 ? c->positional[1] : NULL);
  rc = rules_check(dr);
  if (rc) return rc;
  return run_command(dr);
}

int main(int argc, char **argv) {
  Driver dr = {0};
  arena_init(&dr.arena); // everything is freed at once by arena_free on every exit path
  int rc = pipec(&dr, argc, argv);
  arena_free(&dr.arena);
  return rc;
}
