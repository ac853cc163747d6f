/* store.c -- the home's database: tenants, tokens, hash-chained log streams
 * and snapshots, on SQLite in WAL mode with synchronous=FULL, so a commit that
 * returned is on disk.  Knows nothing of Lua or libuv; never half-writes:
 * every write is one transaction (or one SAVEPOINT inside the caller's). */
#include "mw.h"
#include "buf.h"
#include "chain.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define FORMAT "mw/1"

enum {
  Q_STREAM, Q_STREAM_NEW, Q_TAIL, Q_INSERT, Q_SET_TAIL, Q_READ, Q_HASH_AT,
  Q_SNAP_PUT, Q_SNAP_GET, Q_SNAP_LIST, Q_SNAP_UNSAFE, Q_HEAD_SET, Q_HEAD_GET,
  Q_TENANT, Q_TENANT_NEW, Q_TOKEN_NEW, Q_TOKEN_GET, Q_TOKEN_REVOKE,
  Q_PRUNE_HEADS, Q_PRUNE_CKPT, Q__N
};

static const char *const SQL[Q__N] = {
  [Q_STREAM] = "SELECT id FROM streams WHERE tenant=?1 AND actor=?2",
  [Q_STREAM_NEW] = "INSERT INTO streams(tenant, actor, last_cursor, last_hash, created_at)"
                   " VALUES(?1, ?2, 0, ?3, ?4)",
  [Q_TAIL] = "SELECT last_cursor, last_hash, tenant, actor FROM streams WHERE id=?1",
  [Q_INSERT] = "INSERT INTO entries(stream, cursor, ts, kind, body, prev, hash)"
               " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
  [Q_SET_TAIL] = "UPDATE streams SET last_cursor=?2, last_hash=?3 WHERE id=?1",
  [Q_READ] = "SELECT cursor, ts, kind, body, prev, hash FROM entries"
             " WHERE stream=?1 AND cursor>=?2 ORDER BY cursor LIMIT ?3",
  [Q_HASH_AT] = "SELECT hash FROM entries WHERE stream=?1 AND cursor=?2",
  [Q_SNAP_PUT] = "INSERT INTO snapshots(id, stream, cursor, state, state_hash, entry_hash,"
                 " fold, created_at, safe, is_head) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,1,?9)",
  [Q_SNAP_GET] = "SELECT id, cursor, state, state_hash, entry_hash, fold, created_at, safe,"
                 " is_head FROM snapshots WHERE id=?1 AND stream=?2",
  [Q_SNAP_LIST] = "SELECT id, cursor, NULL, state_hash, entry_hash, fold, created_at, safe,"
                  " is_head FROM snapshots WHERE stream=?1 ORDER BY cursor DESC, created_at DESC, rowid DESC",
  [Q_SNAP_UNSAFE] = "UPDATE snapshots SET safe=0 WHERE id=?1",
  [Q_HEAD_SET] = "UPDATE streams SET head_snapshot=?2 WHERE id=?1",
  [Q_HEAD_GET] = "SELECT head_snapshot FROM streams WHERE id=?1",
  [Q_TENANT] = "SELECT 1 FROM tenants WHERE name=?1",
  [Q_TENANT_NEW] = "INSERT OR IGNORE INTO tenants(name, created_at) VALUES(?1, ?2)",
  [Q_TOKEN_NEW] = "INSERT INTO tokens(hash, tenant, role, created_at) VALUES(?1, ?2, ?3, ?4)",
  [Q_TOKEN_GET] = "SELECT tenant, role FROM tokens WHERE hash=?1 AND revoked_at IS NULL",
  [Q_TOKEN_REVOKE] = "UPDATE tokens SET revoked_at=?2 WHERE hash=?1 AND revoked_at IS NULL",
  /* Keep the current head, the `heads` newest earlier heads and the
   * `checkpoints` newest checkpoints; the log itself is never pruned. */
  [Q_PRUNE_HEADS] = "DELETE FROM snapshots WHERE stream=?1 AND is_head=1 AND id<>?2 AND rowid <="
                    " (SELECT rowid FROM snapshots WHERE stream=?1 AND is_head=1 AND id<>?2"
                    "  ORDER BY rowid DESC LIMIT 1 OFFSET ?3)",
  [Q_PRUNE_CKPT] = "DELETE FROM snapshots WHERE stream=?1 AND is_head=0 AND rowid <="
                   " (SELECT rowid FROM snapshots WHERE stream=?1 AND is_head=0"
                   "  ORDER BY rowid DESC LIMIT 1 OFFSET ?2)",
};

