/* extra_cortex.c (bench) -- builds a Cortex that is KEPT at a given path, for
 * bench/extra.sh (the facts leg of a wake on a large Cortex).  A bench helper
 * only: never linked into MW.
 *
 *   extra_cortex PATH NODES EDGES_PER_NODE HINTS_FILE
 *
 * Same graph as bench/cortex.c: NODES node facts (labels: three words from a
 * 2,000-word vocabulary), then NODES*EDGES_PER_NODE edge facts, all applied
 * through mw_cortex_apply with actor "bench", one fact per cursor, in time
 * order, 50,000 per transaction.  Sets the applied cursor of "bench" to the
 * last one.  Writes 500 two-word hints (each word taken from a random node's
 * label, so each matches) to HINTS_FILE, one a line. */
#include "cortex.h"
#include "mw.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
static void die(const char *what, const char *msg) {
  fprintf(stderr, "extra_cortex: %s: %s\n", what, msg);
  exit(1);
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
    snprintf(words[i] + k, sizeof words[i] - (size_t)k, "%d", i % 10);
  }
}
static const char *const RELS[] = {"knows", "likes", "owns", "cites", "follows", "mentors", "uses", "about"};
static const char *const KINDS[] = {"person", "repo", "topic", "source"};

int main(int argc, char **argv) {
  if (argc != 5) die("usage", "extra_cortex PATH NODES EDGES_PER_NODE HINTS_FILE");
  const char *path = argv[1];
  int nodes = atoi(argv[2]), per = atoi(argv[3]);
  if (nodes < 100 || per < 1) die("usage", "NODES >= 100, EDGES_PER_NODE >= 1");
  make_words();
  int (*lab)[3] = malloc(sizeof *lab * (size_t)nodes);
  char err[256], body[512];
  mw_cortex *c;
  if (mw_cortex_open(path, 1, 5000, &c, err, sizeof err)) die("open", err);
  int64_t cursor = 0, t0 = 1700000000000LL;
  const int batch = 50000;
  double b0 = now();
  for (int i = 0; i < nodes; i++) {
    if (cursor % batch == 0 && mw_cortex_begin(c)) die("begin", mw_cortex_errmsg(c));
    int k = (int)(rnd() % 4);
    for (int w = 0; w < 3; w++) lab[i][w] = (int)(rnd() % NWORDS);
    snprintf(body, sizeof body,
             "{\"node\":{\"key\":\"n:%06d\",\"kind\":\"%s\",\"label\":\"%s %s %s\",\"props\":{\"n\":%d}}}", i,
             KINDS[k], words[lab[i][0]], words[lab[i][1]], words[lab[i][2]], i);
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
    if (i % 20000 == 19999) fprintf(stderr, "  ... %d edges in %.0f s\n", (i + 1) * per, now() - b1);
  }
  if (cursor % batch == 0 && mw_cortex_begin(c)) die("begin", mw_cortex_errmsg(c));
  if (mw_cortex_set_applied(c, "bench", cursor)) die("set_applied", mw_cortex_errmsg(c));
  if (mw_cortex_commit(c)) die("commit", mw_cortex_errmsg(c));
  double b2 = now();
  mw_cortex_close(c);
  FILE *f = fopen(argv[4], "w");
  if (!f) die("hints", argv[4]);
  for (int i = 0; i < 500; i++) {
    int a = (int)(rnd() % (uint64_t)nodes), b = (int)(rnd() % (uint64_t)nodes);
    fprintf(f, "%s %s\n", words[lab[a][rnd() % 3]], words[lab[b][rnd() % 3]]);
  }
  fclose(f);
  printf("build_nodes %d\nbuild_edges %lld\nbuild_s %.1f\nbuild_facts_per_s %.0f\nlast_cursor %lld\n", nodes,
         (long long)nodes * per, b2 - b0, (double)cursor / (b2 - b0), (long long)cursor);
  return 0;
}
