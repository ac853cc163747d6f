/* bare.c -- the ceilings bench/store.lua measures MW against: the same rows,
 * bytes and snapshots handled by SQLite and OpenSSL alone; and, to split a
 * figure, the store's C API without Lua.  A bench helper: never part of MW.
 *
 *   bare insert HOME TENANT ACTOR DST_DB BATCH   the actor's rows into a fresh
 *                                                DST_DB, BATCH rows per COMMIT
 *   bare mwappend HOME TENANT ACTOR BATCH        the actor's rows appended again,
 *                                                to ACTOR-c, by mw_log_append
 *   bare verify HOME TENANT ACTOR                scan, SHA-256, both, HMAC
 *   bare snap HOME TENANT ACTOR SNAPSHOT ITERS   mw_snapshot_get + _verify, and
 *                                                a bare SELECT + SHA-256 of it
 *
 * Each prints `key value` lines for the Lua side to read. */
#include "mw.h"

#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, sqlite3 *db) {
  fprintf(stderr, "bare: %s: %s\n", what, db ? sqlite3_errmsg(db) : "failed");
  exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) die(sql, db);
}

/* The durability MW's store uses: WAL, fsync at every COMMIT. */
static sqlite3 *open_db(const char *path, int readonly) {
  sqlite3 *db;
  int fl = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path, &db, fl | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) die(path, db);
  if (!readonly) exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "PRAGMA synchronous=FULL");
  return db;
}

/* HOME/mw.db and the stream id of (tenant, actor). */
static sqlite3 *open_stream(const char *home, const char *tenant, const char *actor, int64_t *stream) {
  char path[4096];
  sqlite3_stmt *st;
  snprintf(path, sizeof path, "%s/mw.db", home);
  sqlite3 *db = open_db(path, 1);
  if (sqlite3_prepare_v2(db, "SELECT id FROM streams WHERE tenant=?1 AND actor=?2", -1, &st, NULL))
    die("streams", db);
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) die("no such stream", db);
  *stream = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return db;
}

typedef struct row {
  int64_t cursor, ts;
  char *kind, *body;
  size_t klen, blen;
  unsigned char prev[32], hash[32];
} row;

static row *load_rows(sqlite3 *db, int64_t stream, size_t *n) {
  sqlite3_stmt *st;
  size_t cap = 1024, k = 0;
  row *r = malloc(cap * sizeof *r);
  if (sqlite3_prepare_v2(db, "SELECT cursor, ts, kind, body, prev, hash FROM entries"
                             " WHERE stream=?1 ORDER BY cursor", -1, &st, NULL)) die("select", db);
  sqlite3_bind_int64(st, 1, stream);
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (k == cap) r = realloc(r, (cap *= 2) * sizeof *r);
    row *x = &r[k++];
    x->cursor = sqlite3_column_int64(st, 0);
    x->ts = sqlite3_column_int64(st, 1);
    x->klen = (size_t)sqlite3_column_bytes(st, 2);
    x->kind = strndup((const char *)sqlite3_column_text(st, 2), x->klen);
    x->blen = (size_t)sqlite3_column_bytes(st, 3);
    x->body = malloc(x->blen + 1);
    memcpy(x->body, sqlite3_column_text(st, 3), x->blen + 1);
    memcpy(x->prev, sqlite3_column_blob(st, 4), 32);
    memcpy(x->hash, sqlite3_column_blob(st, 5), 32);
  }
  sqlite3_finalize(st);
  *n = k;
  return r;
}

/* ---- insert: the same rows, the same table, BATCH rows per COMMIT ------- */

