/* cortex.c (bench) -- how fast the Cortex navigates a big graph, beside bare
 * SQLite queries of the same shape on the same file in the same run.  A
 * bench helper only: never linked into MW.
 *
 *   cortex [NODES [EDGES_PER_NODE]]      default 100000 x 10 = 1,000,000 edges
 *
 * Builds the graph through mw_cortex_apply (big transactions, facts in time
 * order, as a live tenant would write them), then measures p50/p99 of
 * 1-hop, 2-hop and full-text navigation from random keys.  The database
 * lives in a fresh directory under /tmp and is removed at the end. */
#include "cortex.h"
#include "mw.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* This thread's CPU time: on a shared machine, wall time also counts the
 * time spent waiting for a CPU. */
static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench cortex: %s: %s\n", what, msg);
  exit(1);
}

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct stats {
  double p50, p99, mean, cpu;
} stats;

static stats summarize(double *us, int n, double cpu_s) {
  stats s = {0, 0, 0, cpu_s / n * 1e6};
  qsort(us, (size_t)n, sizeof *us, dcmp);
  for (int i = 0; i < n; i++) s.mean += us[i];
  s.mean /= n;
  s.p50 = us[n / 2];
  s.p99 = us[(int)((double)n * 0.99)];
  return s;
}

static void line(const char *what, stats s, double extra, const char *unit) {
  printf("  %-46s p50 %8.1f us  p99 %8.1f us  mean %8.1f us  cpu %8.1f us", what, s.p50, s.p99, s.mean, s.cpu);
  if (unit) printf("   (%.0f %s)", extra, unit);
  printf("\n");
}

#define NWORDS 2000
static char words[NWORDS][12];

static void make_words(void) {
  static const char *cons = "bcdfghjklmnprstvz", *vow = "aeiou";
  for (int i = 0; i < NWORDS; i++) {
    int syl = 2 + (int)(rnd() % 2), k = 0;
    for (int j = 0; j < syl; j++) {
      words[i][k++] = cons[rnd() % 17];
      words[i][k++] = vow[rnd() % 5];
    }
    snprintf(words[i] + k, sizeof words[i] - (size_t)k, "%d", i % 10);   /* unique-ish */
  }
}

static const char *const RELS[] = {"knows", "likes", "owns", "cites", "follows", "mentors", "uses", "about"};
static const char *const KINDS[] = {"person", "repo", "topic", "source"};

/* Steps a bare statement to the end, reading every column by its type as an
 * application would (text as text, numbers as numbers); returns the rows. */
static int drain(sqlite3_stmt *st) {
  int rows = 0, rc;
  volatile double sink = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int nc = sqlite3_column_count(st);
    for (int i = 0; i < nc; i++) {
      switch (sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER: sink += (double)sqlite3_column_int64(st, i); break;
        case SQLITE_FLOAT: sink += sqlite3_column_double(st, i); break;
        case SQLITE_NULL: break;
        default: sink += sqlite3_column_text(st, i) ? sqlite3_column_bytes(st, i) : 0;
      }
    }
    rows++;
  }
  if (rc != SQLITE_DONE) die("bare query", sqlite3_errstr(rc));
  sqlite3_reset(st);
  (void)sink;
  return rows;
}