static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);"
  "CREATE TABLE IF NOT EXISTS tenants(name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);"
  "CREATE TABLE IF NOT EXISTS tokens(hash BLOB PRIMARY KEY, tenant TEXT NOT NULL,"
  " role TEXT NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER);"
  "CREATE TABLE IF NOT EXISTS streams(id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,"
  " actor TEXT NOT NULL, last_cursor INTEGER NOT NULL, last_hash BLOB NOT NULL,"
  " head_snapshot TEXT, created_at INTEGER NOT NULL, UNIQUE(tenant, actor));"
  "CREATE TABLE IF NOT EXISTS entries(stream INTEGER NOT NULL, cursor INTEGER NOT NULL,"
  " ts INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL, prev BLOB NOT NULL,"
  " hash BLOB NOT NULL, PRIMARY KEY(stream, cursor)) WITHOUT ROWID;"
  "CREATE TABLE IF NOT EXISTS snapshots(id TEXT PRIMARY KEY, stream INTEGER NOT NULL,"
  " cursor INTEGER NOT NULL, state TEXT NOT NULL, state_hash BLOB NOT NULL,"
  " entry_hash BLOB NOT NULL, fold TEXT NOT NULL, created_at INTEGER NOT NULL,"
  " safe INTEGER NOT NULL, is_head INTEGER NOT NULL);"
  "CREATE INDEX IF NOT EXISTS snapshots_by_stream ON snapshots(stream, cursor);"
  "CREATE INDEX IF NOT EXISTS snapshots_by_kind ON snapshots(stream, is_head);"
  "CREATE TABLE IF NOT EXISTS sweeps(stream INTEGER PRIMARY KEY, cursor INTEGER NOT NULL,"
  " corpus TEXT NOT NULL, fold TEXT NOT NULL);"
  "CREATE TABLE IF NOT EXISTS consolidation(tenant TEXT NOT NULL, actor TEXT NOT NULL, source TEXT NOT NULL,"
  " horizon TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(tenant, actor, source));"
  "CREATE TABLE IF NOT EXISTS sessions(id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
  " actor TEXT NOT NULL, profile TEXT NOT NULL, trigger TEXT NOT NULL, wake_token BLOB NOT NULL,"
  " opened_at INTEGER NOT NULL, last_seen INTEGER NOT NULL, closed_at INTEGER,"
  " close_reason TEXT, prior TEXT, committed INTEGER NOT NULL DEFAULT 0, context_hint TEXT,"
  " navigated TEXT);"
  "CREATE INDEX IF NOT EXISTS sessions_by_actor ON sessions(tenant, actor, opened_at);";

#define NCACHE 48

struct mw_store {
  sqlite3 *db;
  sqlite3_stmt *q[Q__N];
  struct { const char *sql; sqlite3_stmt *st; } cache[NCACHE];   /* by the SQL text's address */
  int ncache;
  mw_chain *chain;
  mw_buf canon;          /* scratch for canonical bodies */
  char *home;
  int keep_heads, keep_ckpts;
  char err[512];
};

static int64_t now_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Record a failure message and return code. */
static int fail(mw_store *s, int code, const char *fmt, const char *arg) {
  snprintf(s->err, sizeof s->err, fmt, arg ? arg : "");
  return code;
}

/* Map an SQLite failure: anything that means "cannot write durably now" is
 * MW_EUNAVAIL, for the caller to retry later; the rest is internal. */
static int dbfail(mw_store *s, int rc) {
  int code;
  switch (rc & 0xff) {
    case SQLITE_FULL: case SQLITE_IOERR: case SQLITE_READONLY: case SQLITE_BUSY:
    case SQLITE_LOCKED: case SQLITE_CANTOPEN: case SQLITE_PERM: case SQLITE_PROTOCOL:
      code = MW_EUNAVAIL;
      break;
    case SQLITE_NOMEM:
      code = MW_ENOMEM;
      break;
    default:
      code = MW_EINTERNAL;
  }
  snprintf(s->err, sizeof s->err, "store: %s (%s)", sqlite3_errmsg(s->db), sqlite3_errstr(rc));
  return code;
}

static sqlite3_stmt *Q(mw_store *s, int which) {
  sqlite3_stmt *st = s->q[which];
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
  }
  if (sqlite3_prepare_v3(s->db, SQL[which], -1, SQLITE_PREPARE_PERSISTENT, &s->q[which], NULL))
    return NULL;
  return s->q[which];
}

static int exec(mw_store *s, const char *sql) {
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
  return rc ? dbfail(s, rc) : 0;
}

/* A prepared statement for a static SQL text, reused across calls (preparing
 * is a tenth of a durable call's CPU otherwise).  When the cached one is in
 * use -- a read iterating while its callback reads again -- a fresh one is
 * prepared; mw__store_done resets or finalizes whichever it was. */
sqlite3_stmt *mw__store_stmt(mw_store *s, const char *sql) {
  int i;
  for (i = 0; i < s->ncache; i++) {
    if (s->cache[i].sql != sql) continue;
    if (sqlite3_stmt_busy(s->cache[i].st)) break;
    sqlite3_clear_bindings(s->cache[i].st);
    return s->cache[i].st;
  }
  sqlite3_stmt *st;
  if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL)) return NULL;
  if (i == s->ncache && s->ncache < NCACHE) {
    s->cache[s->ncache].sql = sql;
    s->cache[s->ncache++].st = st;
  }
  return st;
}

void mw__store_done(mw_store *s, sqlite3_stmt *st) {
  for (int i = 0; i < s->ncache; i++)
    if (s->cache[i].st == st) {
      sqlite3_reset(st);
      return;
    }
  sqlite3_finalize(st);
}

/* ---- transactions --------------------------------------------------------
 * tx_open starts a transaction when none is open (BEGIN IMMEDIATE takes the
 * write lock at once, so two writers queue instead of failing on upgrade),
 * else a SAVEPOINT inside the caller's transaction.  tx_close commits or
 * rolls back exactly what tx_open began. */

typedef struct { int own; } tx;

static int tx_open(mw_store *s, tx *t) {
  t->own = sqlite3_get_autocommit(s->db);
  return exec(s, t->own ? "BEGIN IMMEDIATE" : "SAVEPOINT mw_call");
}