static int cmd_insert(const char *home, const char *tenant, const char *actor, const char *dst,
                      int batch) {
  int64_t stream;
  sqlite3 *in = open_stream(home, tenant, actor, &stream);
  size_t n;
  row *r = load_rows(in, stream, &n);
  sqlite3_close(in);
  char wal[4200];
  remove(dst);
  snprintf(wal, sizeof wal, "%s-wal", dst); remove(wal);
  snprintf(wal, sizeof wal, "%s-shm", dst); remove(wal);
  sqlite3 *db = open_db(dst, 0);
  exec(db, "CREATE TABLE entries(stream INTEGER NOT NULL, cursor INTEGER NOT NULL,"
           " ts INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL, prev BLOB NOT NULL,"
           " hash BLOB NOT NULL, PRIMARY KEY(stream, cursor)) WITHOUT ROWID");
  sqlite3_stmt *ins;
  if (sqlite3_prepare_v3(db, "INSERT INTO entries(stream, cursor, ts, kind, body, prev, hash)"
                             " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, SQLITE_PREPARE_PERSISTENT,
                         &ins, NULL)) die("prepare", db);
  double t0 = now();
  for (size_t i = 0; i < n; i += (size_t)batch) {
    exec(db, "BEGIN IMMEDIATE");
    for (size_t j = i; j < n && j < i + (size_t)batch; j++) {
      sqlite3_bind_int64(ins, 1, stream);
      sqlite3_bind_int64(ins, 2, r[j].cursor);
      sqlite3_bind_int64(ins, 3, r[j].ts);
      sqlite3_bind_text(ins, 4, r[j].kind, (int)r[j].klen, SQLITE_STATIC);
      sqlite3_bind_text(ins, 5, r[j].body, (int)r[j].blen, SQLITE_STATIC);
      sqlite3_bind_blob(ins, 6, r[j].prev, 32, SQLITE_STATIC);
      sqlite3_bind_blob(ins, 7, r[j].hash, 32, SQLITE_STATIC);
      if (sqlite3_step(ins) != SQLITE_DONE) die("insert", db);
      sqlite3_reset(ins);
    }
    exec(db, "COMMIT");
  }
  double dt = now() - t0;
  sqlite3_finalize(ins);
  sqlite3_close(db);
  printf("rows %zu\nsecs %.6f\n", n, dt);
  return 0;
}

/* ---- mwappend: the store's own append path, without Lua ------------------- */

static int cmd_mwappend(const char *home, const char *tenant, const char *actor, int batch) {
  int64_t stream, copy;
  sqlite3 *in = open_stream(home, tenant, actor, &stream);
  size_t n;
  row *r = load_rows(in, stream, &n);
  sqlite3_close(in);
  mw_store *s;
  char err[512], name[80];
  if (mw_store_open(home, 0, &s, err, sizeof err)) {
    fprintf(stderr, "bare: %s\n", err);
    return 1;
  }
  snprintf(name, sizeof name, "%.60s-c", actor);
  if (mw_store_stream(s, tenant, name, 1, &copy)) {
    fprintf(stderr, "bare: %s\n", mw_store_errmsg(s));
    return 1;
  }
  mw_append *items = malloc((size_t)batch * sizeof *items);
  double t0 = now();
  for (size_t i = 0; i < n; i += (size_t)batch) {
    size_t k = 0;
    for (size_t j = i; j < n && j < i + (size_t)batch; j++, k++)
      items[k] = (mw_append){r[j].kind, r[j].body, r[j].blen};
    if (mw_log_append(s, copy, items, k, MW_ANY, NULL)) {
      fprintf(stderr, "bare: %s\n", mw_store_errmsg(s));
      return 1;
    }
  }
  double dt = now() - t0;
  mw_store_close(s);
  printf("rows %zu\nsecs %.6f\n", n, dt);
  return 0;
}

/* ---- verify: what mw_log_verify does, in its parts ---------------------- */

static const char ENTRY_TAG[] = "mw.entry.v1"; /* with its NUL, as chain.c */

static unsigned char *put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
  return p + 4;
}

static size_t frame(unsigned char *p, const row *x) {
  unsigned char *s = p;
  memcpy(p, ENTRY_TAG, sizeof ENTRY_TAG); p += sizeof ENTRY_TAG;
  memcpy(p, x->prev, 32); p += 32;
  p = put_u32(p, (uint32_t)((uint64_t)x->cursor >> 32)); p = put_u32(p, (uint32_t)x->cursor);
  p = put_u32(p, (uint32_t)((uint64_t)x->ts >> 32)); p = put_u32(p, (uint32_t)x->ts);
  p = put_u32(p, (uint32_t)x->klen); memcpy(p, x->kind, x->klen); p += x->klen;
  p = put_u32(p, (uint32_t)x->blen); memcpy(p, x->body, x->blen); p += x->blen;
  return (size_t)(p - s);
}