int main(int argc, char **argv) {
  int nodes = argc > 1 ? atoi(argv[1]) : 100000, per = argc > 2 ? atoi(argv[2]) : 10;
  if (nodes < 100 || per < 1) die("usage", "cortex [NODES>=100 [EDGES_PER_NODE>=1]]");
  char dir[] = "/tmp/mw_cortex_bench.XXXXXX", path[64], err[256];
  if (!mkdtemp(dir)) die("mkdtemp", "failed");
  snprintf(path, sizeof path, "%s/cortex.db", dir);
  make_words();

  mw_cortex *c;
  if (mw_cortex_open(path, 1, 5000, &c, err, sizeof err)) die("open", err);
  char body[512];
  int64_t cursor = 0, t0 = 1700000000000LL;
  double b0 = now();
  const int batch = 50000;
  /* Nodes, then edges, in time order; one fact per log entry. */
  for (int i = 0; i < nodes; i++) {
    if (cursor % batch == 0 && mw_cortex_begin(c)) die("begin", mw_cortex_errmsg(c));
    snprintf(body, sizeof body,
             "{\"node\":{\"key\":\"n:%06d\",\"kind\":\"%s\",\"label\":\"%s %s %s\",\"props\":{\"n\":%d}}}", i,
             KINDS[rnd() % 4], words[rnd() % NWORDS], words[rnd() % NWORDS], words[rnd() % NWORDS], i);
    cursor++;
    if (mw_cortex_apply(c, "bench", cursor, t0 + cursor * 10, body, strlen(body)))
      die("apply node", mw_cortex_errmsg(c));
    if (cursor % batch == 0 && mw_cortex_commit(c)) die("commit", mw_cortex_errmsg(c));
  }
  double b1 = now();
  for (int i = 0; i < nodes; i++) {
    for (int j = 0; j < per; j++) {
      if (cursor % batch == 0 && mw_cortex_begin(c)) die("begin", mw_cortex_errmsg(c));
      snprintf(body, sizeof body, "{\"edge\":{\"from\":\"n:%06d\",\"rel\":\"%s\",\"to\":\"n:%06d\",\"weight\":%d}}", i,
               RELS[rnd() % 8], (int)(rnd() % (uint64_t)nodes), 1 + (int)(rnd() % 5));
      cursor++;
      if (mw_cortex_apply(c, "bench", cursor, t0 + cursor * 10, body, strlen(body)))
        die("apply edge", mw_cortex_errmsg(c));
      if (cursor % batch == 0 && mw_cortex_commit(c)) die("commit", mw_cortex_errmsg(c));
    }
    if (i % 20000 == 19999) {
      fprintf(stderr, "  ... %d edges in %.0f s\n", (i + 1) * per, now() - b1);
    }
  }
  if (cursor % batch != 0 && mw_cortex_commit(c)) die("commit", mw_cortex_errmsg(c));
  double b2 = now();

  sqlite3 *db;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL)) die("bare open", sqlite3_errmsg(db));
  sqlite3_exec(db, "PRAGMA cache_size=-16384", NULL, NULL, NULL);
  sqlite3_stmt *cnt;
  int64_t ncur = 0, nver = 0;
  if (sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM edges_current), (SELECT count(*) FROM node_versions)"
                             " + (SELECT count(*) FROM edge_versions)", -1, &cnt, NULL) == SQLITE_OK &&
      sqlite3_step(cnt) == SQLITE_ROW) {
    ncur = sqlite3_column_int64(cnt, 0);
    nver = sqlite3_column_int64(cnt, 1);
  }
  sqlite3_finalize(cnt);
  struct stat sb;
  char wal[80];
  snprintf(wal, sizeof wal, "%s-wal", path);
  double mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1048576.0 : 0;
  printf("cortex bench: %d nodes, %lld edge facts (%lld current edges), %lld version rows, file %.0f MB\n", nodes,
         (long long)nodes * per, (long long)ncur, (long long)nver, mb);
  printf("  build via mw_cortex_apply: nodes %.1f s (%.0f facts/s), edges %.1f s (%.0f facts/s)\n", b1 - b0,
         nodes / (b1 - b0), b2 - b1, (double)nodes * per / (b2 - b1));

  /* Same-shaped bare queries on a second connection to the same file. */
  sqlite3_stmt *out1, *in1, *eout, *ein, *two, *fts;
  const char *q_out = "SELECT e.src, e.rel, e.dst, e.weight, e.props, e.trust, e.valid_from, e.actor, e.cursor,"
                      " n.key, n.kind, n.label, n.props, n.trust, n.valid_from, n.actor, n.cursor"
                      " FROM edges_current e JOIN nodes_current n ON n.key=e.dst WHERE e.src=?1";
  const char *q_in = "SELECT e.src, e.rel, e.dst, e.weight, e.props, e.trust, e.valid_from, e.actor, e.cursor,"
                     " n.key, n.kind, n.label, n.props, n.trust, n.valid_from, n.actor, n.cursor"
                     " FROM edges_current e JOIN nodes_current n ON n.key=e.src WHERE e.dst=?1";
  if (sqlite3_prepare_v2(db, q_out, -1, &out1, NULL) || sqlite3_prepare_v2(db, q_in, -1, &in1, NULL) ||
      sqlite3_prepare_v2(db, "SELECT * FROM edges_current WHERE src=?1", -1, &eout, NULL) ||
      sqlite3_prepare_v2(db, "SELECT * FROM edges_current WHERE dst=?1", -1, &ein, NULL) ||
      sqlite3_prepare_v2(db,
                         "WITH n1(k) AS (SELECT dst FROM edges_current WHERE src=?1"
                         "  UNION SELECT src FROM edges_current WHERE dst=?1)"
                         " SELECT e.* FROM n1 JOIN edges_current e ON e.src=n1.k"
                         " UNION ALL SELECT e.* FROM n1 JOIN edges_current e ON e.dst=n1.k",
                         -1, &two, NULL) ||
      sqlite3_prepare_v2(db, "SELECT rowid, bm25(nodes_fts) FROM nodes_fts WHERE nodes_fts MATCH ?1"
                             " ORDER BY rank LIMIT 20", -1, &fts, NULL))
    die("bare prepare", sqlite3_errmsg(db));

  enum { N1 = 20000, N2 = 1000, NF = 3000 };
  double *us = malloc(sizeof(double) * N1), *ub = malloc(sizeof(double) * N1), *ue = malloc(sizeof(double) * N1);
  mw_buf out = {0};
  char key[32];
  double bytes = 0, rows = 0;

  /* warm both connections */
  for (int i = 0; i < 2000; i++) {
    snprintf(key, sizeof key, "n:%06d", (int)(rnd() % (uint64_t)nodes));
    mw_nav n = {.from = key, .limit = 500};
    out.len = 0;
    if (mw_cortex_navigate(c, &n, &out)) die("navigate", mw_cortex_errmsg(c));
    sqlite3_bind_text(out1, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(in1, 1, key, -1, SQLITE_STATIC);
    drain(out1);
    drain(in1);
  }

  printf("1-hop (depth 1, limit 500, both directions), %d random keys:\n", N1);
  double cu = 0, cb = 0, ce = 0;
  for (int i = 0; i < N1; i++) {
    snprintf(key, sizeof key, "n:%06d", (int)(rnd() % (uint64_t)nodes));
    mw_nav n = {.from = key, .limit = 500};
    out.len = 0;
    double ca = cpu(), a = now();
    if (mw_cortex_navigate(c, &n, &out)) die("navigate", mw_cortex_errmsg(c));
    double b = now(), cb1 = cpu();
    sqlite3_bind_text(out1, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(in1, 1, key, -1, SQLITE_STATIC);
    int r = drain(out1) + drain(in1);
    double d = now(), cd = cpu();
    sqlite3_bind_text(eout, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(ein, 1, key, -1, SQLITE_STATIC);
    drain(eout);
    drain(ein);
    double e = now(), cee = cpu();
    cu += cb1 - ca;
    cb += cd - cb1;
    ce += cee - cd;
    us[i] = (b - a) * 1e6;
    ub[i] = (d - b) * 1e6;
    ue[i] = (e - d) * 1e6;
    bytes += (double)out.len;
    rows += r;
  }
  line("mw_cortex_navigate -> canonical JSON", summarize(us, N1, cu), bytes / N1, "bytes out, mean");
  line("bare: edges JOIN nodes, src=? + dst=?", summarize(ub, N1, cb), rows / N1, "rows, mean");
  line("bare: SELECT * FROM edges_current src=?, dst=?", summarize(ue, N1, ce), 0, NULL);

  printf("2-hop (depth 2, limit 500), %d random keys:\n", N2);
  bytes = rows = 0;
  cu = cb = 0;
  for (int i = 0; i < N2; i++) {
    snprintf(key, sizeof key, "n:%06d", (int)(rnd() % (uint64_t)nodes));
    mw_nav n = {.from = key, .depth = 2, .limit = 500};
    out.len = 0;
    double ca = cpu(), a = now();
    if (mw_cortex_navigate(c, &n, &out)) die("navigate", mw_cortex_errmsg(c));
    double b = now(), cb1 = cpu();
    sqlite3_bind_text(two, 1, key, -1, SQLITE_STATIC);
    rows += drain(two);
    double d = now(), cd = cpu();
    cu += cb1 - ca;
    cb += cd - cb1;
    us[i] = (b - a) * 1e6;
    ub[i] = (d - b) * 1e6;
    bytes += (double)out.len;
  }
  line("mw_cortex_navigate -> canonical JSON", summarize(us, N2, cu), bytes / N2, "bytes out, mean");
  line("bare: 2-hop edges (CTE, no node rows)", summarize(ub, N2, cb), rows / N2, "rows, mean");

  printf("full text (hint of 2 words, limit 20), %d random hints:\n", NF);
  bytes = rows = 0;
  double seeds = 0;
  cu = cb = 0;
  for (int i = 0; i < NF; i++) {
    const char *w1 = words[rnd() % NWORDS], *w2 = words[rnd() % NWORDS];
    char hint[64], match[80];
    snprintf(hint, sizeof hint, "%s %s", w1, w2);
    snprintf(match, sizeof match, "\"%s\" OR \"%s\"", w1, w2);
    mw_nav n = {.hint = hint, .limit = 20};
    out.len = 0;
    double ca = cpu(), a = now();
    if (mw_cortex_navigate(c, &n, &out)) die("navigate", mw_cortex_errmsg(c));
    double b = now(), cb1 = cpu();
    sqlite3_bind_text(fts, 1, match, -1, SQLITE_TRANSIENT);
    rows += drain(fts);
    double d = now(), cd = cpu();
    cu += cb1 - ca;
    cb += cd - cb1;
    us[i] = (b - a) * 1e6;
    ub[i] = (d - b) * 1e6;
    bytes += (double)out.len;
    const char *p = out.p;
    while (p && (p = strstr(p, "\"score\":"))) seeds++, p += 8;
  }
  line("mw_cortex_navigate (bm25 x recency, 1 hop)", summarize(us, NF, cu), bytes / NF, "bytes out, mean");
  line("bare: MATCH ... ORDER BY rank LIMIT 20", summarize(ub, NF, cb), rows / NF, "rows, mean");
  printf("  (mean seeds per hint: %.1f)\n", seeds / NF);

  sqlite3_finalize(out1);
  sqlite3_finalize(in1);
  sqlite3_finalize(eout);
  sqlite3_finalize(ein);
  sqlite3_finalize(two);
  sqlite3_finalize(fts);
  sqlite3_close(db);
  mw_cortex_close(c);
  mw__buf_free(&out);
  free(us);
  free(ub);
  free(ue);
  char shm[80];
  snprintf(shm, sizeof shm, "%s-shm", path);
  remove(path);
  remove(wal);
  remove(shm);
  rmdir(dir);
  return 0;
}
