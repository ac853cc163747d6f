/* chain_fuzz.c -- libFuzzer target for mw_log_verify (runtime/store.c over
 * runtime/chain.c).  Built and run by fuzz/run.sh.
 *
 * Once: two homes are built in a temp dir (tmpfs when there is one), a plain
 * SHA-256 chain and an HMAC chain, each with one stream of N entries; their
 * mw.db files are kept in memory as the pristine images, with the rows.
 *
 * Per input: the chosen home's pristine image is written back, the input is
 * applied to the rows of `entries` as a list of byte mutations (through SQL
 * UPDATEs, like an attacker with the file would), and then mw_log_verify must
 *   - return 0 exactly when the rows it reads (cursor >= 1, in cursor order)
 *     are byte for byte the pristine ones, and otherwise
 *   - return MW_EBROKEN with *bad the first position whose row is not the
 *     pristine one (always in 1..N: only entries are touched, never the
 *     stream record).
 *
 * Input: byte 0 = flags (bit 0: the HMAC home), then 4-byte records
 *   [row<<3 | field] [op] [offset] [value]
 * field: 0 body, 1 kind, 2 prev, 3 hash, 4 ts, 5 cursor (both as 8 bytes
 * big-endian), 6/7 body again (bodies are where the bytes are); row is taken
 * mod N.  op % 4: 0 set byte at offset % len, 1 insert byte at offset %
 * (len+1), 2 delete byte at offset % len, 3 truncate to offset % (len+1).
 * ts and cursor only take "set".  Records compound: the row's current bytes
 * are read back before each one. */
#include "mw.h"
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 6          /* entries per stream */
#define MAXCOL 4096  /* a mutated column never grows past this */

typedef struct row {
  int64_t cursor, ts;
  unsigned char *col[4]; /* body, kind, prev, hash */
  size_t len[4];
} row;

typedef struct home {
  char dir[512], db[600];
  unsigned char *image; /* the pristine mw.db */
  size_t image_len;
  int64_t stream;
  row pristine[N];
  int keyed;
} home;

static char base[400], keyfile[600];
static home homes[2];

static void fatal(const char *what, const char *detail) {
  fprintf(stderr, "chain_fuzz: %s: %s\n", what, detail ? detail : "");
  abort();
}

static void rm_rf_home(const home *h) {
  char p[700];
  static const char *const sfx[] = {"/mw.db", "/mw.db-wal", "/mw.db-shm"};
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    snprintf(p, sizeof p, "%s%s", h->dir, sfx[i]);
    unlink(p);
  }
}

static void cleanup(void) {
  for (int k = 0; k < 2; k++) {
    char p[700];
    rm_rf_home(&homes[k]);
    snprintf(p, sizeof p, "%s/tenants/t", homes[k].dir);
    rmdir(p);
    snprintf(p, sizeof p, "%s/tenants", homes[k].dir);
    rmdir(p);
    rmdir(homes[k].dir);
  }
  unlink(keyfile);
  rmdir(base);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fatal("cannot read", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) fatal("cannot read", path);
  fclose(f);
  *n = (size_t)len;
  return p;
}

static void spill(const char *path, const unsigned char *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) fatal("cannot write", path);
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) fatal("cannot write", path);
    p += w, n -= (size_t)w;
  }
  close(fd);
}

/* Reads the stream's rows with cursor >= 1 in cursor order, as verify does;
 * returns how many (at most N). */
static int read_rows(sqlite3 *db, int64_t stream, row *out) {
  sqlite3_stmt *st;
  int n = 0;
  if (sqlite3_prepare_v2(db,
                         "SELECT cursor, ts, body, kind, prev, hash FROM entries"
                         " WHERE stream=?1 AND cursor>=1 ORDER BY cursor",
                         -1, &st, NULL))
    fatal("prepare", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, stream);
  while (n < N && sqlite3_step(st) == SQLITE_ROW) {
    row *r = &out[n++];
    r->cursor = sqlite3_column_int64(st, 0);
    r->ts = sqlite3_column_int64(st, 1);
    for (int c = 0; c < 4; c++) {
      const void *b = sqlite3_column_blob(st, 2 + c);
      r->len[c] = (size_t)sqlite3_column_bytes(st, 2 + c);
      r->col[c] = malloc(r->len[c] + 1);
      if (!r->col[c]) fatal("out of memory", NULL);
      if (r->len[c]) memcpy(r->col[c], b, r->len[c]);
    }
  }
  sqlite3_finalize(st);
  return n;
}