static int tx_close(mw_store *s, tx *t, int rc) {
  if (rc == 0) {
    int crc = exec(s, t->own ? "COMMIT" : "RELEASE mw_call");
    if (crc == 0) return 0;
    rc = crc;
  }
  char keep[sizeof s->err];
  memcpy(keep, s->err, sizeof keep);
  if (t->own) {
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  } else {
    sqlite3_exec(s->db, "ROLLBACK TO mw_call; RELEASE mw_call", NULL, NULL, NULL);
  }
  memcpy(s->err, keep, sizeof keep);
  return rc;
}

int mw_store_begin(mw_store *s) {
  if (!sqlite3_get_autocommit(s->db)) return fail(s, MW_EINVAL, "store: transaction already open%s", NULL);
  return exec(s, "BEGIN IMMEDIATE");
}

int mw_store_commit(mw_store *s) {
  int rc = exec(s, "COMMIT");
  if (rc && !sqlite3_get_autocommit(s->db)) {
    char keep[sizeof s->err];
    memcpy(keep, s->err, sizeof keep);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    memcpy(s->err, keep, sizeof keep);
  }
  return rc;
}

void mw_store_rollback(mw_store *s) {
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- open / close ------------------------------------------------------ */

static int read_key(mw_store *s, unsigned char **key, size_t *keylen) {
  const char *path = getenv("MW_CHAIN_KEY_FILE");
  *key = NULL;
  *keylen = 0;
  if (!path || !*path) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return fail(s, MW_EINVAL, "chain key file %s cannot be read", path);
  unsigned char *buf = malloc(4096);
  size_t n = buf ? fread(buf, 1, 4096, f) : 0;
  fclose(f);
  if (!buf || n < 16) {
    free(buf);
    return fail(s, MW_EINVAL, "chain key file %s holds fewer than 16 bytes", path);
  }
  *key = buf;
  *keylen = n;
  return 0;
}

static int meta_get(mw_store *s, const char *k, char *v, size_t vn) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, "SELECT v FROM meta WHERE k=?1", -1, &st, NULL)) return -1;
  sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : -1;
  if (rc == 0) snprintf(v, vn, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return rc;
}

static int meta_set(mw_store *s, const char *k, const char *v) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)", -1, &st, NULL);
  if (rc) return dbfail(s, rc);
  sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, v, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbfail(s, rc);
}

/* The chain mode is fixed when the home is created: a keyed home refuses to
 * run without its key, and a plain home refuses a key, so a chain never
 * mixes the two.  The key's fingerprint (not the key) is kept in meta. */
static int setup_chain(mw_store *s, int creating) {
  unsigned char *key;
  size_t keylen;
  int rc = read_key(s, &key, &keylen);
  if (rc) return rc;
  char fp[65] = "", want[80] = "";
  if (key) {
    unsigned char d[32];
    mw__sha256(key, keylen, d);
    mw__hex(d, 32, fp);
  }
  if (creating) {
    rc = meta_set(s, "chain", key ? "hmac-sha256" : "sha256");
    if (!rc && key) rc = meta_set(s, "chain_key_sha256", fp);
  } else if (meta_get(s, "chain", want, sizeof want) == 0 && strcmp(want, "hmac-sha256") == 0) {
    char have[80] = "";
    meta_get(s, "chain_key_sha256", have, sizeof have);
    if (!key) rc = fail(s, MW_EINVAL, "this home's log is an HMAC chain: set MW_CHAIN_KEY_FILE to its key%s", NULL);
    else if (strcmp(have, fp) != 0) rc = fail(s, MW_EINVAL, "MW_CHAIN_KEY_FILE is not this home's chain key%s", NULL);
  } else if (key) {
    rc = fail(s, MW_EINVAL, "this home's log is a plain SHA-256 chain; unset MW_CHAIN_KEY_FILE%s", NULL);
  }
  if (!rc) {
    s->chain = mw__chain_new(key, keylen);
    if (!s->chain) rc = fail(s, MW_ENOMEM, "out of memory%s", NULL);
  }
  if (key) {
    memset(key, 0, keylen);
    free(key);
  }
  return rc;
}

