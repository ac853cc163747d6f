/* cortex_test.c -- checks the Cortex (runtime/cortex.c): versions and their
 * chains, order independence, navigation, hostile hints, and the ways a
 * Cortex file can fail to open.  Prints TAP-style lines; exits 0 only if
 * every case passes.  Works in a fresh directory under /tmp, removed at the
 * end. */
#include "cortex.h"
#include "mw.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int passed, failed, skipped;
static char dir[256];

static void report(int ok, const char *name, const char *got) {
  printf("%sok %d - %s\n", ok ? "" : "not ", passed + failed + skipped + 1, name);
  if (!ok && got) printf("#   got: %.2000s\n", got);
  if (ok) passed++;
  else failed++;
}

static void skip(const char *name, const char *why) {
  printf("ok %d - %s # SKIP %s\n", passed + failed + skipped + 1, name, why);
  skipped++;
}

static const char *path_of(const char *name) {
  static char p[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static void rm_db(const char *path) {
  char p[600];
  remove(path);
  snprintf(p, sizeof p, "%s-wal", path);
  remove(p);
  snprintf(p, sizeof p, "%s-shm", path);
  remove(p);
}

static mw_cortex *fresh(const char *name) {
  mw_cortex *c = NULL;
  char err[256];
  rm_db(path_of(name));
  if (mw_cortex_open(path_of(name), 1, 1000, &c, err, sizeof err)) {
    printf("# cannot open %s: %s\n", name, err);
    exit(1);
  }
  return c;
}

static int apply(mw_cortex *c, const char *actor, int64_t cursor, int64_t ts, const char *body) {
  return mw_cortex_apply(c, actor, cursor, ts, body, strlen(body));
}

/* navigate into a shared buffer; NULL on failure (code in *rcp). */
static mw_buf out;
static char *nav(mw_cortex *c, const mw_nav *n, int *rcp) {
  out.len = 0;
  int rc = mw_cortex_navigate(c, n, &out);
  if (rcp) *rcp = rc;
  if (rc) return NULL;
  mw__buf_addc(&out, '\0');
  return out.p;
}

static char *dump(mw_cortex *c) {
  mw_buf out = {0};
  if (mw_cortex_dump(c, &out)) {
    mw__buf_free(&out);
    return NULL;
  }
  mw__buf_addc(&out, '\0');
  return out.p;
}

static int count(const char *s, const char *sub) {
  int n = 0;
  if (!s) return -1;
  for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
  return n;
}

/* a appears before b in s (both present). */
static int before(const char *s, const char *a, const char *b) {
  const char *pa = s ? strstr(s, a) : NULL, *pb = s ? strstr(s, b) : NULL;
  return pa && pb && pa < pb;
}

/* Side condition: the handle left no transaction or lock behind -- another
 * connection can take the write lock at once. */
static int unlocked(const char *path) {
  sqlite3 *db;
  int ok = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
           sqlite3_exec(db, "BEGIN IMMEDIATE; ROLLBACK", NULL, NULL, NULL) == SQLITE_OK;
  sqlite3_close(db);
  return ok;
}

/* The FTS index agrees with nodes_current (external content check). */
static int fts_ok(const char *path) {
  sqlite3 *db;
  int ok = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
           sqlite3_exec(db, "INSERT INTO nodes_fts(nodes_fts, rank) VALUES('integrity-check', 1)", NULL, NULL,
                        NULL) == SQLITE_OK;
  if (!ok) printf("#   fts: %s\n", sqlite3_errmsg(db));
  sqlite3_close(db);
  return ok;
}

#define NODE(k, kind, label) "{\"node\":{\"key\":\"" k "\",\"kind\":\"" kind "\",\"label\":\"" label "\"}}"
#define EDGE(f, r, t) "{\"edge\":{\"from\":\"" f "\",\"rel\":\"" r "\",\"to\":\"" t "\"}}"

/* ---- cases --------------------------------------------------------------- */

static void t_basic(void) {
  mw_cortex *c = fresh("basic.db");
  int rc = apply(c, "arc", 1, 1000,
                 "{\"node\":{\"key\":\"p:ana\",\"kind\":\"person\",\"label\":\"Ana Silva\","
                 "\"props\":{\"role\":\"mentor\",\"age\":40}}}");
  int rc2 = apply(c, "arc", 2, 2000, "{\"edge\":{\"from\":\"p:ana\",\"rel\":\"mentors\",\"to\":\"p:bob\","
                                     "\"weight\":0.5,\"props\":{\"since\":2020}},\"trust\":\"fact\"}");
  mw_nav n = {.from = "p:ana"};
  char *s = nav(c, &n, &rc);
  report(rc2 == 0 && s &&
             strstr(s, "{\"actor\":\"arc\",\"cursor\":1,\"key\":\"p:ana\",\"kind\":\"person\",\"label\":\"Ana Silva\","
                       "\"props\":{\"age\":40,\"role\":\"mentor\"},\"trust\":\"claim\",\"valid_from\":1000,"
                       "\"valid_to\":null}") &&
             strstr(s, "{\"edges\":[{\"actor\":\"arc\",\"cursor\":2,\"from\":\"p:ana\",\"props\":{\"since\":2020},"
                       "\"rel\":\"mentors\",\"to\":\"p:bob\",\"trust\":\"fact\",\"valid_from\":2000,"
                       "\"valid_to\":null,\"weight\":0.5}]"),
         "node and edge apply, read back through navigate (canonical JSON)", s);
  report(s && strstr(s, "\"key\":\"p:bob\",\"kind\":\"unknown\",\"label\":\"p:bob\",\"props\":{},\"trust\":\"claim\"") &&
             strstr(s, "{\"actor\":\"arc\",\"cursor\":2,\"key\":\"p:bob\""),
         "an edge to a missing node creates it (unknown, claim, the edge's provenance)", s);

  char *d1 = dump(c);
  int r1 = apply(c, "arc", 1, 1000,
                 "{\"node\":{\"key\":\"p:ana\",\"kind\":\"person\",\"label\":\"Ana Silva\","
                 "\"props\":{\"role\":\"mentor\",\"age\":40}}}");
  int r2 = apply(c, "arc", 2, 2000, "{ \"trust\": \"fact\", \"edge\": {\"to\":\"p:bob\",\"rel\":\"mentors\","
                                    "\"from\":\"p:ana\",\"weight\":0.5,\"props\":{\"since\":2020}}}");
  char *d2 = dump(c);
  report(rc == 0 && r1 == 0 && r2 == 0 && d1 && d2 && !strcmp(d1, d2), "applying the same entries twice is a no-op",
         d2);
  free(d1);
  free(d2);
  report(fts_ok(path_of("basic.db")) && unlocked(path_of("basic.db")), "side: FTS in sync, no lock left", NULL);
  mw_cortex_close(c);
}

static void t_supersede(void) {
  mw_cortex *c = fresh("supersede.db");
  int rc = apply(c, "arc", 1, 1000, NODE("n:x", "thing", "first label"));
  rc |= apply(c, "arc", 2, 3000, NODE("n:x", "thing", "third label"));
  rc |= apply(c, "arc", 3, 2000, NODE("n:x", "thing", "second label"));   /* arrives late */
  mw_nav n = {.from = "n:x"};
  char *s = nav(c, &n, NULL);
  report(rc == 0 && s && count(s, "\"key\":\"n:x\"") == 1 && strstr(s, "\"label\":\"third label\"") &&
             strstr(s, "\"valid_from\":3000,\"valid_to\":null"),
         "supersession: navigate returns only the current version", s);
  n.history = 1;
  s = nav(c, &n, NULL);
  report(s && count(s, "\"key\":\"n:x\"") == 3 &&
             strstr(s, "\"label\":\"first label\",\"props\":{},\"trust\":\"claim\",\"valid_from\":1000,\"valid_to\":2000") &&
             strstr(s, "\"label\":\"second label\",\"props\":{},\"trust\":\"claim\",\"valid_from\":2000,\"valid_to\":3000") &&
             before(s, "first label", "second label") && before(s, "second label", "third label"),
         "history=1 shows superseded versions with valid_to (late arrival closes the chain)", s);
  mw_nav h = {.hint = "first"};
  s = nav(c, &h, NULL);
  char *s2 = s ? strdup(s) : NULL;
  h.hint = "third";
  s = nav(c, &h, NULL);
  report(s2 && !strcmp(s2, "{\"edges\":[],\"nodes\":[]}") && s && strstr(s, "third label"),
         "the full-text index follows the current version only", s2);
  free(s2);
  report(fts_ok(path_of("supersede.db")) && unlocked(path_of("supersede.db")), "side: FTS in sync, no lock left",
         NULL);
  mw_cortex_close(c);
}

static void t_retract_promote(void) {
  mw_cortex *c = fresh("retract.db");
  int rc = apply(c, "arc", 1, 1000, NODE("a", "t", "alpha"));
  rc |= apply(c, "arc", 2, 1100, NODE("b", "t", "bravo"));
  rc |= apply(c, "arc", 3, 1200, EDGE("a", "r", "b"));
  rc |= apply(c, "arc", 4, 1300, "{\"retract\":{\"edge\":{\"from\":\"a\",\"rel\":\"r\",\"to\":\"b\"}}}");
  mw_nav n = {.from = "a"};
  char *s = nav(c, &n, NULL);
  report(rc == 0 && s && count(s, "\"from\"") == 0 && count(s, "\"key\"") == 1, "retracting an edge removes it", s);

  rc = apply(c, "arc", 5, 1400, EDGE("a", "r", "b"));
  rc |= apply(c, "arc", 6, 1500, "{\"retract\":{\"node\":\"b\"}}");
  n.from = "a";
  s = nav(c, &n, NULL);
  int gone = s && count(s, "\"from\"") == 0 && count(s, "\"key\"") == 1;
  n.from = "b";
  s = nav(c, &n, NULL);
  report(rc == 0 && gone && s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"),
         "retracting a node hides it and its edges (never dangling)", s);

  rc = apply(c, "arc", 7, 1600, EDGE("a", "r2", "b"));
  n.from = "b";
  s = nav(c, &n, NULL);
  /* the new edge, and a-r-b (stated before the retraction, never retracted) shows again */
  report(rc == 0 && s && strstr(s, "\"key\":\"b\",\"kind\":\"unknown\"") && count(s, "\"from\"") == 2,
         "an edge after a retraction brings the node back as unknown", s);

  rc = apply(c, "ver", 1, 1700, "{\"promote\":{\"node\":\"a\"}}");
  n.from = "a";
  n.history = 1;
  s = nav(c, &n, NULL);
  report(rc == 0 && s &&
             strstr(s, "{\"actor\":\"ver\",\"cursor\":1,\"key\":\"a\",\"kind\":\"t\",\"label\":\"alpha\",\"props\":{},"
                       "\"trust\":\"fact\",\"valid_from\":1700,\"valid_to\":null}") &&
             strstr(s, "\"label\":\"alpha\",\"props\":{},\"trust\":\"claim\",\"valid_from\":1000,\"valid_to\":1700"),
         "promote: a new version copying the current one with trust fact", s);
  rc = apply(c, "ver", 2, 1800, "{\"promote\":{\"edge\":{\"from\":\"a\",\"rel\":\"r2\",\"to\":\"b\"}}}");
  n.history = 0;
  s = nav(c, &n, NULL);
  report(rc == 0 && s && strstr(s, "\"rel\":\"r2\",\"to\":\"b\",\"trust\":\"fact\",\"valid_from\":1800"),
         "promote an edge", s);
  char *d1 = dump(c);
  int r1 = apply(c, "ver", 3, 1900, "{\"promote\":{\"node\":\"nope\"}}");
  int r2 = apply(c, "ver", 4, 1900, "{\"promote\":{\"edge\":{\"from\":\"a\",\"rel\":\"nope\",\"to\":\"b\"}}}");
  char *d2 = dump(c);
  report(r1 == MW_EINVAL && strstr(mw_cortex_errmsg(c), "promote of a missing edge") && r2 == MW_EINVAL &&
             d1 && d2 && !strcmp(d1, d2),
         "promote of a missing node or edge is MW_EINVAL and writes nothing", mw_cortex_errmsg(c));
  free(d1);
  free(d2);
  r1 = apply(c, "ver", 1, 1700, "{\"promote\":{\"node\":\"a\"}}");
  report(r1 == 0, "re-applying a promote is a no-op", mw_cortex_errmsg(c));
  report(fts_ok(path_of("retract.db")) && unlocked(path_of("retract.db")), "side: FTS in sync, no lock left", NULL);
  mw_cortex_close(c);
}

/* ---- order independence ----------------------------------------------------- */

typedef struct entry {
  char actor[8];
  int64_t cursor, ts;
  char body[512];
} entry;

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* A mixed history: nodes stated and restated by three actors with clashing
 * timestamps, edges (some naming nodes never stated), retractions of nodes
 * and edges, promotes, and entries holding several facts.  Promotes target
 * only keys stated at ts 1 and never retracted, so a promote is accepted in
 * any order once its key exists (a rebuild applies them as they come). */
static int make_entries(entry *e, int max) {
  static const char *const keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"};
  static const char *const rels[] = {"knows", "likes", "owns"};
  int n = 0;
  int64_t cur[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {   /* the promotable base, at ts 1 */
    entry *x = &e[n++];
    snprintf(x->actor, sizeof x->actor, "a0");
    x->cursor = ++cur[0];
    x->ts = 1;
    snprintf(x->body, sizeof x->body, "{\"node\":{\"key\":\"k%d\",\"kind\":\"base\",\"label\":\"base %d\"}}", i, i);
  }
  entry *x = &e[n++];
  snprintf(x->actor, sizeof x->actor, "a0");
  x->cursor = ++cur[0];
  x->ts = 1;
  snprintf(x->body, sizeof x->body, EDGE("k0", "knows", "k1"));
  while (n < max) {
    int a = (int)(next_rand() % 3);
    x = &e[n++];
    snprintf(x->actor, sizeof x->actor, "a%d", a);
    x->cursor = ++cur[a];
    x->ts = 2 + (int64_t)(next_rand() % 12);   /* clashes on purpose */
    int kind = (int)(next_rand() % 10);
    const char *k = keys[next_rand() % 8], *k2 = keys[next_rand() % 8], *r = rels[next_rand() % 3];
    const char *retractable = keys[5 + next_rand() % 3];
    switch (kind) {
      case 0: case 1: case 2:
        snprintf(x->body, sizeof x->body,
                 "{\"node\":{\"key\":\"%s\",\"kind\":\"k%d\",\"label\":\"word%d %s\",\"props\":{\"n\":%d}}%s}", k,
                 (int)(next_rand() % 3), (int)(next_rand() % 5), k, (int)(next_rand() % 100),
                 next_rand() % 2 ? ",\"trust\":\"fact\"" : "");
        break;
      case 3: case 4:
        snprintf(x->body, sizeof x->body, "{\"edge\":{\"from\":\"%s\",\"rel\":\"%s\",\"to\":\"%s\",\"weight\":%d}}", k,
                 r, next_rand() % 4 ? k2 : "u9", (int)(next_rand() % 5));
        break;
      case 5:
        snprintf(x->body, sizeof x->body, "{\"retract\":{\"node\":\"%s\"}}", retractable);
        break;
      case 6:
        snprintf(x->body, sizeof x->body, "{\"retract\":{\"edge\":{\"from\":\"%s\",\"rel\":\"%s\",\"to\":\"%s\"}}}", k,
                 r, k2);
        break;
      case 7:
        snprintf(x->body, sizeof x->body, "{\"promote\":{\"node\":\"k%d\"}}", (int)(next_rand() % 3));
        break;
      case 8:
        snprintf(x->body, sizeof x->body, "{\"promote\":{\"edge\":{\"from\":\"k0\",\"rel\":\"knows\",\"to\":\"k1\"}}}");
        break;
      default:
        snprintf(x->body, sizeof x->body,
                 "{\"facts\":[{\"node\":{\"key\":\"%s\",\"kind\":\"multi\",\"label\":\"many %s\"}},"
                 "{\"edge\":{\"from\":\"%s\",\"rel\":\"%s\",\"to\":\"%s\"}},{\"retract\":{\"node\":\"%s\"}}]}",
                 k, k, k2, r, retractable, retractable);
    }
  }
  return n;
}

/* Applies in the given order, in batches inside begin/commit; an entry that
 * fails with MW_EINVAL (a promote before its key exists) is retried after
 * the others, as a rebuild would. */
static int apply_all(mw_cortex *c, entry *e, const int *order, int n) {
  int *pending = malloc(n * sizeof *pending), np = 0;
  for (int i = 0; i < n; i++) pending[np++] = order[i];
  for (int round = 0; np && round < 10; round++) {
    int left = 0;
    for (int i = 0; i < np; i++) {
      if (i % 7 == 0 && mw_cortex_begin(c)) return -1;
      entry *x = &e[pending[i]];
      int rc = apply(c, x->actor, x->cursor, x->ts, x->body);
      if (rc == MW_EINVAL) pending[left++] = pending[i];
      else if (rc) {
        printf("#   apply failed: %s (%s)\n", mw_cortex_errmsg(c), x->body);
        free(pending);
        return -1;
      }
      if ((i % 7 == 6 || i == np - 1) && mw_cortex_commit(c)) return -1;
    }
    np = left;
  }
  free(pending);
  return np;
}

static int by_time(const void *pa, const void *pb, entry *e) {
  const entry *a = &e[*(const int *)pa], *b = &e[*(const int *)pb];
  if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  int r = strcmp(a->actor, b->actor);
  if (r) return r;
  return (a->cursor > b->cursor) - (a->cursor < b->cursor);
}
static entry *sort_entries;
static int by_time_cmp(const void *a, const void *b) { return by_time(a, b, sort_entries); }

static void t_order(void) {
  enum { N = 160 };
  entry *e = calloc(N, sizeof *e);
  int order[N];
  int n = make_entries(e, N);
  for (int i = 0; i < n; i++) order[i] = i;
  sort_entries = e;
  qsort(order, n, sizeof *order, by_time_cmp);
  mw_cortex *c = fresh("order.db");
  int left = apply_all(c, e, order, n);
  char *ref = dump(c);
  mw_nav h = {.hint = "word1 word3 many base", .limit = 50};
  char *s = nav(c, &h, NULL);
  char *refnav = s ? strdup(s) : NULL;
  mw_nav a = {.from = "k0", .depth = 3, .limit = 50, .history = 1};
  s = nav(c, &a, NULL);
  char *refaround = s ? strdup(s) : NULL;
  report(left == 0 && ref && refnav && refaround && count(ref, "\"origin\":\"promoted\"") > 0 &&
             count(ref, "\"origin\":\"implied\",\"props\":{},\"retract\":0,\"trust\":\"claim\",\"valid_from\"") > 0 &&
             count(ref, "\"retract\":1") > 0,
         "order: reference history applied in time order", ref ? NULL : mw_cortex_errmsg(c));
  int same = 1, samenav = 1, rounds = 12;
  for (int round = 0; round < rounds; round++) {
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(next_rand() % (uint64_t)(i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    mw_cortex *d = c;
    if (round % 4 == 3) d = fresh("order2.db");
    else if (mw_cortex_clear(c)) same = 0;
    left = apply_all(d, e, order, n);
    char *got = dump(d);
    if (left != 0 || !got || strcmp(got, ref)) {
      if (same) report(0, "order: shuffled dump differs", got);
      same = 0;
    }
    free(got);
    s = nav(d, &h, NULL);
    if (!s || strcmp(s, refnav)) samenav = 0;
    s = nav(d, &a, NULL);
    if (!s || strcmp(s, refaround)) samenav = 0;
    if (d != c) {
      report(fts_ok(path_of("order2.db")), "side: FTS in sync after a shuffled rebuild", NULL);
      mw_cortex_close(d);
    }
  }
  report(same, "order independence: 12 shuffled applies give the same dump byte for byte", NULL);
  report(samenav, "order independence: navigate (hint and from, history) gives the same bytes", NULL);
  /* and everything once more, in yet another order: nothing changes */
  left = apply_all(c, e, order, n);
  char *again = dump(c);
  report(left == 0 && again && !strcmp(again, ref), "re-applying the whole history changes nothing", NULL);
  free(again);
  report(fts_ok(path_of("order.db")) && unlocked(path_of("order.db")), "side: FTS in sync, no lock left", NULL);
  free(ref);
  free(refnav);
  free(refaround);
  free(e);
  mw_cortex_close(c);
}

/* ---- navigation ----------------------------------------------------------------- */

/*   d -knows-> a -knows-> b -knows-> e -knows-> g
 *              a -likes-> c -knows-> f           z (alone) */
static mw_cortex *small_graph(void) {
  mw_cortex *c = fresh("graph.db");
  const char *nodes[] = {"a", "b", "c", "d", "e", "f", "g", "z"};
  int64_t cur = 0;
  char body[256];
  for (int i = 0; i < 8; i++) {
    snprintf(body, sizeof body, "{\"node\":{\"key\":\"%s\",\"kind\":\"t\",\"label\":\"node %s\"}}", nodes[i], nodes[i]);
    cur++;
    apply(c, "arc", cur, 100 + cur, body);
  }
  const char *edges[][3] = {{"a", "knows", "b"}, {"a", "likes", "c"}, {"d", "knows", "a"},
                            {"b", "knows", "e"}, {"c", "knows", "f"}, {"e", "knows", "g"}};
  for (int i = 0; i < 6; i++) {
    snprintf(body, sizeof body, "{\"edge\":{\"from\":\"%s\",\"rel\":\"%s\",\"to\":\"%s\"}}", edges[i][0],
             edges[i][1], edges[i][2]);
    cur++;
    apply(c, "arc", cur, 100 + cur, body);
  }
  return c;
}

static int has_keys(const char *s, const char *const *keys, int n) {
  if (!s || count(s, "\"key\":") != n) return 0;
  for (int i = 0; i < n; i++) {
    char k[64];
    snprintf(k, sizeof k, "\"key\":\"%s\"", keys[i]);
    if (count(s, k) != 1) return 0;
  }
  return 1;
}

static void t_neighbours(void) {
  mw_cortex *c = small_graph();
  int rc;
  mw_nav n = {.from = "a"};
  char *s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "c", "d"}, 4) && count(s, "\"from\":") == 3 &&
             before(s, "\"key\":\"a\"", "\"key\":\"b\"") && before(s, "\"key\":\"c\"", "\"key\":\"d\"") &&
             before(s, "\"from\":\"a\",\"props\":{},\"rel\":\"knows\"", "\"from\":\"a\",\"props\":{},\"rel\":\"likes\"") &&
             before(s, "\"rel\":\"likes\"", "\"from\":\"d\""),
         "neighbours depth 1, both directions, sorted (nodes by key, edges by from/rel/to)", s);
  const char *knows[] = {"knows"};
  n.rels = knows;
  n.nrels = 1;
  s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "d"}, 3) && count(s, "\"from\":") == 2,
         "neighbours depth 1 with a relation filter", s);
  n.nrels = 0;
  n.depth = 2;
  s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "c", "d", "e", "f"}, 6) && count(s, "\"from\":") == 5,
         "neighbours depth 2", s);
  n.rels = knows;
  n.nrels = 1;
  s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "d", "e"}, 4) && count(s, "\"from\":") == 3,
         "neighbours depth 2 with a relation filter", s);
  n.nrels = 0;
  n.limit = 3;
  s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "c"}, 3) && count(s, "\"from\":") == 2,
         "neighbours cut to limit (BFS order; edges only between kept nodes)", s);
  n.limit = 0;
  n.depth = 4;
  s = nav(c, &n, &rc);
  report(has_keys(s, (const char *[]){"a", "b", "c", "d", "e", "f", "g"}, 7), "neighbours depth 4 reach g, not z", s);
  mw_nav m = {.from = "nobody"};
  s = nav(c, &m, &rc);
  report(s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"), "neighbours of a missing key: empty", s);

  mw_nav p = {.from = "a", .to = "g"};
  s = nav(c, &p, &rc);
  report(s && count(s, "\"key\":") == 4 && before(s, "\"key\":\"a\"", "\"key\":\"b\"") &&
             before(s, "\"key\":\"b\"", "\"key\":\"e\"") && before(s, "\"key\":\"e\"", "\"key\":\"g\"") &&
             count(s, "\"from\":") == 3 && before(s, "\"from\":\"a\"", "\"from\":\"b\"") &&
             before(s, "\"from\":\"b\"", "\"from\":\"e\""),
         "shortest path a -> g: nodes and edges in path order", s);
  p.from = "f";
  p.to = "d";
  s = nav(c, &p, &rc);
  report(s && count(s, "\"key\":") == 4 && before(s, "\"key\":\"f\"", "\"key\":\"c\"") &&
             before(s, "\"key\":\"c\"", "\"key\":\"a\"") && before(s, "\"key\":\"a\"", "\"key\":\"d\"") &&
             before(s, "\"from\":\"c\"", "\"from\":\"a\"") && before(s, "\"from\":\"a\"", "\"from\":\"d\""),
         "shortest path f -> d walks edges against their direction", s);
  p.rels = knows;
  p.nrels = 1;
  s = nav(c, &p, &rc);
  report(s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"), "no path under a relation filter: empty", s);
  p.nrels = 0;
  p.to = "z";
  s = nav(c, &p, &rc);
  report(s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"), "no path to an isolated node: empty", s);
  p.to = "f";
  s = nav(c, &p, &rc);
  report(s && count(s, "\"key\":") == 1 && count(s, "\"from\":") == 0, "path from a node to itself", s);

  mw_nav bad = {.from = "a b"};
  int r1 = mw_cortex_navigate(c, &bad, &(mw_buf){0});
  const char *badrel[] = {"no good"};
  mw_nav bad2 = {.from = "a", .rels = badrel, .nrels = 1};
  mw_buf out = {0};
  mw__buf_addstr(&out, "keep");
  int r2 = mw_cortex_navigate(c, &bad2, &out);
  mw_nav bad3 = {.from = "a", .depth = 5};
  int r3 = mw_cortex_navigate(c, &bad3, &out);
  mw_nav bad4 = {.to = "a"};
  int r4 = mw_cortex_navigate(c, &bad4, &out);
  report(r1 == MW_EINVAL && r2 == MW_EINVAL && r3 == MW_EINVAL && r4 == MW_EINVAL && out.len == 4 &&
             !strcmp(out.p, "keep"),
         "navigate refuses bad keys, relations and depth, leaving out as it was", mw_cortex_errmsg(c));
  mw__buf_free(&out);
  mw_nav none = {0};
  s = nav(c, &none, &rc);
  report(s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"), "navigate with neither from nor hint: empty", s);
  report(unlocked(path_of("graph.db")), "side: no lock left after navigation", NULL);
  mw_cortex_close(c);

  /* a hub with 300 spokes (the visited sets grow several times) */
  c = fresh("hub.db");
  char body[200];
  mw_cortex_begin(c);
  for (int i = 0; i < 300; i++) {
    snprintf(body, sizeof body, "{\"edge\":{\"from\":\"hub\",\"rel\":\"%s\",\"to\":\"s%03d\"}}",
             i % 3 == 0 ? "knows" : i % 3 == 1 ? "likes" : "owns", i);
    apply(c, "arc", i + 1, 1000 + i, body);
  }
  mw_cortex_commit(c);
  mw_nav hn = {.from = "hub", .limit = 500};
  s = nav(c, &hn, &rc);
  int all = s && count(s, "\"key\":") == 301 && count(s, "\"from\":\"hub\"") == 300 &&
            before(s, "\"key\":\"s000\"", "\"key\":\"s299\"");
  hn.limit = 50;
  s = nav(c, &hn, &rc);
  report(all && s && count(s, "\"key\":") == 50 && count(s, "\"from\":") == 49,
         "a hub with 300 neighbours: all of them under limit 500, 50 nodes and 49 edges under limit 50", s);
  const char *two[] = {"owns", "knows", "owns"}, *rev[] = {"knows", "owns"};
  hn.limit = 500;
  hn.rels = two;
  hn.nrels = 3;
  s = nav(c, &hn, &rc);
  char *a = s ? strdup(s) : NULL;
  hn.rels = rev;
  hn.nrels = 2;
  s = nav(c, &hn, &rc);
  report(a && s && !strcmp(a, s) && count(s, "\"key\":") == 201 && count(s, "\"rel\":\"likes\"") == 0,
         "a relation filter gives the same bytes whatever its order or repeats", s);
  free(a);
  hn.limit = 40;
  s = nav(c, &hn, &rc);
  report(s && count(s, "\"key\":") == 40 && count(s, "\"from\":") == 39 && count(s, "\"rel\":\"likes\"") == 0,
         "relation filter and limit together", s);
  mw_nav hp = {.from = "s001", .to = "s299"};
  s = nav(c, &hp, &rc);
  report(s && count(s, "\"key\":") == 3 && before(s, "\"key\":\"s001\"", "\"key\":\"hub\"") &&
             before(s, "\"key\":\"hub\"", "\"key\":\"s299\""),
         "shortest path through the hub", s);
  mw_cortex_close(c);
}

static void t_hint(void) {
  mw_cortex *c = fresh("hint.db");
  char body[256];
  int64_t cur = 0, week = 7LL * 24 * 3600 * 1000, now = 1700000000000LL;
  for (int i = 0; i < 30; i++) {   /* filler, so that the terms below are rare */
    snprintf(body, sizeof body, "{\"node\":{\"key\":\"f:%02d\",\"kind\":\"t\",\"label\":\"filler words %d\"}}", i, i);
    apply(c, "arc", ++cur, now - week, body);
  }
  apply(c, "arc", ++cur, now - week, NODE("h:two", "t", "alpha beta"));
  apply(c, "arc", ++cur, now - week, NODE("h:one", "t", "alpha gamma"));
  apply(c, "arc", ++cur, now, NODE("h:new", "t", "delta epsilon"));
  apply(c, "arc", ++cur, now - week, NODE("h:old", "t", "delta epsilon"));
  apply(c, "arc", ++cur, now - week, EDGE("h:two", "near", "f:00"));
  int rc;
  mw_nav h = {.hint = "Alpha, beta!"};
  char *s = nav(c, &h, &rc);
  report(s && before(s, "\"key\":\"h:two\"", "\"key\":\"h:one\"") && count(s, "\"score\":") == 2,
         "hint: a node matching both terms ranks above one matching one", s);
  report(s && strstr(s, "\"key\":\"f:00\"") && count(s, "\"from\":\"h:two\"") == 1 &&
             before(s, "\"key\":\"h:one\"", "\"key\":\"f:00\""),
         "hint: seeds bring their 1-hop edges and neighbours (unscored, after the seeds)", s);
  h.hint = "delta epsilon";
  s = nav(c, &h, &rc);
  double snew = 0, sold = 0;
  const char *pn = s ? strstr(s, "\"key\":\"h:new\"") : NULL, *po = s ? strstr(s, "\"key\":\"h:old\"") : NULL;
  if (pn && strstr(pn, "\"score\":")) snew = strtod(strstr(pn, "\"score\":") + 8, NULL);
  if (po && strstr(po, "\"score\":")) sold = strtod(strstr(po, "\"score\":") + 8, NULL);
  report(s && before(s, "\"key\":\"h:new\"", "\"key\":\"h:old\"") && snew > 0 && sold > 0 &&
             sold / snew > 0.3678 && sold / snew < 0.3679,
         "hint: with equal text scores the older node ranks lower (recency e^-age/7d from the newest fact)", s);
  char *first = s ? strdup(s) : NULL;
  s = nav(c, &h, &rc);
  report(first && s && !strcmp(first, s), "hint: the same Cortex gives the same bytes", s);
  free(first);
  h.limit = 1;
  s = nav(c, &h, &rc);
  report(s && count(s, "\"key\":") == 1 && strstr(s, "h:new"), "hint: cut to limit", s);

  const char *hostile[] = {"\"", "*", "NEAR(", "a OR", "-", ":", "\"unterminated", "AND OR NOT", "label:alpha",
                           "^alpha", "{alpha beta}", "alpha+beta", "(", ")", "NEAR(alpha beta, 2)", "a\"b\"c",
                           "\xe2\x80\x94 \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", "", "   ", "''", "\\", "%", "\x01\x02"};
  int ok = 1;
  h.limit = 0;
  for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
    h.hint = hostile[i];
    if (!nav(c, &h, &rc)) {
      printf("#   hint %zu: %s\n", i, mw_cortex_errmsg(c));
      ok = 0;
    }
  }
  char *noise = malloc(2001);
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < 2000; i++) noise[i] = (char)(1 + next_rand() % 255);
    noise[2000] = '\0';
    h.hint = noise;
    if (!nav(c, &h, &rc)) {
      printf("#   noise round %d: %s\n", round, mw_cortex_errmsg(c));
      ok = 0;
    }
  }
  for (int i = 0; i < 2000; i++) noise[i] = i % 3 == 2 ? ' ' : (char)('a' + (i / 3) % 26);
  h.hint = noise;
  if (!nav(c, &h, &rc)) ok = 0;
  free(noise);
  report(ok, "hostile hints (FTS syntax, quotes, 2000 bytes of random bytes incl. invalid UTF-8) never error", NULL);
  h.hint = "\"*\" - : (";
  s = nav(c, &h, &rc);
  report(s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}"), "a hint with no terms gives no seeds", s);
  h.hint = "\xc3\xa9t\xc3\xa9";
  apply(c, "arc", ++cur, now - week, NODE("h:ete", "t", "\xc3\xa9t\xc3\xa9 summer"));
  s = nav(c, &h, &rc);
  report(s && strstr(s, "\"key\":\"h:ete\""), "hint: UTF-8 words are terms", s);
  report(fts_ok(path_of("hint.db")) && unlocked(path_of("hint.db")), "side: FTS in sync, no lock left", NULL);
  mw_cortex_close(c);
}