static void free_rows(row *r, int n) {
  for (int i = 0; i < n; i++)
    for (int c = 0; c < 4; c++) free(r[i].col[c]), r[i].col[c] = NULL;
}

static int same_row(const row *a, const row *b) {
  if (a->cursor != b->cursor || a->ts != b->ts) return 0;
  for (int c = 0; c < 4; c++)
    if (a->len[c] != b->len[c] || (a->len[c] && memcmp(a->col[c], b->col[c], a->len[c]))) return 0;
  return 1;
}

static void build_home(home *h, int keyed) {
  static const char *const kinds[N] = {"genesis", "run", "note.v2", "x",
                                       "a-very_long.kind-name-that-is-exactly-sixty-four-bytes-long-xxxx", "sleep"};
  static const char *const bodies[N] = {
      "{}", "{\"b\":[1,2,{\"c\":null}],\"a\":\"\\u00e9\\n\"}", "[1e21,-0.5,9223372036854775807]", "\"\xf0\x9f\x98\x80\"",
      "{\"deep\":[[[[[[[[{}]]]]]]]],\"s\":\"\\u0000\"}", "null"};
  char err[512];
  mw_store *s;
  h->keyed = keyed;
  snprintf(h->dir, sizeof h->dir, "%s/%s", base, keyed ? "hmac" : "plain");
  snprintf(h->db, sizeof h->db, "%s/mw.db", h->dir);
  if (keyed) setenv("MW_CHAIN_KEY_FILE", keyfile, 1);
  else unsetenv("MW_CHAIN_KEY_FILE");
  if (mw_store_open(h->dir, MW_STORE_CREATE, &s, err, sizeof err)) fatal("mw_store_open", err);
  if (mw_store_stream(s, "t", "a", 1, &h->stream)) fatal("mw_store_stream", mw_store_errmsg(s));
  for (int i = 0; i < N; i++) {
    mw_append a = {kinds[i], bodies[i], strlen(bodies[i])};
    if (mw_log_append(s, h->stream, &a, 1, i, NULL)) fatal("mw_log_append", mw_store_errmsg(s));
  }
  int64_t bad = -1;
  if (mw_log_verify(s, h->stream, &bad)) fatal("pristine chain does not verify", mw_store_errmsg(s));
  if (read_rows(mw__store_db(s), h->stream, h->pristine) != N) fatal("pristine rows", NULL);
  /* a clean close checkpoints the WAL into mw.db and removes it */
  mw_store_close(s);
  h->image = slurp(h->db, &h->image_len);
  unsetenv("MW_CHAIN_KEY_FILE");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *tmp = getenv("MW_FUZZ_TMP");
  struct stat st;
  if (!tmp || !*tmp) tmp = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(base, sizeof base, "%s/mw-chain-fuzz-XXXXXX", tmp);
  if (!mkdtemp(base)) fatal("mkdtemp", strerror(errno));
  atexit(cleanup);
  snprintf(keyfile, sizeof keyfile, "%s/chain.key", base);
  spill(keyfile, (const unsigned char *)"fuzzing-key-0123456789abcdef", 28);
  build_home(&homes[0], 0);
  build_home(&homes[1], 1);
  return 0;
}

/* ---- mutations ---------------------------------------------------------- */

static const char *const COLS[4] = {"body", "kind", "prev", "hash"};

static void put_be64(unsigned char *p, int64_t v) {
  for (int i = 7; i >= 0; i--) p[i] = (unsigned char)v, v = (int64_t)((uint64_t)v >> 8);
}

static int64_t get_be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return (int64_t)v;
}

/* Applies one record to the row whose pristine cursor is `cur` (if it still
 * has that cursor: an earlier record may have moved it away). */