int mw_store_open(const char *home, int flags, mw_store **out, char *err, size_t errlen) {
  *out = NULL;
  if (!home || !*home) {
    snprintf(err, errlen, "no home given");
    return MW_EINVAL;
  }
  mw_store *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return MW_ENOMEM;
  }
  s->keep_heads = 10;
  s->keep_ckpts = 3;
  s->home = strdup(home);
  int rc = 0, creating = 0;
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/mw.db", home);

  if (stat(home, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (!(flags & MW_STORE_CREATE)) {
      rc = fail(s, MW_ENOTHOME, "%s is not an MW home (no such directory)", home);
      goto done;
    }
    if (mkdir(home, 0700) != 0 && errno != EEXIST) {
      snprintf(s->err, sizeof s->err, "cannot create %s: %s", home, strerror(errno));
      rc = MW_EUNAVAIL;
      goto done;
    }
  }
  if (stat(path, &st) != 0) {
    if (!(flags & MW_STORE_CREATE)) {
      rc = fail(s, MW_ENOTHOME, "%s is not an MW home (no mw.db)", home);
      goto done;
    }
    creating = 1;
  }
  int oflags = (flags & MW_STORE_READONLY) ? SQLITE_OPEN_READONLY
                                           : SQLITE_OPEN_READWRITE | (creating ? SQLITE_OPEN_CREATE : 0);
  rc = sqlite3_open_v2(path, &s->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc) {
    rc = s->db ? dbfail(s, rc) : MW_ENOMEM;
    goto done;
  }
  sqlite3_busy_timeout(s->db, 5000);
  sqlite3_extended_result_codes(s->db, 1);
  /* WAL + FULL: a COMMIT returns only after the WAL is fsynced.  (An existing
   * file is switched to WAL only once it is known to be an MW home.) */
  if (creating && !(flags & MW_STORE_READONLY) && (rc = exec(s, "PRAGMA journal_mode=WAL"))) goto done;
  if ((rc = exec(s, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF"))) goto done;
  if (creating) {
    if ((rc = exec(s, "BEGIN IMMEDIATE"))) goto done;
    rc = exec(s, SCHEMA);
    if (!rc) rc = meta_set(s, "format", FORMAT);
    if (!rc) rc = setup_chain(s, 1);
    if (!rc) rc = exec(s, "COMMIT");
    if (rc) {
      mw_store_rollback(s);
      goto done;
    }
  } else {
    char fmt[32] = "";
    if (meta_get(s, "format", fmt, sizeof fmt) != 0 || strcmp(fmt, FORMAT) != 0) {
      rc = fail(s, MW_ENOTHOME, "%s is not an MW home (mw.db has no MW format mark)", home);
      goto done;
    }
    if (!(flags & MW_STORE_READONLY) && (rc = exec(s, "PRAGMA journal_mode=WAL"))) goto done;
    if ((rc = setup_chain(s, 0))) goto done;
    /* tables added since the home was made (IF NOT EXISTS: no write when present) */
    if (!(flags & MW_STORE_READONLY)) sqlite3_exec(s->db, SCHEMA, NULL, NULL, NULL);
  }
  /* Each tenant's own files (roster, skills, secrets, Cortex) live here. */
  snprintf(path, sizeof path, "%s/tenants", home);
  if (!(flags & MW_STORE_READONLY)) mkdir(path, 0700);

done:
  if (rc) {
    snprintf(err, errlen, "%s", s->err[0] ? s->err : mw_strerror(rc));
    mw_store_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

void mw_store_close(mw_store *s) {
  if (!s) return;
  for (int i = 0; i < Q__N; i++) sqlite3_finalize(s->q[i]);
  for (int i = 0; i < s->ncache; i++) sqlite3_finalize(s->cache[i].st);
  if (s->db) sqlite3_close_v2(s->db);
  mw__chain_free(s->chain);
  mw__buf_free(&s->canon);
  free(s->home);
  free(s);
}

const char *mw_store_errmsg(const mw_store *s) { return s->err; }
const char *mw_store_home(const mw_store *s) { return s->home; }
int mw_store_keyed(const mw_store *s) { return mw__chain_keyed(s->chain); }

void mw_store_retention(mw_store *s, int heads, int checkpoints) {
  s->keep_heads = heads < 0 ? 0 : heads;
  s->keep_ckpts = checkpoints < 0 ? 0 : checkpoints;
}

int mw_valid_id(const char *s) {
  size_t n = 0;
  if (!s) return 0;
  for (; s[n]; n++) {
    unsigned char c = (unsigned char)s[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '.' || c == '-'))
      return 0;
    if (n >= 64) return 0;
  }
  return n >= 1 && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* ---- tenants and streams ----------------------------------------------- */

int mw_store_tenant(mw_store *s, const char *tenant, int create) {
  if (!mw_valid_id(tenant)) return fail(s, MW_EINVAL, "invalid tenant name \"%.64s\"", tenant);
  sqlite3_stmt *st = Q(s, Q_TENANT);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  if (rc == SQLITE_ROW) return 0;
  if (rc != SQLITE_DONE) return dbfail(s, rc);
  if (!create) return fail(s, MW_ENOENT, "no tenant \"%s\"", tenant);
  tx t;
  if ((rc = tx_open(s, &t))) return rc;
  st = Q(s, Q_TENANT_NEW);
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, now_ms());
  rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  sqlite3_reset(st);
  rc = tx_close(s, &t, rc);
  if (rc == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tenants/%s", s->home, tenant);
    mkdir(path, 0700);
  }
  return rc;
}

int mw_store_stream(mw_store *s, const char *tenant, const char *actor, int create, int64_t *id) {
  if (!mw_valid_id(tenant)) return fail(s, MW_EINVAL, "invalid tenant name \"%.64s\"", tenant);
  if (!mw_valid_id(actor)) return fail(s, MW_EINVAL, "invalid actor id \"%.64s\"", actor);
  sqlite3_stmt *st = Q(s, Q_STREAM);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) return dbfail(s, rc);
  if (!create) return fail(s, MW_ENOENT, "no actor \"%s\"", actor);
  if ((rc = mw_store_tenant(s, tenant, 1))) return rc;
  tx t;
  if ((rc = tx_open(s, &t))) return rc;
  /* Under the write lock now: another connection may have created it since. */
  st = Q(s, Q_STREAM);
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) *id = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) return tx_close(s, &t, rc == SQLITE_ROW ? 0 : dbfail(s, rc));
  unsigned char g[32];
  mw__chain_genesis(s->chain, tenant, actor, g);
  st = Q(s, Q_STREAM_NEW);
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 3, g, 32, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, now_ms());
  rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  if (!rc) *id = sqlite3_last_insert_rowid(s->db);
  sqlite3_reset(st);
  return tx_close(s, &t, rc);
}

/* ---- the log ------------------------------------------------------------ */