/* ---- validation ----------------------------------------------------------------- */

static void bad(mw_cortex *c, const char *body, int code, const char *msg) {
  char err[256] = "";
  int rc = mw_cortex_validate(body, strlen(body), err, sizeof err);
  char *before_d = dump(c);
  int rc2 = apply(c, "arc", 99, 5000, body);
  char *after_d = dump(c);
  char name[512];
  snprintf(name, sizeof name, "refused: %.60s -> %s", body, msg);
  report(rc == code && rc2 == code && strstr(err, msg) && strstr(mw_cortex_errmsg(c), msg) && before_d && after_d &&
             !strcmp(before_d, after_d),
         name, err);
  free(before_d);
  free(after_d);
}

static void t_validate(void) {
  mw_cortex *c = fresh("validate.db");
  apply(c, "arc", 1, 1000, NODE("ok", "t", "fine"));
  char err[256] = "";
  const char *good[] = {
    NODE("p:ana/x_y.z-1", "person", "Ana"),
    "{ \"edge\" : {\"from\":\"a\",\"rel\":\"r\",\"to\":\"b\",\"weight\":1e3}, \"trust\":\"claim\" }",
    "{\"retract\":{\"node\":\"a\"}}",
    "{\"promote\":{\"edge\":{\"from\":\"a\",\"rel\":\"r\",\"to\":\"b\"}}}",
    "{\"facts\":[" NODE("a", "t", "x") "," EDGE("a", "r", "b") "]}",
  };
  int ok = 1;
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    if (mw_cortex_validate(good[i], strlen(good[i]), err, sizeof err)) {
      printf("#   %s: %s\n", good[i], err);
      ok = 0;
    }
  report(ok, "validate accepts well-formed facts (any JSON spacing and member order)", err);
  char longkey[200];
  memset(longkey, 'k', 129);
  longkey[129] = '\0';
  char body[400];
  snprintf(body, sizeof body, "{\"node\":{\"key\":\"%s\",\"kind\":\"t\",\"label\":\"x\"}}", longkey);
  const char *keyrule = "node key must be 1-128 of A-Z a-z 0-9 _ . : / -";
  bad(c, NODE("has space", "t", "x"), MW_EINVAL, "fact: node key must be 1-128 of A-Z a-z 0-9 _ . : / -");
  bad(c, body, MW_EINVAL, keyrule);
  bad(c, NODE("", "t", "x"), MW_EINVAL, keyrule);
  bad(c, "{\"node\":{\"key\":\"a\\u0000b\",\"kind\":\"t\",\"label\":\"x\"}}", MW_EINVAL, keyrule);
  bad(c, "{\"node\":{\"key\":\"caf\xc3\xa9\",\"kind\":\"t\",\"label\":\"x\"}}", MW_EINVAL, keyrule);
  bad(c, "{\"node\":{\"key\":7,\"kind\":\"t\",\"label\":\"x\"}}", MW_EINVAL, keyrule);
  bad(c, "{\"node\":{\"kind\":\"t\",\"label\":\"x\"}}", MW_EINVAL, keyrule);
  bad(c, "{\"node\":{\"key\":\"a\",\"kind\":\"t\",\"label\":\"x\"},\"trust\":\"maybe\"}", MW_EINVAL,
      "fact: trust must be claim or fact");
  bad(c, "{\"x\":1}", MW_EINVAL, "fact: unknown fact kind \"x\"");
  bad(c, EDGE("a", "has space", "b"), MW_EINVAL, "fact: edge relation must be 1-128 of");
  bad(c, EDGE("a/../b", "r", "b c"), MW_EINVAL, "fact: edge to must be");
  bad(c, "{\"edge\":{\"from\":\"a\",\"rel\":\"r\",\"to\":\"b\",\"weight\":\"heavy\"}}", MW_EINVAL,
      "edge weight must be a number");
  bad(c, "{\"node\":{\"key\":\"a\",\"kind\":\"t\",\"label\":\"x\",\"props\":[1]}}", MW_EINVAL,
      "props must be a JSON object");
  bad(c, "{\"node\":{\"key\":\"a\",\"kind\":\"t\",\"label\":\"x\",\"colour\":\"red\"}}", MW_EINVAL,
      "unknown node field \"colour\"");
  bad(c, "{\"edge\":{\"from\":\"a\",\"rel\":\"r\",\"to\":\"b\"},\"node\":{\"key\":\"a\",\"kind\":\"t\","
      "\"label\":\"x\"}}", MW_EINVAL, "give exactly one of");
  bad(c, "{\"retract\":{\"node\":\"a\"},\"trust\":\"fact\"}", MW_EINVAL, "trust applies to node and edge only");
  bad(c, "{\"retract\":{\"thing\":\"a\"}}", MW_EINVAL, "retract needs");
  bad(c, "[1,2]", MW_EINVAL, "fact: body must be a JSON object");
  bad(c, "{}", MW_EINVAL, "give one of");
  bad(c, "not json", MW_EJSON, "fact: invalid JSON");
  bad(c, "{\"node\":{\"key\":\"a\",\"key\":\"b\",\"kind\":\"t\",\"label\":\"x\"}}", MW_EJSON, "duplicate key");
  bad(c, "{\"facts\":[]}", MW_EINVAL, "facts must be a non-empty array");
  bad(c, "{\"facts\":[{\"facts\":[" NODE("a", "t", "x") "]}]}", MW_EINVAL, "facts[0]: facts cannot nest");
  bad(c, "{\"facts\":[" NODE("a", "t", "x") "],\"trust\":\"fact\"}", MW_EINVAL, "trust goes inside each item");
  bad(c, "{\"facts\":[" NODE("fresh", "t", "x") ",{\"edge\":{\"from\":\"a\",\"to\":\"b\"}}]}", MW_EINVAL,
      "facts[1]: edge relation must be");   /* and the first item is not kept */
  char *label = malloc(4200);
  memset(label, 'x', 4097);
  label[4097] = '\0';
  char *big = malloc(4400);
  snprintf(big, 4400, "{\"node\":{\"key\":\"a\",\"kind\":\"t\",\"label\":\"%s\"}}", label);
  bad(c, big, MW_EINVAL, "label must be a string of at most 4096 bytes");
  free(big);
  free(label);

  int r1 = apply(c, "bad actor", 1, 1, NODE("a", "t", "x"));
  int r2 = apply(c, "arc", -1, 1, NODE("a", "t", "x"));
  report(r1 == MW_EINVAL && r2 == MW_EINVAL, "apply refuses a bad actor or cursor", mw_cortex_errmsg(c));

  /* inside a caller's transaction a refused entry leaves the others intact */
  int rc = mw_cortex_begin(c);
  rc |= apply(c, "arc", 10, 6000, NODE("t1", "t", "one"));
  int rbad = apply(c, "arc", 11, 6001, NODE("t 2", "t", "two"));
  rc |= apply(c, "arc", 12, 6002, NODE("t3", "t", "three"));
  rc |= mw_cortex_commit(c);
  mw_nav n = {.from = "t1"};
  char *s = nav(c, &n, NULL);
  int have1 = s && strstr(s, "\"key\":\"t1\"") != NULL;
  n.from = "t3";
  s = nav(c, &n, NULL);
  report(rc == 0 && rbad == MW_EINVAL && have1 && s && strstr(s, "\"key\":\"t3\""),
         "a refused entry inside begin/commit leaves the batch intact", mw_cortex_errmsg(c));
  rc = mw_cortex_begin(c);
  rc |= apply(c, "arc", 13, 6003, NODE("t4", "t", "four"));
  mw_cortex_rollback(c);
  n.from = "t4";
  s = nav(c, &n, NULL);
  int r3 = mw_cortex_commit(c);
  report(rc == 0 && s && !strcmp(s, "{\"edges\":[],\"nodes\":[]}") && r3 == MW_EINVAL,
         "rollback drops the batch; commit without begin is refused", s);
  report(unlocked(path_of("validate.db")), "side: no lock left", NULL);
  mw_cortex_close(c);
}