static void apply(sqlite3 *db, int64_t stream, int64_t cur, int field, int op, unsigned off, unsigned char val) {
  sqlite3_stmt *st;
  char sql[160];
  if (field >= 4) { /* ts or cursor: set one byte of the big-endian value */
    const char *col = field == 4 ? "ts" : "cursor";
    snprintf(sql, sizeof sql, "SELECT %s FROM entries WHERE stream=?1 AND cursor=?2", col);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) fatal("prepare", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_int64(st, 2, cur);
    if (sqlite3_step(st) != SQLITE_ROW) {
      sqlite3_finalize(st);
      return;
    }
    unsigned char b[8];
    put_be64(b, sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
    b[off % 8] = val;
    snprintf(sql, sizeof sql, "UPDATE entries SET %s=?3 WHERE stream=?1 AND cursor=?2", col);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) fatal("prepare", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_int64(st, 2, cur);
    sqlite3_bind_int64(st, 3, get_be64(b));
    sqlite3_step(st); /* a clash with another row's cursor is refused: no change */
    sqlite3_finalize(st);
    return;
  }
  snprintf(sql, sizeof sql, "SELECT %s FROM entries WHERE stream=?1 AND cursor=?2", COLS[field]);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) fatal("prepare", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, cur);
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    return;
  }
  size_t n = (size_t)sqlite3_column_bytes(st, 0);
  unsigned char *p = malloc(n + 2);
  if (!p) fatal("out of memory", NULL);
  if (n) memcpy(p, sqlite3_column_blob(st, 0), n);
  sqlite3_finalize(st);
  switch (op) {
  case 0:
    if (n) p[off % n] = val;
    else p[n++] = val;
    break;
  case 1:
    if (n < MAXCOL) {
      size_t at = off % (n + 1);
      memmove(p + at + 1, p + at, n - at);
      p[at] = val;
      n++;
    }
    break;
  case 2:
    if (n) {
      size_t at = off % n;
      memmove(p + at, p + at + 1, n - at - 1);
      n--;
    }
    break;
  default: n = off % (n + 1); break;
  }
  snprintf(sql, sizeof sql, "UPDATE entries SET %s=?3 WHERE stream=?1 AND cursor=?2", COLS[field]);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) fatal("prepare", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, cur);
  /* as the store writes them: body and kind TEXT, prev and hash BLOB */
  if (field < 2) sqlite3_bind_text(st, 3, (const char *)p, (int)n, SQLITE_TRANSIENT);
  else sqlite3_bind_blob(st, 3, p, (int)n, SQLITE_TRANSIENT);
  sqlite3_step(st);
  sqlite3_finalize(st);
  free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  home *h = &homes[data[0] & 1];
  char err[512];
  mw_store *s;

  rm_rf_home(h);
  spill(h->db, h->image, h->image_len);
  if (h->keyed) setenv("MW_CHAIN_KEY_FILE", keyfile, 1);
  else unsetenv("MW_CHAIN_KEY_FILE");
  int rc = mw_store_open(h->dir, 0, &s, err, sizeof err);
  unsetenv("MW_CHAIN_KEY_FILE");
  if (rc) fatal("mw_store_open (pristine copy)", err);
  sqlite3 *db = mw__store_db(s);

  /* The tampering is one transaction on the store's own connection, without
   * fsync (the copy is scratch); verify then reads it as committed data. */
  sqlite3_exec(db, "PRAGMA synchronous=OFF; BEGIN", NULL, NULL, NULL);
  for (size_t i = 1; i + 4 <= size; i += 4) {
    int r = (data[i] >> 3) % N, field = data[i] & 7;
    if (field >= 6) field = 0;
    apply(db, h->stream, h->pristine[r].cursor, field, field >= 4 ? 0 : data[i + 1] % 4, data[i + 2], data[i + 3]);
  }
  if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) fatal("commit", sqlite3_errmsg(db));

  /* What verify will read, against the pristine rows. */
  row now[N];
  int n = read_rows(db, h->stream, now), first = 0;
  for (int i = 0; i < N && !first; i++)
    if (i >= n || !same_row(&now[i], &h->pristine[i])) first = i + 1;

  int64_t bad = -1;
  rc = mw_log_verify(s, h->stream, &bad);
  if (first == 0 && rc != 0) {
    fprintf(stderr, "chain_fuzz: an intact chain fails verification: rc=%d bad=%lld: %s\n", rc, (long long)bad,
            mw_store_errmsg(s));
    abort();
  }
  if (first != 0 && rc == 0) {
    fprintf(stderr, "chain_fuzz: verify accepts a chain whose row at position %d is not the pristine one\n",
            first);
    const row *a = &h->pristine[first - 1], *b = first <= n ? &now[first - 1] : NULL;
    for (int c = 0; b && c < 4; c++)
      if (a->len[c] != b->len[c] || memcmp(a->col[c], b->col[c], a->len[c]))
        fprintf(stderr, "  %s: %zu bytes, was %zu bytes\n", COLS[c], b->len[c], a->len[c]);
    abort();
  }
  if (first != 0 && (rc != MW_EBROKEN || bad != first)) {
    fprintf(stderr, "chain_fuzz: expected MW_EBROKEN at %d, got rc=%d bad=%lld: %s\n", first, rc, (long long)bad,
            mw_store_errmsg(s));
    abort();
  }
  free_rows(now, n);
  mw_store_close(s);
  return 0;
}
