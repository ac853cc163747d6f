/* bench/sources.c -- what a delta pull costs beside the bare read of the same
 * data, in the same run: 10k new lines of a file (file:) against open+read()
 * of the same bytes, and 1k new commits of a local repository (git:) against
 * `git log` of the same range run directly through system().  Prints the
 * figures and PASS/MISS for the target (10k lines within 2x a bare read).
 * Works in a fresh mktemp directory and removes it; under a minute. */
#include "mw.h"
#include "sources.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINES 10000
#define COMMITS 1000

static char DIR_[256];
static const char *roots[1];
static uv_loop_t loop;

typedef struct res {
  int count;   /* count the items (outside the timed runs) */
  int rc, n;
  char err[512];
  char hz[512];
} res;

static void on_pull(void *ud, mw_pull_res *r) {
  res *o = ud;
  o->rc = r->rc;
  snprintf(o->err, sizeof o->err, "%s", r->error);
  snprintf(o->hz, sizeof o->hz, "%.*s", (int)r->horizon.len, r->horizon.p ? r->horizon.p : "");
  /* Count items by their "kind" member: one per item.  Only when asked:
   * the timed runs keep the callback as light as a caller's. */
  o->n = 0;
  if (o->count)
    for (const char *p = r->items.p; p && (p = strstr(p, "\"kind\":")); p += 7) o->n++;
}

/* One pull, start to finish (cb called, every handle closed), in seconds. */
static double pull(const char *loc, const char *hz, res *o) {
  mw_pull_req q;
  memset(&q, 0, sizeof q);
  q.source_id = "bench";
  q.locator = loc;
  q.horizon = hz;
  q.roots = roots;
  q.nroots = 1;
  q.deadline_ms = 30000;
  uint64_t t0 = uv_hrtime();
  if (mw__pull_start(&loop, &q, on_pull, o)) return -1;
  uv_run(&loop, UV_RUN_DEFAULT);
  return (double)(uv_hrtime() - t0) / 1e9;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void stats(double *v, int n, double *best, double *med) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  *best = v[0];
  *med = v[n / 2];
}

/* The temp directory goes on every exit, failures included. */
static void cleanup(void) {
  char cmd[512];
  if (!DIR_[0]) return;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", DIR_);
  DIR_[0] = '\0';
}

static void sh(const char *cmd) {
  if (system(cmd) != 0) {
    fprintf(stderr, "bench: command failed: %s\n", cmd);
    exit(2);
  }
}