static int tail(mw_store *s, int64_t stream, int64_t *cursor, unsigned char hash[32],
                char *tenant, char *actor) {
  sqlite3_stmt *st = Q(s, Q_TAIL);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_int64(st, 1, stream);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? fail(s, MW_ENOENT, "no such stream%s", NULL) : dbfail(s, rc);
  }
  *cursor = sqlite3_column_int64(st, 0);
  if (hash) {
    if (sqlite3_column_bytes(st, 1) != 32) {
      sqlite3_reset(st);
      return fail(s, MW_EBROKEN, "stream record has a malformed hash%s", NULL);
    }
    memcpy(hash, sqlite3_column_blob(st, 1), 32);
  }
  /* a NUL inside a stored id would hash as a shorter one: refuse it */
  for (int col = 2; col <= 3; col++) {
    const char *v = (const char *)sqlite3_column_text(st, col);
    if (!v || strlen(v) != (size_t)sqlite3_column_bytes(st, col) || !mw_valid_id(v)) {
      sqlite3_reset(st);
      return fail(s, MW_EBROKEN, "the stream record's tenant or actor is malformed%s", NULL);
    }
  }
  if (tenant) snprintf(tenant, 65, "%s", (const char *)sqlite3_column_text(st, 2));
  if (actor) snprintf(actor, 65, "%s", (const char *)sqlite3_column_text(st, 3));
  sqlite3_reset(st);
  return 0;
}

int mw_log_head(mw_store *s, int64_t stream, int64_t *cursor, unsigned char hash[32]) {
  return tail(s, stream, cursor, hash, NULL, NULL);
}

int mw_log_append(mw_store *s, int64_t stream, const mw_append *items, size_t n,
                  int64_t expect, int64_t *last) {
  char jerr[200];
  int rc;
  for (size_t i = 0; i < n; i++) {
    if (!mw_valid_id(items[i].kind))
      return fail(s, MW_EINVAL, "invalid entry kind \"%.64s\"", items[i].kind ? items[i].kind : "(null)");
  }
  tx t;
  if ((rc = tx_open(s, &t))) return rc;
  int64_t cursor;
  unsigned char prev[32], hash[32];
  if ((rc = tail(s, stream, &cursor, prev, NULL, NULL))) goto out;
  if (expect != MW_ANY && expect != cursor) {
    snprintf(s->err, sizeof s->err, "expected cursor %lld but the log is at %lld",
             (long long)expect, (long long)cursor);
    rc = MW_ECONFLICT;
    goto out;
  }
  int64_t ts = now_ms();
  sqlite3_stmt *ins = Q(s, Q_INSERT);
  if (!ins) { rc = dbfail(s, sqlite3_errcode(s->db)); goto out; }
  for (size_t i = 0; i < n; i++) {
    const char *body = items[i].body;
    size_t body_len = items[i].body_len;
    if (!items[i].canonical) {
      s->canon.len = 0;
      rc = mw__json_canon(body, body_len, &s->canon, jerr, sizeof jerr);
      if (rc) {
        snprintf(s->err, sizeof s->err, "entry %zu body: %s", i + 1, jerr);
        goto out;
      }
      body = s->canon.p;
      body_len = s->canon.len;
    }
    size_t klen = strlen(items[i].kind);
    cursor++;
    if (mw__chain_entry(s->chain, prev, cursor, ts, items[i].kind, klen, body,
                        body_len, hash)) {
      rc = fail(s, MW_ENOMEM, "out of memory hashing an entry%s", NULL);
      goto out;
    }
    sqlite3_reset(ins);
    sqlite3_bind_int64(ins, 1, stream);
    sqlite3_bind_int64(ins, 2, cursor);
    sqlite3_bind_int64(ins, 3, ts);
    sqlite3_bind_text(ins, 4, items[i].kind, (int)klen, SQLITE_STATIC);
    sqlite3_bind_text(ins, 5, body, (int)body_len, SQLITE_STATIC);
    sqlite3_bind_blob(ins, 6, prev, 32, SQLITE_STATIC);
    sqlite3_bind_blob(ins, 7, hash, 32, SQLITE_STATIC);
    int src = sqlite3_step(ins);
    sqlite3_reset(ins);
    if (src != SQLITE_DONE) { rc = dbfail(s, src); goto out; }
    memcpy(prev, hash, 32);
  }
  sqlite3_stmt *up = Q(s, Q_SET_TAIL);
  sqlite3_bind_int64(up, 1, stream);
  sqlite3_bind_int64(up, 2, cursor);
  sqlite3_bind_blob(up, 3, prev, 32, SQLITE_STATIC);
  int src = sqlite3_step(up);
  sqlite3_reset(up);
  if (src != SQLITE_DONE) rc = dbfail(s, src);
out:
  rc = tx_close(s, &t, rc);
  if (rc == 0 && last) *last = cursor;
  return rc;
}

static void row_entry(sqlite3_stmt *st, mw_entry *e) {
  e->cursor = sqlite3_column_int64(st, 0);
  e->ts = sqlite3_column_int64(st, 1);
  e->kind = (const char *)sqlite3_column_text(st, 2);
  e->body = (const char *)sqlite3_column_text(st, 3);
  e->body_len = (size_t)sqlite3_column_bytes(st, 3);
  memset(e->prev, 0, 32);
  memset(e->hash, 0, 32);
  if (sqlite3_column_bytes(st, 4) == 32) memcpy(e->prev, sqlite3_column_blob(st, 4), 32);
  if (sqlite3_column_bytes(st, 5) == 32) memcpy(e->hash, sqlite3_column_blob(st, 5), 32);
}

/* Reads use their own statement per call so that a callback may itself read
 * the store (a fold asking for an entry) without resetting the iteration. */
