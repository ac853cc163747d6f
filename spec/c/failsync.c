/* failsync.c -- an LD_PRELOAD shim for durability_spec: fsync() and
 * fdatasync() fail with EIO while the file named by the environment variable
 * MW_FAILSYNC_FLAG exists, and behave normally otherwise.  Each injected
 * failure is written to stderr as one line, so a test can see it happened.
 *
 * Built by the spec itself (not by the Makefile, which builds only
 * spec/c/NAME_test.c): cc -shared -fPIC -o failsync.so failsync.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
  const char *flag = getenv("MW_FAILSYNC_FLAG");
  int saved = errno, hit;
  if (!flag || !*flag) return 0;
  hit = access(flag, F_OK) == 0;
  errno = saved;
  return hit;
}

static void note(const char *fn, int fd) {
  char line[96];
  int n = snprintf(line, sizeof line, "failsync: %s(%d) -> EIO\n", fn, fd);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
  }
}

int fsync(int fd) {
  static int (*real)(int);
  if (failing()) {
    note("fsync", fd);
    errno = EIO;
    return -1;
  }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (failing()) {
    note("fdatasync", fd);
    errno = EIO;
    return -1;
  }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(fd);
}