static int cmd_verify(const char *home, const char *tenant, const char *actor) {
  int64_t stream;
  sqlite3 *db = open_stream(home, tenant, actor, &stream);
  sqlite3_stmt *st;
  const char *sql = "SELECT cursor, ts, kind, body, prev, hash FROM entries"
                    " WHERE stream=?1 AND cursor>=?2 ORDER BY cursor LIMIT ?3";
  /* 1. the scan alone, touching every column as row_entry does (best of 3) */
  size_t rows = 0, bytes = 0;
  double scan = 1e9;
  for (int k = 0; k < 3; k++) {
    double t0 = now();
    rows = bytes = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) die("prepare", db);
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_int64(st, 2, 1);
    sqlite3_bind_int64(st, 3, -1);
    while (sqlite3_step(st) == SQLITE_ROW) {
      (void)sqlite3_column_int64(st, 0);
      (void)sqlite3_column_int64(st, 1);
      bytes += (size_t)sqlite3_column_bytes(st, 2) + (size_t)sqlite3_column_bytes(st, 3);
      (void)sqlite3_column_text(st, 2);
      (void)sqlite3_column_text(st, 3);
      (void)sqlite3_column_blob(st, 4);
      (void)sqlite3_column_blob(st, 5);
      rows++;
    }
    sqlite3_finalize(st);
    t0 = now() - t0;
    if (t0 < scan) scan = t0;
  }

  /* 2. SHA-256 of the framed bytes alone, frames built beforehand.  The
   * digest is fetched once: an EVP_sha256() handed to every init makes
   * OpenSSL 3 look its implementation up again each time. */
  size_t n;
  row *r = load_rows(db, stream, &n);
  size_t *off = malloc((n + 1) * sizeof *off), total = 0;
  for (size_t i = 0; i < n; i++) total += sizeof ENTRY_TAG + 32 + 16 + 8 + r[i].klen + r[i].blen;
  unsigned char *fr = malloc(total ? total : 1), out[32];
  off[0] = 0;
  for (size_t i = 0; i < n; i++) off[i + 1] = off[i] + frame(fr + off[i], &r[i]);
  EVP_MD *sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned int len = 32;
  size_t bad = 0;
  double sha = 1e9;
  for (int k = 0; k < 3; k++) {
    double t = now();
    for (size_t i = 0; i < n; i++) {
      EVP_DigestInit_ex(md, sha256, NULL);
      EVP_DigestUpdate(md, fr + off[i], off[i + 1] - off[i]);
      EVP_DigestFinal_ex(md, out, &len);
      if (k == 0) bad += memcmp(out, r[i].hash, 32) != 0;
    }
    t = now() - t;
    if (t < sha) sha = t;
  }

  /* 3. scan + frame + SHA-256 + link check in one pass: verify's ceiling */
  unsigned char *scratch = malloc(1 << 20), want[32];
  size_t both = 0;
  double scansha = 1e9;
  for (int k = 0; k < 3; k++) {
    memcpy(want, r[0].prev, 32);
    both = 0;
    double t = now();
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) die("prepare", db);
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_int64(st, 2, 1);
    sqlite3_bind_int64(st, 3, -1);
    while (sqlite3_step(st) == SQLITE_ROW) {
      row x;
      x.cursor = sqlite3_column_int64(st, 0);
      x.ts = sqlite3_column_int64(st, 1);
      x.kind = (char *)sqlite3_column_text(st, 2);
      x.klen = (size_t)sqlite3_column_bytes(st, 2);
      x.body = (char *)sqlite3_column_text(st, 3);
      x.blen = (size_t)sqlite3_column_bytes(st, 3);
      const unsigned char *pv = sqlite3_column_blob(st, 4), *hv = sqlite3_column_blob(st, 5);
      if (memcmp(pv, want, 32)) bad++;
      memcpy(x.prev, want, 32);
      size_t fl = frame(scratch, &x);
      EVP_DigestInit_ex(md, sha256, NULL);
      EVP_DigestUpdate(md, scratch, fl);
      EVP_DigestFinal_ex(md, want, &len);
      if (memcmp(want, hv, 32)) bad++;
      both++;
    }
    sqlite3_finalize(st);
    t = now() - t;
    if (t < scansha) scansha = t;
  }

  /* 4. HMAC-SHA-256 (a keyed home): HMAC() per entry, as chain.c calls it,
   * and one EVP_MAC context set up once and re-initialised per entry. */
  unsigned char key[32];
  memset(key, 7, sizeof key);
  double t0 = now();
  for (size_t i = 0; i < n; i++) HMAC(EVP_sha256(), key, 32, fr + off[i], off[i + 1] - off[i], out, &len);
  double hmac = now() - t0;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *mc = EVP_MAC_CTX_new(mac);
  OSSL_PARAM ps[] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
                     OSSL_PARAM_construct_end()};
  size_t ol;
  EVP_MAC_init(mc, key, sizeof key, ps);
  t0 = now();
  for (size_t i = 0; i < n; i++) {
    EVP_MAC_init(mc, NULL, 0, NULL);
    EVP_MAC_update(mc, fr + off[i], off[i + 1] - off[i]);
    EVP_MAC_final(mc, out, &ol, sizeof out);
  }
  double hmac_reuse = now() - t0;
  EVP_MAC_CTX_free(mc);
  EVP_MAC_free(mac);
  EVP_MD_free(sha256);

  EVP_MD_CTX_free(md);
  sqlite3_close(db);
  printf("rows %zu\nbytes %zu\nframed_bytes %zu\nscan_secs %.6f\nsha_secs %.6f\n"
         "scan_sha_secs %.6f\nhmac_secs %.6f\nhmac_reuse_secs %.6f\nmismatches %zu\n",
         rows, bytes, total, scan, sha, scansha, hmac, hmac_reuse, bad + (both != n));
  return 0;
}