int main(void) {
  char cmd[8192], path[PATH_MAX], loc[PATH_MAX + 8];
  snprintf(DIR_, sizeof DIR_, "/tmp/mw-bench-src.XXXXXX");
  if (!mkdtemp(DIR_)) return 2;
  atexit(cleanup);
  roots[0] = DIR_;
  uv_loop_init(&loop);

  /* ---- file: 10k new lines --------------------------------------------- */
  snprintf(path, sizeof path, "%s/app.log", DIR_);
  snprintf(loc, sizeof loc, "file:%s", path);
  FILE *f = fopen(path, "w");
  fputs("first line before the horizon\n", f);
  fclose(f);
  res r0 = {0};
  pull(loc, NULL, &r0);
  char hz[512];
  snprintf(hz, sizeof hz, "%s", r0.hz);
  long base = 30;
  f = fopen(path, "a");
  for (int i = 0; i < LINES; i++)
    fprintf(f, "2026-11-30T00:%02d:%02d.%03dZ INFO worker[%d] request id=%06d path=/api/v1/things status=200 took=%dms\n",
            i / 60 % 60, i % 60, i % 1000, i % 8, i, i % 97);
  fclose(f);
  long bytes = 0;
  {
    FILE *g = fopen(path, "r");
    fseek(g, 0, SEEK_END);
    bytes = ftell(g) - base;
    fclose(g);
  }
  enum { R = 60 };
  double mwt[R], bare[R], split[R];
  char *buf = malloc((size_t)bytes);
  res r = {0};
  r.count = 1;
  pull(loc, hz, &r);   /* checked once, untimed (this also warms the pool) */
  if (r.rc || r.n != LINES) {
    fprintf(stderr, "bench: file pull: rc %d, %d items: %s\n", r.rc, r.n, r.err);
    return 1;
  }
  r.count = 0;
  for (int k = 0; k < R; k++) {
    mwt[k] = pull(loc, hz, &r);
    if (r.rc) {
      fprintf(stderr, "bench: file pull: %s\n", r.err);
      return 1;
    }
    /* The bare read: open, read() the same bytes, close. */
    uint64_t t0 = uv_hrtime();
    int fd = open(path, O_RDONLY);
    lseek(fd, base, SEEK_SET);
    long got = 0;
    while (got < bytes) {
      ssize_t n = read(fd, buf + got, (size_t)(bytes - got));
      if (n <= 0) break;
      got += n;
    }
    close(fd);
    bare[k] = (double)(uv_hrtime() - t0) / 1e9;
    /* ... and the same plus splitting into lines (for context). */
    t0 = uv_hrtime();
    fd = open(path, O_RDONLY);
    lseek(fd, base, SEEK_SET);
    got = 0;
    while (got < bytes) {
      ssize_t n = read(fd, buf + got, (size_t)(bytes - got));
      if (n <= 0) break;
      got += n;
    }
    close(fd);
    volatile long lines = 0;
    for (char *p = buf, *e = buf + got; p < e;) {
      char *nl = memchr(p, '\n', (size_t)(e - p));
      if (!nl) break;
      lines++;
      p = nl + 1;
    }
    split[k] = (double)(uv_hrtime() - t0) / 1e9;
  }
  free(buf);
  double mb, mm, bb, bm, sb, sm;
  stats(mwt, R, &mb, &mm);
  stats(bare, R, &bb, &bm);
  stats(split, R, &sb, &sm);

  /* ---- git: 1k new commits --------------------------------------------- */
  char repo[512], fi[512];
  snprintf(repo, sizeof repo, "%s/repo", DIR_);
  snprintf(fi, sizeof fi, "%s/fast-import", DIR_);
  f = fopen(fi, "w");
  for (int i = 1; i <= COMMITS + 1; i++) {
    char msg[64];
    int ml = snprintf(msg, sizeof msg, "change number %d: tune the \"thing\"\n", i);
    fprintf(f, "commit refs/heads/main\nmark :%d\nauthor Bench Author <b@b> %d +0000\ncommitter Bench <b@b> %d +0000\ndata %d\n%s",
            i, 1700000000 + i, 1700000000 + i, ml, msg);
    if (i > 1) fprintf(f, "from :%d\n", i - 1);
    fputc('\n', f);
  }
  fclose(f);
  snprintf(cmd, sizeof cmd, "git init -q -b main '%s' && git -C '%s' fast-import --quiet < '%s'", repo, repo, fi);
  sh(cmd);
  /* The horizon: the first commit; the delta is the 1k after it. */
  char first[64] = "";
  snprintf(cmd, sizeof cmd, "git -C '%s' rev-list --max-parents=0 HEAD", repo);
  FILE *pp = popen(cmd, "r");
  if (!pp || !fgets(first, sizeof first, pp)) return 2;
  pclose(pp);
  first[strcspn(first, "\n")] = '\0';
  char ghz[128];
  snprintf(ghz, sizeof ghz, "{\"commit\":\"%s\"}", first);
  snprintf(loc, sizeof loc, "git:%s", repo);
  enum { G = 20 };
  double gm[G], gb[G];
  r.count = 1;
  pull(loc, ghz, &r);
  if (r.rc || r.n != COMMITS) {
    fprintf(stderr, "bench: git pull: rc %d, %d items: %s\n", r.rc, r.n, r.err);
    return 1;
  }
  r.count = 0;
  for (int k = 0; k < G; k++) {
    gm[k] = pull(loc, ghz, &r);
    if (r.rc) {
      fprintf(stderr, "bench: git pull: %s\n", r.err);
      return 1;
    }
    snprintf(cmd, sizeof cmd,
             "git -C '%s' log --no-color '--format=%%H%%x1f%%an%%x1f%%at%%x1f%%s%%x1e' --reverse %s..HEAD -- > /dev/null",
             repo, first);
    uint64_t t0 = uv_hrtime();
    sh(cmd);
    gb[k] = (double)(uv_hrtime() - t0) / 1e9;
  }
  double gmb, gmm, gbb, gbm;
  stats(gm, G, &gmb, &gmm);
  stats(gb, G, &gbb, &gbm);

  double ratio = mb / bb, ratio_split = mb / sb;
  printf("sources bench (%d lines = %ld bytes; %d commits), best / median of %d and %d runs\n", LINES, bytes, COMMITS, R, G);
  printf("| figure | MW | bare, same run | ratio |\n| --- | --- | --- | --- |\n");
  printf("| file: delta pull of %d new lines | %.3f ms / %.3f ms (%.1fM lines/s) | open+read() %.3f ms / %.3f ms"
         " | %.2fx best, %.2fx median |\n",
         LINES, mb * 1e3, mm * 1e3, LINES / mb / 1e6, bb * 1e3, bm * 1e3, ratio, mm / bm);
  printf("| (context) | | open+read()+split into lines %.3f ms / %.3f ms | %.2fx best |\n", sb * 1e3, sm * 1e3,
         ratio_split);
  printf("| git: delta pull of %d new commits | %.2f ms / %.2f ms | system(\"git log ...\") %.2f ms / %.2f ms"
         " | %.2fx best, %.2fx median |\n",
         COMMITS, gmb * 1e3, gmm * 1e3, gbb * 1e3, gbm * 1e3, gmb / gbb, gmm / gbm);
  printf("target: %d lines within 2x a bare read: %s (%.2fx)\n", LINES, ratio <= 2.0 ? "PASS" : "MISS", ratio);

  uv_loop_close(&loop);
  return 0;
}