int mw_log_read(mw_store *s, int64_t stream, int64_t from, int64_t limit,
                mw_entry_cb cb, void *ud) {
  sqlite3_stmt *st = mw__store_stmt(s, SQL[Q_READ]);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  int rc;
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, from < 1 ? 1 : from);
  sqlite3_bind_int64(st, 3, limit < 0 ? -1 : limit);
  mw_entry e;
  int stop = 0;
  while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    row_entry(st, &e);
    stop = cb(ud, &e);
  }
  if (stop) rc = stop < 0 ? stop : 0;
  else rc = rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

int mw_log_entry_hash(mw_store *s, int64_t stream, int64_t cursor, unsigned char hash[32]) {
  sqlite3_stmt *st = Q(s, Q_HASH_AT);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, cursor);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == 32) {
    memcpy(hash, sqlite3_column_blob(st, 0), 32);
    rc = 0;
  } else {
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? fail(s, MW_ENOENT, "no entry at that cursor%s", NULL)
                                               : dbfail(s, rc);
  }
  sqlite3_reset(st);
  return rc;
}

int mw_log_verify(mw_store *s, int64_t stream, int64_t *bad) {
  int64_t last;
  unsigned char want[32], got[32], tailhash[32];
  char tenant[65], actor[65];
  int rc = tail(s, stream, &last, tailhash, tenant, actor);
  if (rc) return rc;
  *bad = 0;
  mw__chain_genesis(s->chain, tenant, actor, want);
  sqlite3_stmt *st;
  if ((rc = sqlite3_prepare_v2(s->db, SQL[Q_READ], -1, &st, NULL))) return dbfail(s, rc);
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, 1);
  sqlite3_bind_int64(st, 3, -1);
  int64_t expect = 1;
  const char *why = NULL;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    mw_entry e;
    row_entry(st, &e);
    if (e.cursor != expect) why = "a cursor is missing";
    else if (memcmp(e.prev, want, 32) != 0) why = "its previous hash does not link";
    else if (!mw_valid_id(e.kind) || strlen(e.kind) != (size_t)sqlite3_column_bytes(st, 2)) why = "its kind is malformed";
    else if (mw__chain_entry(s->chain, want, e.cursor, e.ts, e.kind, strlen(e.kind), e.body,
                             e.body_len, got) != 0) why = "it cannot be hashed";
    else if (memcmp(got, e.hash, 32) != 0) why = "its hash does not match its contents";
    if (why) break;
    memcpy(want, e.hash, 32);
    expect++;
  }
  sqlite3_finalize(st);
  if (!why && rc != SQLITE_DONE) return dbfail(s, rc);
  if (!why && expect - 1 != last) why = "the log ends before the stream's recorded last cursor";
  if (!why && memcmp(want, tailhash, 32) != 0) why = "the stream's recorded last hash does not match";
  if (!why) return 0;
  *bad = expect;
  snprintf(s->err, sizeof s->err, "chain broken at cursor %lld: %s", (long long)expect, why);
  return MW_EBROKEN;
}

/* ---- snapshots ---------------------------------------------------------- */

static void row_snapshot(sqlite3_stmt *st, mw_snapshot *p, int with_state) {
  memset(p, 0, sizeof *p);
  snprintf(p->id, sizeof p->id, "%s", (const char *)sqlite3_column_text(st, 0));
  p->cursor = sqlite3_column_int64(st, 1);
  if (with_state) {
    p->state_len = (size_t)sqlite3_column_bytes(st, 2);
    p->state = malloc(p->state_len + 1);
    if (p->state) {
      memcpy(p->state, sqlite3_column_text(st, 2), p->state_len);
      p->state[p->state_len] = '\0';
    }
  }
  if (sqlite3_column_bytes(st, 3) == 32) memcpy(p->state_hash, sqlite3_column_blob(st, 3), 32);
  if (sqlite3_column_bytes(st, 4) == 32) memcpy(p->entry_hash, sqlite3_column_blob(st, 4), 32);
  snprintf(p->fold, sizeof p->fold, "%s", (const char *)sqlite3_column_text(st, 5));
  p->created_at = sqlite3_column_int64(st, 6);
  p->safe = sqlite3_column_int(st, 7);
  p->is_head = sqlite3_column_int(st, 8);
}

/* The hash a snapshot at `cursor` links to: the entry's, or for cursor 0
 * (the empty state) the stream's genesis hash. */
static int link_hash(mw_store *s, int64_t stream, int64_t cursor, unsigned char h[32]) {
  if (cursor > 0) return mw_log_entry_hash(s, stream, cursor, h);
  char tn[65], an[65];
  int64_t last;
  int rc = tail(s, stream, &last, NULL, tn, an);
  if (!rc) mw__chain_genesis(s->chain, tn, an, h);
  return rc;
}

