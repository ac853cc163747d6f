/* locator.c -- interim locator validation until sources.c lands. */
#include "sources.h"
#include "mw.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mw__locator_check(const char *loc, const char *const *roots, int nroots, char *err, size_t errlen) {
  static const char *const schemes[] = {"file:", "dir:", "git:", NULL};
  if (!strncmp(loc, "log:", 4)) {
    if (mw_valid_id(loc + 4)) return 0;
    snprintf(err, errlen, "log: names an actor id");
    return MW_EINVAL;
  }
  if (!strncmp(loc, "http://", 7)) return 0;
  if (!strncmp(loc, "https://", 8)) {
    snprintf(err, errlen, "https is not supported: no TLS in this host");
    return MW_EINVAL;
  }
  for (int i = 0; schemes[i]; i++) {
    size_t n = strlen(schemes[i]);
    if (strncmp(loc, schemes[i], n)) continue;
    const char *path = loc + n;
    if (path[0] != '/' || strstr(path, "/../") || !strcmp(path + strlen(path) - (strlen(path) >= 3 ? 3 : 0), "/..")) {
      snprintf(err, errlen, "locator path must be absolute, without ..");
      return MW_EINVAL;
    }
    char real[PATH_MAX], rroot[PATH_MAX];
    if (!realpath(path, real)) {
      snprintf(err, errlen, "locator path does not exist");
      return MW_EINVAL;
    }
    for (int r = 0; r < nroots; r++) {
      if (!realpath(roots[r], rroot)) continue;
      size_t rl = strlen(rroot);
      if (!strncmp(real, rroot, rl) && (real[rl] == '/' || real[rl] == '\0')) return 0;
    }
    snprintf(err, errlen, nroots ? "locator path is outside the operator's roots" : "no roots configured: the operator allows none");
    return MW_EINVAL;
  }
  snprintf(err, errlen, "unknown locator scheme");
  return MW_EINVAL;
}