/* ---- applied, clear ----------------------------------------------------------- */

static void t_applied_clear(void) {
  mw_cortex *c = fresh("applied.db");
  int64_t cur = -1;
  int rc = mw_cortex_applied(c, "arc", &cur);
  int ok = rc == 0 && cur == 0;
  rc = mw_cortex_set_applied(c, "arc", 5);
  rc |= mw_cortex_set_applied(c, "bob", 9);
  rc |= mw_cortex_applied(c, "arc", &cur);
  ok = ok && rc == 0 && cur == 5;
  rc = mw_cortex_set_applied(c, "arc", 7);
  rc |= mw_cortex_applied(c, "arc", &cur);
  ok = ok && rc == 0 && cur == 7;
  rc = mw_cortex_applied(c, "bob", &cur);
  ok = ok && rc == 0 && cur == 9;
  report(ok && mw_cortex_set_applied(c, "no good", 1) == MW_EINVAL && mw_cortex_applied(c, "", &cur) == MW_EINVAL,
         "applied / set_applied per actor", mw_cortex_errmsg(c));

  apply(c, "arc", 1, 1000, NODE("x", "t", "something"));
  apply(c, "arc", 2, 1000, EDGE("x", "r", "y"));
  rc = mw_cortex_clear(c);
  char *d = dump(c);
  rc |= mw_cortex_applied(c, "arc", &cur);
  report(rc == 0 && d && !strcmp(d, "{\"current\":{\"edges\":[],\"nodes\":[]},\"versions\":{\"edges\":[],\"nodes\":[]}}") &&
             cur == 0,
         "clear removes everything (graph, history, applied)", d);
  free(d);
  rc = apply(c, "arc", 1, 1000, NODE("x", "t", "again"));
  mw_nav h = {.hint = "again"};
  char *s = nav(c, &h, NULL);
  report(rc == 0 && s && strstr(s, "\"key\":\"x\"") && mw_cortex_check(c) == 0,
         "after clear the Cortex works (apply, full text, check)", s);
  report(fts_ok(path_of("applied.db")) && unlocked(path_of("applied.db")), "side: FTS in sync, no lock left", NULL);
  mw_cortex_close(c);
}