int mw_snapshot_put(mw_store *s, int64_t stream, mw_snapshot *snap) {
  unsigned char rnd[16];
  if (mw__random(rnd, sizeof rnd)) return fail(s, MW_EINTERNAL, "no randomness for a snapshot id%s", NULL);
  snap->id[0] = 's';
  snap->id[1] = '_';
  mw__hex(rnd, sizeof rnd, snap->id + 2);
  mw__sha256(snap->state, snap->state_len, snap->state_hash);
  snap->created_at = now_ms();
  snap->safe = 1;
  tx t;
  int rc = tx_open(s, &t);
  if (rc) return rc;
  if ((rc = link_hash(s, stream, snap->cursor, snap->entry_hash))) goto out;
  sqlite3_stmt *st = Q(s, Q_SNAP_PUT);
  sqlite3_bind_text(st, 1, snap->id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, stream);
  sqlite3_bind_int64(st, 3, snap->cursor);
  sqlite3_bind_text(st, 4, snap->state, (int)snap->state_len, SQLITE_STATIC);
  sqlite3_bind_blob(st, 5, snap->state_hash, 32, SQLITE_STATIC);
  sqlite3_bind_blob(st, 6, snap->entry_hash, 32, SQLITE_STATIC);
  sqlite3_bind_text(st, 7, snap->fold, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 8, snap->created_at);
  sqlite3_bind_int(st, 9, snap->is_head ? 1 : 0);
  int src = sqlite3_step(st);
  sqlite3_reset(st);
  if (src != SQLITE_DONE) { rc = dbfail(s, src); goto out; }
  if (snap->is_head) {
    st = Q(s, Q_HEAD_SET);
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_text(st, 2, snap->id, -1, SQLITE_STATIC);
    src = sqlite3_step(st);
    sqlite3_reset(st);
    if (src != SQLITE_DONE) { rc = dbfail(s, src); goto out; }
    st = Q(s, Q_PRUNE_HEADS);
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_text(st, 2, snap->id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, s->keep_heads);
    src = sqlite3_step(st);
    sqlite3_reset(st);
  } else {
    st = Q(s, Q_PRUNE_CKPT);
    sqlite3_bind_int64(st, 1, stream);
    sqlite3_bind_int(st, 2, s->keep_ckpts);
    src = sqlite3_step(st);
    sqlite3_reset(st);
  }
  if (src != SQLITE_DONE) rc = dbfail(s, src);
out:
  return tx_close(s, &t, rc);
}

int mw_snapshot_get(mw_store *s, int64_t stream, const char *id, mw_snapshot *out) {
  memset(out, 0, sizeof *out);
  sqlite3_stmt *st = Q(s, Q_SNAP_GET);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, stream);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    row_snapshot(st, out, 1);
    rc = out->state ? 0 : fail(s, MW_ENOMEM, "out of memory%s", NULL);
  } else {
    rc = rc == SQLITE_DONE ? fail(s, MW_ENOENT, "no snapshot \"%.64s\"", id) : dbfail(s, rc);
  }
  sqlite3_reset(st);
  return rc;
}

void mw_snapshot_free(mw_snapshot *snap) {
  if (!snap) return;
  free(snap->state);
  snap->state = NULL;
}

int mw_snapshot_verify(mw_store *s, int64_t stream, const mw_snapshot *snap) {
  unsigned char h[32];
  if (!snap->state) return fail(s, MW_ECORRUPT, "snapshot %s has no state", snap->id);
  mw__sha256(snap->state, snap->state_len, h);
  if (memcmp(h, snap->state_hash, 32) != 0)
    return fail(s, MW_ECORRUPT, "snapshot %s: state does not match its hash", snap->id);
  int rc = link_hash(s, stream, snap->cursor, h);
  if (rc == MW_ENOENT) return fail(s, MW_ECORRUPT, "snapshot %s: its cursor is not in the log", snap->id);
  if (rc) return rc;
  if (memcmp(h, snap->entry_hash, 32) != 0)
    return fail(s, MW_ECORRUPT, "snapshot %s: does not link into the log's chain", snap->id);
  return 0;
}

int mw_snapshot_mark_unsafe(mw_store *s, const char *id) {
  tx t;
  int rc = tx_open(s, &t);
  if (rc) return rc;
  sqlite3_stmt *st = Q(s, Q_SNAP_UNSAFE);
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int src = sqlite3_step(st);
  sqlite3_reset(st);
  return tx_close(s, &t, src == SQLITE_DONE ? 0 : dbfail(s, src));
}

int mw_snapshot_head(mw_store *s, int64_t stream, char id[40]) {
  id[0] = '\0';
  sqlite3_stmt *st = Q(s, Q_HEAD_GET);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_int64(st, 1, stream);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    if (sqlite3_column_type(st, 0) == SQLITE_TEXT)
      snprintf(id, 40, "%s", (const char *)sqlite3_column_text(st, 0));
    rc = 0;
  } else {
    rc = rc == SQLITE_DONE ? fail(s, MW_ENOENT, "no such stream%s", NULL) : dbfail(s, rc);
  }
  sqlite3_reset(st);
  return rc;
}

int mw_snapshot_list(mw_store *s, int64_t stream, mw_snapshot_cb cb, void *ud) {
  sqlite3_stmt *st = mw__store_stmt(s, SQL[Q_SNAP_LIST]);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  int rc;
  sqlite3_bind_int64(st, 1, stream);
  int stop = 0;
  while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    mw_snapshot p;
    row_snapshot(st, &p, 0);
    stop = cb(ud, &p);
  }
  if (stop) rc = stop < 0 ? stop : 0;
  else rc = rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

/* ---- tokens -------------------------------------------------------------- */

static int token_hash(const char *token, unsigned char h[32]) {
  size_t n = strlen(token);
  if (n == 0 || n > 256) return -1;
  mw__sha256(token, n, h);
  return 0;
}