/* ---- snap: read + verify of one snapshot -------------------------------- */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void pct(const char *name, double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_d);
  printf("%s_p50_us %.2f\n%s_p99_us %.2f\n", name, t[n / 2] * 1e6, name, t[(n * 99) / 100] * 1e6);
}

static int cmd_snap(const char *home, const char *tenant, const char *actor, const char *id,
                    int iters) {
  mw_store *s;
  int64_t stream;
  char err[512];
  if (mw_store_open(home, 0, &s, err, sizeof err)) {
    fprintf(stderr, "bare: %s\n", err);
    return 1;
  }
  if (mw_store_stream(s, tenant, actor, 0, &stream)) {
    fprintf(stderr, "bare: %s\n", mw_store_errmsg(s));
    return 1;
  }
  double *t = malloc((size_t)iters * sizeof *t);
  size_t state_len = 0;
  for (int i = -iters / 10; i < iters; i++) {   /* a tenth as warm-up */
    mw_snapshot snap;
    double t0 = now();
    int rc = mw_snapshot_get(s, stream, id, &snap);
    if (!rc) rc = mw_snapshot_verify(s, stream, &snap);
    double dt = now() - t0;
    if (rc) {
      fprintf(stderr, "bare: snapshot: %s\n", mw_store_errmsg(s));
      return 1;
    }
    state_len = snap.state_len;
    mw_snapshot_free(&snap);
    if (i >= 0) t[i] = dt;
  }
  mw_store_close(s);
  printf("state_bytes %zu\n", state_len);
  pct("mw", t, iters);

  /* The same work bare: SELECT the row, SHA-256 the state, SELECT the
   * entry's hash at its cursor, compare both. */
  sqlite3 *db = open_stream(home, tenant, actor, &stream);
  sqlite3_stmt *q1, *q2;
  if (sqlite3_prepare_v3(db, "SELECT cursor, state, state_hash, entry_hash FROM snapshots"
                             " WHERE id=?1 AND stream=?2", -1, SQLITE_PREPARE_PERSISTENT, &q1, NULL) ||
      sqlite3_prepare_v3(db, "SELECT hash FROM entries WHERE stream=?1 AND cursor=?2", -1,
                         SQLITE_PREPARE_PERSISTENT, &q2, NULL)) die("prepare", db);
  for (int i = -iters / 10; i < iters; i++) {
    unsigned char h[32];
    unsigned int len = 32;
    double t0 = now();
    sqlite3_bind_text(q1, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q1, 2, stream);
    if (sqlite3_step(q1) != SQLITE_ROW) die("snapshot row", db);
    int64_t cur = sqlite3_column_int64(q1, 0);
    size_t n = (size_t)sqlite3_column_bytes(q1, 1);
    char *copy = malloc(n + 1);   /* as mw_snapshot_get, the caller gets its own copy */
    memcpy(copy, sqlite3_column_text(q1, 1), n + 1);
    EVP_Digest(copy, n, h, &len, EVP_sha256(), NULL);
    int ok = memcmp(h, sqlite3_column_blob(q1, 2), 32) == 0;
    sqlite3_bind_int64(q2, 1, stream);
    sqlite3_bind_int64(q2, 2, cur);
    if (sqlite3_step(q2) != SQLITE_ROW) die("entry row", db);
    ok = ok && memcmp(sqlite3_column_blob(q2, 0), sqlite3_column_blob(q1, 3), 32) == 0;
    sqlite3_reset(q2);
    sqlite3_reset(q1);
    free(copy);
    double dt = now() - t0;
    if (!ok) die("bare snapshot check", NULL);
    if (i >= 0) t[i] = dt;
  }
  sqlite3_finalize(q1);
  sqlite3_finalize(q2);
  sqlite3_close(db);
  pct("bare", t, iters);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 7 && !strcmp(argv[1], "insert"))
    return cmd_insert(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]));
  if (argc == 6 && !strcmp(argv[1], "mwappend"))
    return cmd_mwappend(argv[2], argv[3], argv[4], atoi(argv[5]));
  if (argc == 5 && !strcmp(argv[1], "verify")) return cmd_verify(argv[2], argv[3], argv[4]);
  if (argc == 7 && !strcmp(argv[1], "snap"))
    return cmd_snap(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]));
  fprintf(stderr, "usage: bare insert HOME TENANT ACTOR DST_DB BATCH\n"
                  "       bare mwappend HOME TENANT ACTOR BATCH\n"
                  "       bare verify HOME TENANT ACTOR\n"
                  "       bare snap HOME TENANT ACTOR SNAPSHOT_ID ITERS\n");
  return 2;
}