/* ---- open failures -------------------------------------------------------------- */

static void t_open(void) {
  mw_cortex *c = NULL;
  char err[256] = "";
  int rc = mw_cortex_open(path_of("missing.db"), 0, 50, &c, err, sizeof err);
  struct stat sb;
  report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex file missing") && stat(path_of("missing.db"), &sb) != 0,
         "open: missing file without create -> MW_EUNAVAIL \"cortex file missing\"", err);

  FILE *f = fopen(path_of("garbage.db"), "wb");
  for (int i = 0; i < 8192; i++) fputc((int)(next_rand() & 0xff), f);
  fclose(f);
  rc = mw_cortex_open(path_of("garbage.db"), 1, 50, &c, err, sizeof err);
  report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex is corrupt"), "open: a garbage file -> \"cortex is corrupt\"",
         err);

  sqlite3 *db;
  rm_db(path_of("other.db"));
  sqlite3_open(path_of("other.db"), &db);
  sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL);
  sqlite3_close(db);
  rc = mw_cortex_open(path_of("other.db"), 1, 50, &c, err, sizeof err);
  report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex is corrupt"),
         "open: an SQLite file that is not a Cortex -> \"cortex is corrupt\"", err);

  /* a Cortex whose first page (the schema) is overwritten */
  c = fresh("smashed.db");
  apply(c, "arc", 1, 1, NODE("a", "t", "x"));
  mw_cortex_close(c);
  c = NULL;
  f = fopen(path_of("smashed.db"), "r+b");
  fseek(f, 100, SEEK_SET);
  for (int i = 0; i < 3000; i++) fputc((int)(next_rand() & 0xff), f);
  fclose(f);
  rc = mw_cortex_open(path_of("smashed.db"), 0, 50, &c, err, sizeof err);
  report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex is corrupt"), "open: a smashed schema page -> \"cortex is corrupt\"",
         err);

  mkdir(path_of("adir.db"), 0700);
  rc = mw_cortex_open(path_of("adir.db"), 1, 50, &c, err, sizeof err);
  report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex file unreadable"),
         "open: a directory -> \"cortex file unreadable\"", err);
  rmdir(path_of("adir.db"));

  c = fresh("perm.db");
  mw_cortex_close(c);
  c = NULL;
  chmod(path_of("perm.db"), 0);
  if (geteuid() == 0) {
    skip("open: no permission -> \"cortex file unreadable\"", "running as root");
  } else {
    rc = mw_cortex_open(path_of("perm.db"), 0, 50, &c, err, sizeof err);
    report(rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex file unreadable"),
           "open: no permission -> \"cortex file unreadable\"", err);
  }
  chmod(path_of("perm.db"), 0600);

  /* another connection holding BEGIN EXCLUSIVE */
  mw_cortex *live = fresh("locked.db");
  apply(live, "arc", 1, 1, NODE("a", "t", "x"));
  sqlite3_open(path_of("locked.db"), &db);
  int lrc = sqlite3_exec(db, "BEGIN EXCLUSIVE; INSERT INTO applied VALUES('zz', 1)", NULL, NULL, NULL);
  rc = mw_cortex_open(path_of("locked.db"), 0, 30, &c, err, sizeof err);
  report(lrc == SQLITE_OK && rc == MW_EUNAVAIL && !c && !strcmp(err, "cortex is locked"),
         "open: locked by another connection past busy_ms -> \"cortex is locked\"", err);
  int arc = apply(live, "arc", 2, 2, NODE("b", "t", "y"));
  report(arc == MW_EUNAVAIL && !strcmp(mw_cortex_errmsg(live), "cortex is locked"),
         "apply on an open handle while locked -> MW_EUNAVAIL \"cortex is locked\"", mw_cortex_errmsg(live));
  mw_nav n = {.from = "a"};
  char *s = nav(live, &n, &rc);
  report(s && strstr(s, "\"key\":\"a\""), "navigate still reads while another connection writes (WAL)", s);
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(db);
  arc = apply(live, "arc", 2, 2, NODE("b", "t", "y"));
  rc = mw_cortex_open(path_of("locked.db"), 0, 30, &c, err, sizeof err);
  report(arc == 0 && rc == 0 && c && mw_cortex_check(c) == 0, "once the lock is gone: apply and open work", err);
  mw_cortex_close(c);
  mw_cortex_close(live);
  mw_cortex_close(NULL);

  rc = mw_cortex_open(path_of("nodir/x.db"), 1, 30, &c, err, sizeof err);
  report(rc == MW_EUNAVAIL && !c, "open: create in a missing directory -> MW_EUNAVAIL", err);
  report(mw_cortex_navigate(NULL, &n, &(mw_buf){0}) == MW_EINVAL && mw_cortex_apply(NULL, "a", 1, 1, "{}", 2) == MW_EINVAL &&
             mw_cortex_check(NULL) == MW_EINVAL,
         "NULL handles are refused", NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cortex_test.XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  t_basic();
  t_supersede();
  t_retract_promote();
  t_order();
  t_neighbours();
  t_hint();
  t_validate();
  t_applied_clear();
  t_open();
  mw__buf_free(&out);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  printf("# %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