int mw_token_create(mw_store *s, const char *tenant, const char *role, char token[68]) {
  if (strcmp(role, "agent") != 0 && strcmp(role, "operator") != 0)
    return fail(s, MW_EINVAL, "role must be agent or operator, not \"%.32s\"", role);
  int rc = mw_store_tenant(s, tenant, 1);
  if (rc) return rc;
  unsigned char rnd[32], h[32];
  if (mw__random(rnd, sizeof rnd)) return fail(s, MW_EINTERNAL, "no randomness for a token%s", NULL);
  memcpy(token, "mw_", 3);
  mw__hex(rnd, sizeof rnd, token + 3);
  token_hash(token, h);
  tx t;
  if ((rc = tx_open(s, &t))) return rc;
  sqlite3_stmt *st = Q(s, Q_TOKEN_NEW);
  sqlite3_bind_blob(st, 1, h, 32, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, role, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, now_ms());
  int src = sqlite3_step(st);
  sqlite3_reset(st);
  rc = tx_close(s, &t, src == SQLITE_DONE ? 0 : dbfail(s, src));
  if (rc) memset(token, 0, 68);
  return rc;
}

int mw_token_revoke(mw_store *s, const char *token) {
  unsigned char h[32];
  if (token_hash(token, h)) return fail(s, MW_ENOENT, "no such token%s", NULL);
  tx t;
  int rc = tx_open(s, &t);
  if (rc) return rc;
  sqlite3_stmt *st = Q(s, Q_TOKEN_REVOKE);
  sqlite3_bind_blob(st, 1, h, 32, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, now_ms());
  int src = sqlite3_step(st);
  sqlite3_reset(st);
  if (src != SQLITE_DONE) rc = dbfail(s, src);
  else if (sqlite3_changes(s->db) == 0) rc = fail(s, MW_ENOENT, "no such token (or already revoked)%s", NULL);
  return tx_close(s, &t, rc);
}

int mw_token_lookup(mw_store *s, const char *token, char tenant[65], char role[16]) {
  unsigned char h[32];
  if (!token || token_hash(token, h)) return fail(s, MW_EAUTH, "unknown token%s", NULL);
  sqlite3_stmt *st = Q(s, Q_TOKEN_GET);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_blob(st, 1, h, 32, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    snprintf(tenant, 65, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(role, 16, "%s", (const char *)sqlite3_column_text(st, 1));
    rc = 0;
  } else {
    rc = rc == SQLITE_DONE ? fail(s, MW_EAUTH, "unknown or revoked token%s", NULL) : dbfail(s, rc);
  }
  sqlite3_reset(st);
  return rc;
}

/* ---- for the other storage files (store_int.h) ----------------------------- */

sqlite3 *mw__store_db(mw_store *s) { return s->db; }
int mw__store_dbfail(mw_store *s, int rc) { return dbfail(s, rc); }
int mw__store_fail(mw_store *s, int code, const char *msg) { return fail(s, code, "%s", msg); }

void mw_store_busy_timeout(mw_store *s, int ms) { sqlite3_busy_timeout(s->db, ms); }

int mw_store_savepoint(mw_store *s) { return exec(s, "SAVEPOINT mw_job"); }

int mw_store_release(mw_store *s, int ok) {
  if (ok) return exec(s, "RELEASE mw_job");
  char keep[sizeof s->err];
  memcpy(keep, s->err, sizeof keep);
  sqlite3_exec(s->db, "ROLLBACK TO mw_job; RELEASE mw_job", NULL, NULL, NULL);
  memcpy(s->err, keep, sizeof keep);
  return 0;
}

int mw_store_in_tx(mw_store *s) { return !sqlite3_get_autocommit(s->db); }

int mw_snapshot_newest(mw_store *s, int64_t stream, const char *fold, int64_t *cursor) {
  static const char sql[] = "SELECT max(cursor) FROM snapshots WHERE stream=?1 AND fold=?2 AND safe=1";
  *cursor = -1;
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  int rc;
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_text(st, 2, fold, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) *cursor = sqlite3_column_int64(st, 0);
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

/* After a COMMIT whose fsync failed, the transaction's WAL frames may still
 * sit in the file (in the page cache) with a valid commit mark, and a restart
 * would recover writes the callers were told failed.  A tiny transaction
 * written now lands on the same WAL offset (the failed frames were never
 * added to the WAL index) and breaks their checksum chain, so recovery stops
 * before them.  Best effort: its own failure changes nothing. */
void mw_store_scrub(mw_store *s) {
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_exec(s->db,
               "BEGIN IMMEDIATE;"
               "INSERT INTO meta(k, v) VALUES('scrubs', '1')"
               " ON CONFLICT(k) DO UPDATE SET v = CAST(v AS INTEGER) + 1;"
               "COMMIT;", NULL, NULL, NULL);
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int mw_store_streams(mw_store *s, const char *tenant, mw_stream_cb cb, void *ud) {
  static const char sql[] = "SELECT id, actor, last_cursor FROM streams WHERE tenant=?1 ORDER BY actor";
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return dbfail(s, sqlite3_errcode(s->db));
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  int rc, stop = 0;
  while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
    stop = cb(ud, sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2));
  if (stop) rc = stop < 0 ? stop : 0;
  else rc = rc == SQLITE_DONE ? 0 : dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

int64_t mw_store_count_streams(mw_store *s, const char *tenant) {
  static const char sql[] = "SELECT count(*) FROM streams WHERE tenant=?1";
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return 0;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  mw__store_done(s, st);
  return n;
}

int64_t mw_store_log_bytes(mw_store *s, const char *tenant) {
  static const char sql[] = "SELECT total(length(CAST(e.body AS BLOB))) FROM entries e JOIN streams t ON e.stream = t.id"
                            " WHERE t.tenant=?1";
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return 0;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  int64_t n = sqlite3_step(st) == SQLITE_ROW ? (int64_t)sqlite3_column_double(st, 0) : 0;
  mw__store_done(s, st);
  return n;
}
