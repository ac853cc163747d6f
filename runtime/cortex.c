/* cortex.c -- the Cortex: a tenant's knowledge graph in its own SQLite file,
 * derived from `fact` log entries (see cortex.h).  It keeps every version and
 * the current state, computed so that the same facts give the same bytes in
 * any order (rebuild == live).  It is never the truth -- the log is -- so it
 * runs WAL with synchronous=NORMAL, and it never touches Lua or libuv.
 *
 * Lifecycle: mw_cortex_open returns a handle owning one SQLite connection and
 * its cached statements; one thread at a time; mw_cortex_close(NULL) is fine.
 * Every call leaves no statement running and no transaction it began open.
 *
 * The version chain.  Each fact item becomes a version of a node key (or of
 * an edge from/rel/to), identified and ordered by (ts, actor, cursor, item)
 * -- the primary key of the version tables, so that re-applying an entry
 * writes nothing (the log fixes an entry's ts, so this is its (actor, cursor,
 * item) identity).  Walking a key's versions in that order with a state
 * "live or absent":
 *   stated     always takes effect (the node/edge as the fact says);
 *   retraction takes effect when live (-> absent);
 *   promoted   takes effect when live: a copy of the live version, trust "fact";
 *   implied    takes effect only when absent (nodes: see below).
 * A version that takes effect has live=1 and valid_to = the ts of the next one
 * that does (NULL for the last); retractions and promotes that do not are kept
 * with live=0 (an out-of-order fact can wake them up).  The current row is the
 * last live version unless it is a retraction.  All of it is a function of
 * the set of facts, never of their arrival order.
 *
 * Never dangling: every stated edge is also an "implied" event for both of
 * its nodes (kind "unknown", label = key, trust "claim", the edge's actor,
 * cursor, item and ts): an edge naming a missing node creates it as its own
 * version.  The events are read from edge_versions; node_versions holds a row
 * only for those that take effect, so a live graph does not pay a row per
 * edge end.  An edge whose node was retracted after the edge was stated stays
 * in edges_current but is never navigated (reads join both ends to
 * nodes_current) until the node comes back.
 *
 * A promote names a key that must be current when its entry is applied
 * (MW_EINVAL otherwise, nothing written): the one order-dependent check.
 * Once accepted, what it copies is resolved in the chain, so a set of
 * accepted facts gives the same graph in any order.
 *
 * Navigation reads current rows only (history=1 adds superseded versions) in
 * one read transaction, and is deterministic: BFS in key order, output sorted
 * by content, full-text recency measured from the newest fact in the Cortex,
 * never the wall clock; a hint reaches FTS5 only as quoted plain terms. */
#include "cortex.h"
#include "jfield.h"
#include "json.h"
#include "mw.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT "mw-cortex/1"
#define KEY_MAX 128
#define KIND_MAX 64
#define ACTOR_MAX 64
#define LABEL_MAX 4096
#define PROPS_MAX 16384
#define FACTS_MAX 10000
#define RELS_MAX 32
#define HINT_TOKENS 32
#define TOKEN_MAX 64
#define PATH_VISIT_MAX 10000
#define RECENCY_MS (7.0 * 24 * 3600 * 1000)
#define KEY_RULE "1-128 of A-Z a-z 0-9 _ . : / -"

/* ---- schema ------------------------------------------------------------
 * Navigation is B-tree seeks, so the tables are laid out for one seek per
 * neighbour: nodes_current is clustered on key (its integer id, assigned at
 * insert, is the FTS rowid; nodes_current_rank takes a match to its key and
 * age); edges_current is clustered on (src, rel, dst) --
 * its primary key is the (src, rel) index -- and edges_current_dst, the
 * (dst, rel) index, covers every column, so incoming edges need no second
 * seek.  nodes_fts is an external-content FTS5 table over nodes_current
 * (label, props, key), kept in sync by the triggers. */
static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v);"
  "CREATE TABLE IF NOT EXISTS applied(actor TEXT PRIMARY KEY, cursor INTEGER NOT NULL);"
  "CREATE TABLE IF NOT EXISTS node_versions(key TEXT NOT NULL,"
  " ts INTEGER NOT NULL, actor TEXT NOT NULL, cursor INTEGER NOT NULL, item INTEGER NOT NULL,"
  " retract INTEGER NOT NULL, origin TEXT NOT NULL, live INTEGER NOT NULL,"
  " valid_from INTEGER NOT NULL, valid_to INTEGER,"
  " kind TEXT, label TEXT, props TEXT, trust TEXT,"
  " PRIMARY KEY(key, ts, actor, cursor, item)) WITHOUT ROWID;"
  "CREATE TABLE IF NOT EXISTS edge_versions(src TEXT NOT NULL, rel TEXT NOT NULL, dst TEXT NOT NULL,"
  " ts INTEGER NOT NULL, actor TEXT NOT NULL, cursor INTEGER NOT NULL, item INTEGER NOT NULL,"
  " retract INTEGER NOT NULL, origin TEXT NOT NULL, live INTEGER NOT NULL,"
  " valid_from INTEGER NOT NULL, valid_to INTEGER,"
  " weight REAL, props TEXT, trust TEXT,"
  " PRIMARY KEY(src, rel, dst, ts, actor, cursor, item)) WITHOUT ROWID;"
  /* the implied events of a node at the `to` end (the `from` end is the key's prefix) */
  "CREATE INDEX IF NOT EXISTS edge_versions_dst ON edge_versions(dst)"
  " WHERE retract=0 AND origin='stated';"
  "CREATE TABLE IF NOT EXISTS nodes_current(key TEXT PRIMARY KEY, id INTEGER NOT NULL,"
  " kind TEXT NOT NULL, label TEXT NOT NULL, props TEXT NOT NULL, trust TEXT NOT NULL,"
  " valid_from INTEGER NOT NULL, actor TEXT NOT NULL, cursor INTEGER NOT NULL) WITHOUT ROWID;"
  /* id -> (valid_from, key): what ranking a full-text match needs, in one seek */
  "CREATE UNIQUE INDEX IF NOT EXISTS nodes_current_id ON nodes_current(id);"
  "CREATE INDEX IF NOT EXISTS nodes_current_rank ON nodes_current(id, valid_from);"
  "CREATE TABLE IF NOT EXISTS edges_current(src TEXT NOT NULL, rel TEXT NOT NULL, dst TEXT NOT NULL,"
  " weight REAL NOT NULL, props TEXT NOT NULL, trust TEXT NOT NULL, valid_from INTEGER NOT NULL,"
  " actor TEXT NOT NULL, cursor INTEGER NOT NULL, PRIMARY KEY(src, rel, dst)) WITHOUT ROWID;"
  "CREATE INDEX IF NOT EXISTS edges_current_dst ON edges_current(dst, rel, src, weight, props, trust,"
  " valid_from, actor, cursor);"
  "CREATE VIRTUAL TABLE IF NOT EXISTS nodes_fts USING fts5(label, props, key,"
  " content='nodes_current', content_rowid='id');"
  "CREATE TRIGGER IF NOT EXISTS nodes_current_ai AFTER INSERT ON nodes_current BEGIN"
  " INSERT INTO nodes_fts(rowid, label, props, key) VALUES(new.id, new.label, new.props, new.key);"
  " END;"
  "CREATE TRIGGER IF NOT EXISTS nodes_current_ad AFTER DELETE ON nodes_current BEGIN"
  " INSERT INTO nodes_fts(nodes_fts, rowid, label, props, key)"
  "  VALUES('delete', old.id, old.label, old.props, old.key);"
  " END;"
  "CREATE TRIGGER IF NOT EXISTS nodes_current_au AFTER UPDATE ON nodes_current"
  " WHEN old.label IS NOT new.label OR old.props IS NOT new.props OR old.key IS NOT new.key BEGIN"
  " INSERT INTO nodes_fts(nodes_fts, rowid, label, props, key)"
  "  VALUES('delete', old.id, old.label, old.props, old.key);"
  " INSERT INTO nodes_fts(rowid, label, props, key) VALUES(new.id, new.label, new.props, new.key);"
  " END;"
  "INSERT OR IGNORE INTO meta(k, v) VALUES('format', '" FORMAT "'), ('newest_ts', 0);";

static const char DROP[] =
  "DROP TRIGGER IF EXISTS nodes_current_ai; DROP TRIGGER IF EXISTS nodes_current_ad;"
  "DROP TRIGGER IF EXISTS nodes_current_au; DROP TABLE IF EXISTS nodes_fts;"
  "DROP TABLE IF EXISTS nodes_current; DROP TABLE IF EXISTS edges_current;"
  "DROP TABLE IF EXISTS node_versions; DROP TABLE IF EXISTS edge_versions;"
  "DROP TABLE IF EXISTS applied; DROP TABLE IF EXISTS meta;";

/* ---- statements --------------------------------------------------------- */

/* Row layouts shared by the readers: a node is (key, kind, label, props,
 * trust, valid_from, valid_to, actor, cursor), an edge is (src, rel, dst,
 * weight, props, trust, valid_from, valid_to, actor, cursor). */
#define NODE_COLS(p) p "key, " p "kind, " p "label, " p "props, " p "trust, " p "valid_from, NULL, " \
                     p "actor, " p "cursor"
#define EDGE_COLS(p) p "src, " p "rel, " p "dst, " p "weight, " p "props, " p "trust, " \
                     p "valid_from, NULL, " p "actor, " p "cursor"
#define EDGE_NCOLS 10

enum {
  Q_BEGIN, Q_BEGIN_READ, Q_COMMIT, Q_ROLLBACK, Q_SAVE, Q_RELEASE, Q_UNDO,
  Q_CHECK, Q_NEWEST, Q_NEWEST_SET, Q_APPLIED, Q_APPLIED_SET,
  Q_NODE, Q_OUT, Q_OUT_REL, Q_IN, Q_IN_REL, Q_OUT_E, Q_OUT_E_REL, Q_IN_E, Q_IN_E_REL, Q_FTS, Q__N
};

static const char *const SQL[Q__N] = {
  [Q_BEGIN] = "BEGIN IMMEDIATE",
  [Q_BEGIN_READ] = "BEGIN",
  [Q_COMMIT] = "COMMIT",
  [Q_ROLLBACK] = "ROLLBACK",
  [Q_SAVE] = "SAVEPOINT cortex_call",
  [Q_RELEASE] = "RELEASE cortex_call",
  [Q_UNDO] = "ROLLBACK TO cortex_call",
  [Q_CHECK] = "SELECT v FROM meta WHERE k='format'",
  [Q_NEWEST] = "SELECT v FROM meta WHERE k='newest_ts'",
  [Q_NEWEST_SET] = "UPDATE meta SET v=max(v, ?1) WHERE k='newest_ts'",
  [Q_APPLIED] = "SELECT cursor FROM applied WHERE actor=?1",
  [Q_APPLIED_SET] = "INSERT INTO applied(actor, cursor) VALUES(?1, ?2)"
                    " ON CONFLICT(actor) DO UPDATE SET cursor=excluded.cursor",
  [Q_NODE] = "SELECT " NODE_COLS("") " FROM nodes_current WHERE key=?1",
  /* Neighbours: the edge, then the node at its other end (never dangling). */
  [Q_OUT] = "SELECT " EDGE_COLS("e.") ", " NODE_COLS("n.") " FROM edges_current e"
            " JOIN nodes_current n ON n.key=e.dst WHERE e.src=?1 ORDER BY e.rel, e.dst",
  [Q_OUT_REL] = "SELECT " EDGE_COLS("e.") ", " NODE_COLS("n.") " FROM edges_current e"
                " JOIN nodes_current n ON n.key=e.dst WHERE e.src=?1 AND e.rel=?2 ORDER BY e.dst",
  [Q_IN] = "SELECT " EDGE_COLS("e.") ", " NODE_COLS("n.") " FROM edges_current e"
           " JOIN nodes_current n ON n.key=e.src WHERE e.dst=?1 ORDER BY e.rel, e.src",
  [Q_IN_REL] = "SELECT " EDGE_COLS("e.") ", " NODE_COLS("n.") " FROM edges_current e"
               " JOIN nodes_current n ON n.key=e.src WHERE e.dst=?1 AND e.rel=?2 ORDER BY e.src",
  /* The same without the node: once no node may be added, only edges to
   * nodes already kept matter, and those need no seek. */
  [Q_OUT_E] = "SELECT " EDGE_COLS("e.") ", e.dst FROM edges_current e WHERE e.src=?1 ORDER BY e.rel, e.dst",
  [Q_OUT_E_REL] = "SELECT " EDGE_COLS("e.") ", e.dst FROM edges_current e WHERE e.src=?1 AND e.rel=?2"
                  " ORDER BY e.dst",
  [Q_IN_E] = "SELECT " EDGE_COLS("e.") ", e.src FROM edges_current e WHERE e.dst=?1 ORDER BY e.rel, e.src",
  [Q_IN_E_REL] = "SELECT " EDGE_COLS("e.") ", e.src FROM edges_current e WHERE e.dst=?1 AND e.rel=?2"
                 " ORDER BY e.src",
  [Q_FTS] = "SELECT n.key, bm25(nodes_fts), n.valid_from FROM nodes_fts"
            " JOIN nodes_current n INDEXED BY nodes_current_rank ON n.id=nodes_fts.rowid"
            " WHERE nodes_fts MATCH ?1",
};

/* The version tables share one parameter numbering, so that one set of
 * binders serves both:
 *   ?1 key (edges: ?1 src, ?2 rel, ?3 dst), ?4 ts, ?5 actor, ?6 cursor,
 *   ?7 item, ?8 retract, ?9 origin, ?10 kind, ?11 label, ?12 props,
 *   ?13 trust, ?14 weight, ?16 live, ?17 valid_to.
 * A version is named by its key and (?4, ?5, ?6, ?7).  Rows are read as
 * (ts, actor, cursor, item, retract, origin, live, valid_to, kind, label,
 * props, trust, weight). */
enum { T_NODES, T_EDGES };
enum { V_INS, V_LATER, V_PREV, V_WALK, V_EVENTS, V_DEL_IMPLIED, V_SET_LIVE, V_SET_CONTENT, V_CUR_PUT,
       V_CUR_DEL, V_CUR_HAS, V_HIST, V__N };

#define VORDER "ts, actor, cursor, item"
#define VDESC "ts DESC, actor DESC, cursor DESC, item DESC"
#define NKEY "key=?1"
#define EKEY "src=?1 AND rel=?2 AND dst=?3"
#define VID " AND ts=?4 AND actor=?5 AND cursor=?6 AND item=?7"
#define VCOLS "ts, actor, cursor, item, retract, origin, live, valid_to, "

static const char *const VSQL[2][V__N] = {
  [T_NODES] = {
    [V_INS] = "INSERT OR IGNORE INTO node_versions(key, ts, actor, cursor, item, retract, origin,"
              " live, valid_from, valid_to, kind, label, props, trust)"
              " VALUES(?1, ?4, ?5, ?6, ?7, ?8, ?9, ?16, ?4, ?17, ?10, ?11, ?12, ?13)",
    [V_LATER] = "SELECT 1 FROM node_versions WHERE " NKEY " AND (" VORDER ") > (?4, ?5, ?6, ?7) LIMIT 1",
    [V_PREV] = "SELECT " VCOLS "kind, label, props, trust, NULL FROM node_versions"
               " WHERE " NKEY " AND live=1 ORDER BY " VDESC " LIMIT 1",
    [V_WALK] = "SELECT " VCOLS "kind, label, props, trust, NULL FROM node_versions"
               " WHERE " NKEY " AND origin<>'implied' ORDER BY " VORDER,
    [V_EVENTS] = "SELECT " VORDER " FROM edge_versions WHERE src=?1 AND retract=0 AND origin='stated'"
                 " UNION SELECT " VORDER " FROM edge_versions WHERE dst=?1 AND retract=0 AND origin='stated'",
    [V_DEL_IMPLIED] = "DELETE FROM node_versions WHERE " NKEY " AND origin='implied'",
    [V_SET_LIVE] = "UPDATE node_versions SET live=?16, valid_to=?17 WHERE " NKEY VID,
    [V_SET_CONTENT] = "UPDATE node_versions SET kind=?10, label=?11, props=?12, trust=?13 WHERE " NKEY VID,
    [V_CUR_PUT] = "INSERT INTO nodes_current(key, id, kind, label, props, trust, valid_from, actor, cursor)"
                  " SELECT key, (SELECT coalesce(max(id), 0) + 1 FROM nodes_current), kind, label, props,"
                  " trust, ts, actor, cursor FROM node_versions"
                  " WHERE " NKEY VID
                  " ON CONFLICT(key) DO UPDATE SET kind=excluded.kind, label=excluded.label,"
                  " props=excluded.props, trust=excluded.trust, valid_from=excluded.valid_from,"
                  " actor=excluded.actor, cursor=excluded.cursor",
    [V_CUR_DEL] = "DELETE FROM nodes_current WHERE " NKEY,
    [V_CUR_HAS] = "SELECT 1 FROM nodes_current WHERE " NKEY,
    [V_HIST] = "SELECT key, kind, label, props, trust, valid_from, valid_to, actor, cursor"
               " FROM node_versions WHERE " NKEY " AND live=1 AND retract=0 AND valid_to IS NOT NULL"
               " ORDER BY " VORDER,
  },
  [T_EDGES] = {
    [V_INS] = "INSERT OR IGNORE INTO edge_versions(src, rel, dst, ts, actor, cursor, item, retract,"
              " origin, live, valid_from, valid_to, weight, props, trust)"
              " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?16, ?4, ?17, ?14, ?12, ?13)",
    [V_LATER] = "SELECT 1 FROM edge_versions WHERE " EKEY " AND (" VORDER ") > (?4, ?5, ?6, ?7) LIMIT 1",
    [V_PREV] = "SELECT " VCOLS "NULL, NULL, props, trust, weight FROM edge_versions"
               " WHERE " EKEY " AND live=1 ORDER BY " VDESC " LIMIT 1",
    [V_WALK] = "SELECT " VCOLS "NULL, NULL, props, trust, weight FROM edge_versions"
               " WHERE " EKEY " ORDER BY " VORDER,
    [V_EVENTS] = "SELECT 1 WHERE 0",
    [V_DEL_IMPLIED] = "SELECT 1 WHERE 0",
    [V_SET_LIVE] = "UPDATE edge_versions SET live=?16, valid_to=?17 WHERE " EKEY VID,
    [V_SET_CONTENT] = "UPDATE edge_versions SET props=?12, trust=?13, weight=?14 WHERE " EKEY VID,
    [V_CUR_PUT] = "INSERT INTO edges_current(src, rel, dst, weight, props, trust, valid_from, actor, cursor)"
                  " SELECT src, rel, dst, weight, props, trust, ts, actor, cursor FROM edge_versions"
                  " WHERE " EKEY VID " ON CONFLICT(src, rel, dst) DO UPDATE SET weight=excluded.weight,"
                  " props=excluded.props, trust=excluded.trust, valid_from=excluded.valid_from,"
                  " actor=excluded.actor, cursor=excluded.cursor",
    [V_CUR_DEL] = "DELETE FROM edges_current WHERE " EKEY,
    [V_CUR_HAS] = "SELECT 1 FROM edges_current WHERE " EKEY,
    [V_HIST] = "SELECT src, rel, dst, weight, props, trust, valid_from, valid_to, actor, cursor"
               " FROM edge_versions WHERE " EKEY " AND live=1 AND retract=0 AND valid_to IS NOT NULL"
               " ORDER BY " VORDER,
  },
};

struct mw_cortex {
  sqlite3 *db;
  sqlite3_stmt *q[Q__N];
  sqlite3_stmt *vq[2][V__N];
  mw_buf canon;          /* scratch: the body being applied, canonical */
  char err[512];
};

/* ---- errors ------------------------------------------------------------- */

static int vfmt(char *err, size_t errlen, int code, const char *fmt, va_list ap) {
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  return code;
}

static int ferr(char *err, size_t errlen, int code, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static int ferr(char *err, size_t errlen, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfmt(err, errlen, code, fmt, ap);
  va_end(ap);
  return code;
}

static int cfail(mw_cortex *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cfail(mw_cortex *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfmt(c->err, sizeof c->err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* Maps an SQLite failure.  Whatever means "the Cortex cannot serve now" is
 * MW_EUNAVAIL with one of a few fixed reasons (they reach a briefing as the
 * Facts leg's `reason`, so they hold no variable text); the rest is internal. */
static int dbfail(mw_cortex *c, int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY: case SQLITE_LOCKED:
      return cfail(c, MW_EUNAVAIL, "cortex is locked");
    case SQLITE_CORRUPT: case SQLITE_NOTADB: case SQLITE_FORMAT:
      return cfail(c, MW_EUNAVAIL, "cortex is corrupt");
    case SQLITE_CANTOPEN: case SQLITE_PERM: case SQLITE_AUTH:
      return cfail(c, MW_EUNAVAIL, "cortex file unreadable");
    case SQLITE_READONLY:
      return cfail(c, MW_EUNAVAIL, "cortex is read-only");
    case SQLITE_IOERR: case SQLITE_FULL: case SQLITE_PROTOCOL:
      return cfail(c, MW_EUNAVAIL, "cortex I/O failed");
    case SQLITE_NOMEM:
      return cfail(c, MW_ENOMEM, "out of memory");
  }
  return cfail(c, MW_EINTERNAL, "cortex: %s (%s)", c->db ? sqlite3_errmsg(c->db) : "no database",
               sqlite3_errstr(rc));
}

/* A failure while writing output: out of memory, or a stored text that is not
 * valid UTF-8 (internal). */
static int outfail(mw_cortex *c, int rc) {
  return rc == MW_ENOMEM ? cfail(c, rc, "out of memory") : cfail(c, MW_EINTERNAL, "cortex: output failed");
}

static int prepfail(mw_cortex *c) { return dbfail(c, c->db ? sqlite3_errcode(c->db) : SQLITE_MISUSE); }

static sqlite3_stmt *prep(mw_cortex *c, sqlite3_stmt **slot, const char *sql) {
  if (*slot) {
    sqlite3_reset(*slot);
    sqlite3_clear_bindings(*slot);
    return *slot;
  }
  if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL) != SQLITE_OK) return NULL;
  return *slot;
}

static sqlite3_stmt *Q(mw_cortex *c, int which) { return prep(c, &c->q[which], SQL[which]); }
static sqlite3_stmt *VQ(mw_cortex *c, int t, int which) { return prep(c, &c->vq[t][which], VSQL[t][which]); }

static void drop_statements(mw_cortex *c) {
  for (int i = 0; i < Q__N; i++) {
    sqlite3_finalize(c->q[i]);
    c->q[i] = NULL;
  }
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < V__N; i++) {
      sqlite3_finalize(c->vq[t][i]);
      c->vq[t][i] = NULL;
    }
}

/* Runs a statement that returns no row we need; leaves it reset. */
static int run(mw_cortex *c, sqlite3_stmt *st) {
  if (!st) return prepfail(c);
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : dbfail(c, rc);
}

static int exec(mw_cortex *c, const char *sql) {
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  return rc ? dbfail(c, rc) : 0;
}

/* ---- transactions --------------------------------------------------------
 * A write call opens its own transaction (BEGIN IMMEDIATE) when none is open,
 * else a SAVEPOINT inside the caller's, so a failing call inside a batch
 * leaves the others intact; tx_close ends exactly what tx_open began. */

typedef struct { int own; } tx;

static int tx_open(mw_cortex *c, tx *t) {
  t->own = sqlite3_get_autocommit(c->db);
  return run(c, Q(c, t->own ? Q_BEGIN : Q_SAVE));
}

static int tx_close(mw_cortex *c, tx *t, int rc) {
  if (rc == 0) {
    rc = run(c, Q(c, t->own ? Q_COMMIT : Q_RELEASE));
    if (rc == 0) return 0;
  }
  char keep[sizeof c->err];
  memcpy(keep, c->err, sizeof keep);
  if (t->own) {
    if (!sqlite3_get_autocommit(c->db)) run(c, Q(c, Q_ROLLBACK));
  } else {
    run(c, Q(c, Q_UNDO));
    run(c, Q(c, Q_RELEASE));
  }
  memcpy(c->err, keep, sizeof keep);
  return rc;
}

/* A read snapshot for calls made of several queries (navigate, dump). */
static int read_open(mw_cortex *c, tx *t) {
  t->own = sqlite3_get_autocommit(c->db);
  return t->own ? run(c, Q(c, Q_BEGIN_READ)) : 0;
}

static void read_close(mw_cortex *c, tx *t) {
  if (t->own && !sqlite3_get_autocommit(c->db)) {
    char keep[sizeof c->err];
    memcpy(keep, c->err, sizeof keep);
    run(c, Q(c, Q_COMMIT));
    memcpy(c->err, keep, sizeof keep);
  }
}

int mw_cortex_begin(mw_cortex *c) {
  if (!c || !c->db) return MW_EINVAL;
  if (!sqlite3_get_autocommit(c->db)) return cfail(c, MW_EINVAL, "cortex: transaction already open");
  return run(c, Q(c, Q_BEGIN));
}

int mw_cortex_commit(mw_cortex *c) {
  if (!c || !c->db) return MW_EINVAL;
  if (sqlite3_get_autocommit(c->db)) return cfail(c, MW_EINVAL, "cortex: no transaction open");
  int rc = run(c, Q(c, Q_COMMIT));
  if (rc && !sqlite3_get_autocommit(c->db)) {
    char keep[sizeof c->err];
    memcpy(keep, c->err, sizeof keep);
    run(c, Q(c, Q_ROLLBACK));
    memcpy(c->err, keep, sizeof keep);
  }
  return rc;
}

void mw_cortex_rollback(mw_cortex *c) {
  if (c && c->db && !sqlite3_get_autocommit(c->db)) run(c, Q(c, Q_ROLLBACK));
}

/* ---- open / close ------------------------------------------------------- */

/* The database must hold the Cortex schema (format mark in meta); with
 * create, an empty database receives it.  Runs inside BEGIN IMMEDIATE, which
 * is also the lock probe: a writer holding the file past busy_ms makes the
 * open fail with "cortex is locked" instead of every apply failing later. */
static int setup(mw_cortex *c, int create) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(c->db, "SELECT count(*) FROM sqlite_schema", -1, &st, NULL);
  if (rc) return dbfail(c, rc);
  rc = sqlite3_step(st);
  int64_t tables = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) return dbfail(c, rc);
  if (tables == 0) {
    if (!create) return cfail(c, MW_EUNAVAIL, "cortex is corrupt");
    return exec(c, SCHEMA);
  }
  rc = sqlite3_prepare_v2(c->db, "SELECT v FROM meta WHERE k='format'", -1, &st, NULL);
  if (rc) return (rc & 0xff) == SQLITE_ERROR ? cfail(c, MW_EUNAVAIL, "cortex is corrupt") : dbfail(c, rc);
  rc = sqlite3_step(st);
  int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
           strcmp((const char *)sqlite3_column_text(st, 0), FORMAT) == 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbfail(c, rc);
  return ok ? 0 : cfail(c, MW_EUNAVAIL, "cortex is corrupt");
}

int mw_cortex_open(const char *path, int create, int busy_ms, mw_cortex **out, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!out) return ferr(err, errlen, MW_EINVAL, "cortex: no handle to return");
  *out = NULL;
  if (!path || !*path) return ferr(err, errlen, MW_EINVAL, "cortex: no path");
  mw_cortex *c = calloc(1, sizeof *c);
  if (!c) return ferr(err, errlen, MW_ENOMEM, "out of memory");
  int rc = 0;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno != ENOENT) rc = cfail(c, MW_EUNAVAIL, "cortex file unreadable");
    else if (!create) rc = cfail(c, MW_EUNAVAIL, "cortex file missing");
  } else if (!S_ISREG(sb.st_mode) || access(path, R_OK) != 0) {
    rc = cfail(c, MW_EUNAVAIL, "cortex file unreadable");
  } else if (access(path, W_OK) != 0) {
    rc = cfail(c, MW_EUNAVAIL, "cortex is read-only");
  }
  if (rc) goto done;
  rc = sqlite3_open_v2(path, &c->db,
                       SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc) {
    rc = c->db ? dbfail(c, rc) : cfail(c, MW_ENOMEM, "out of memory");
    goto done;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, busy_ms > 0 ? busy_ms : 0);
  /* The first read of the header: "not a database" shows here. */
  if ((rc = exec(c, "PRAGMA journal_mode=WAL"))) goto done;
  if ((rc = exec(c, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
                   " PRAGMA cache_size=-16384")))
    goto done;
  if ((rc = run(c, Q(c, Q_BEGIN)))) goto done;
  rc = setup(c, create);
  if (!rc) rc = run(c, Q(c, Q_COMMIT));
  if (rc) mw_cortex_rollback(c);

done:
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", c->err[0] ? c->err : mw_strerror(rc));
    mw_cortex_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void mw_cortex_close(mw_cortex *c) {
  if (!c) return;
  drop_statements(c);
  if (c->db) sqlite3_close_v2(c->db);
  mw__buf_free(&c->canon);
  free(c);
}

const char *mw_cortex_errmsg(const mw_cortex *c) { return c ? c->err : "cortex: no handle"; }

int mw_cortex_check(mw_cortex *c) {
  if (!c || !c->db) return MW_EINVAL;
  sqlite3_stmt *st = Q(c, Q_CHECK);
  if (!st) return prepfail(c);
  int rc = sqlite3_step(st);
  int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
           strcmp((const char *)sqlite3_column_text(st, 0), FORMAT) == 0;
  sqlite3_reset(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbfail(c, rc);
  return ok ? 0 : cfail(c, MW_EUNAVAIL, "cortex is corrupt");
}

/* ---- names -------------------------------------------------------------- */

static int valid_name(const char *s, size_t n, size_t max) {
  if (n < 1 || n > max) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '_' || ch == '.' || ch == ':' || ch == '/' || ch == '-'))
      return 0;
  }
  return 1;
}

static int valid_key(const char *s) { return s && valid_name(s, strlen(s), KEY_MAX); }

/* ---- reading fact bodies -------------------------------------------------
 * Bodies are canonicalised first (mw__json_canon), so these walk compact,
 * valid JSON by structure, as jfield.c does. */

static size_t skip_str(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

static size_t skip_val(const char *s, size_t n, size_t i) {
  if (i >= n) return n;
  if (s[i] == '"') return skip_str(s, n, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    for (; i < n; i++) {
      char ch = s[i];
      if (ch == '"') {
        i = skip_str(s, n, i) - 1;
        continue;
      }
      if (ch == '{' || ch == '[') depth++;
      else if ((ch == '}' || ch == ']') && --depth == 0) return i + 1;
    }
    return n;
  }
  while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
  return i;
}

/* Next member of the object s[0..n); *i starts at 0.  k is the raw key text
 * without its quotes. */
static int next_member(const char *s, size_t n, size_t *i, const char **k, size_t *kn, const char **v,
                       size_t *vn) {
  if (*i == 0) {
    if (n < 2 || s[0] != '{') return 0;
    *i = 1;
  }
  if (*i >= n || s[*i] != '"') return 0;
  size_t ke = skip_str(s, n, *i);
  *k = s + *i + 1;
  *kn = ke - *i - 2;
  size_t vs = ke + 1, ve = skip_val(s, n, vs);
  *v = s + vs;
  *vn = ve - vs;
  *i = ve < n && s[ve] == ',' ? ve + 1 : ve;
  return 1;
}

static int next_elem(const char *s, size_t n, size_t *i, const char **v, size_t *vn) {
  if (*i == 0) {
    if (n < 2 || s[0] != '[') return 0;
    *i = 1;
  }
  if (*i >= n || s[*i] == ']') return 0;
  size_t ve = skip_val(s, n, *i);
  *v = s + *i;
  *vn = ve - *i;
  *i = ve < n && s[ve] == ',' ? ve + 1 : ve;
  return 1;
}

static int is(const char *k, size_t kn, const char *name) { return kn == strlen(name) && !memcmp(k, name, kn); }
static int is_obj(const char *v, size_t vn) { return vn >= 2 && v[0] == '{'; }

enum { F_NODE, F_EDGE, F_PROMOTE, F_RETRACT };

typedef struct fact {
  int op;                              /* F_* */
  int edge;                            /* promote/retract: names an edge */
  char key[KEY_MAX + 1];               /* node key, or edge from */
  char rel[KEY_MAX + 1], to[KEY_MAX + 1];
  char kind[KIND_MAX + 1];
  char label[LABEL_MAX + 1];
  size_t label_n;
  const char *props;                   /* canonical object text, in the body */
  size_t props_n;
  double weight;
  int trust;                           /* 1 "fact", 0 "claim" */
} fact;

/* One of the items of an entry, with the error prefix to use ("fact" or
 * "facts[3]"); returns 0 or an MW_ code with err set. */
typedef int (*fact_fn)(void *ud, const fact *f, int item, const char *who);

static int get_key(const char *v, size_t vn, char *out) {
  int n = mw__jstring(v, vn, out, KEY_MAX + 1);
  return n >= 0 && valid_name(out, (size_t)n, KEY_MAX);
}

static int parse_edge_ref(const char *s, size_t n, fact *f, int full, const char *who, char *err,
                          size_t errlen) {
  int have = 0;
  size_t i = 0, kn, vn;
  const char *k, *v;
  f->props = "{}";
  f->props_n = 2;
  f->weight = 1;
  while (next_member(s, n, &i, &k, &kn, &v, &vn)) {
    if (is(k, kn, "from")) {
      if (!get_key(v, vn, f->key)) return ferr(err, errlen, MW_EINVAL, "%s: edge from must be " KEY_RULE, who);
      have |= 1;
    } else if (is(k, kn, "rel")) {
      if (!get_key(v, vn, f->rel))
        return ferr(err, errlen, MW_EINVAL, "%s: edge relation must be " KEY_RULE, who);
      have |= 2;
    } else if (is(k, kn, "to")) {
      if (!get_key(v, vn, f->to)) return ferr(err, errlen, MW_EINVAL, "%s: edge to must be " KEY_RULE, who);
      have |= 4;
    } else if (full && is(k, kn, "weight")) {
      char num[64];
      char *end;
      if (vn == 0 || vn >= sizeof num || !(v[0] == '-' || (v[0] >= '0' && v[0] <= '9')))
        return ferr(err, errlen, MW_EINVAL, "%s: edge weight must be a number", who);
      memcpy(num, v, vn);
      num[vn] = '\0';
      f->weight = strtod(num, &end);
      if (*end || !isfinite(f->weight))
        return ferr(err, errlen, MW_EINVAL, "%s: edge weight must be a number", who);
    } else if (full && is(k, kn, "props")) {
      if (!is_obj(v, vn) || vn > PROPS_MAX)
        return ferr(err, errlen, MW_EINVAL, "%s: props must be a JSON object of at most %d bytes", who,
                    PROPS_MAX);
      f->props = v;
      f->props_n = vn;
    } else {
      return ferr(err, errlen, MW_EINVAL, "%s: unknown edge field \"%.*s\"", who, (int)(kn > 64 ? 64 : kn), k);
    }
  }
  if (!(have & 1)) return ferr(err, errlen, MW_EINVAL, "%s: edge from must be " KEY_RULE, who);
  if (!(have & 2)) return ferr(err, errlen, MW_EINVAL, "%s: edge relation must be " KEY_RULE, who);
  if (!(have & 4)) return ferr(err, errlen, MW_EINVAL, "%s: edge to must be " KEY_RULE, who);
  return 0;
}

static int parse_node(const char *s, size_t n, fact *f, const char *who, char *err, size_t errlen) {
  int have = 0;
  size_t i = 0, kn, vn;
  const char *k, *v;
  f->props = "{}";
  f->props_n = 2;
  while (next_member(s, n, &i, &k, &kn, &v, &vn)) {
    if (is(k, kn, "key")) {
      if (!get_key(v, vn, f->key)) return ferr(err, errlen, MW_EINVAL, "%s: node key must be " KEY_RULE, who);
      have |= 1;
    } else if (is(k, kn, "kind")) {
      int m = mw__jstring(v, vn, f->kind, sizeof f->kind);
      if (m < 0 || !valid_name(f->kind, (size_t)m, KIND_MAX))
        return ferr(err, errlen, MW_EINVAL, "%s: node kind must be 1-64 of A-Z a-z 0-9 _ . : / -", who);
      have |= 2;
    } else if (is(k, kn, "label")) {
      int m = mw__jstring(v, vn, f->label, sizeof f->label);
      if (m < 0)
        return ferr(err, errlen, MW_EINVAL, "%s: node label must be a string of at most %d bytes", who,
                    LABEL_MAX);
      f->label_n = (size_t)m;
      have |= 4;
    } else if (is(k, kn, "props")) {
      if (!is_obj(v, vn) || vn > PROPS_MAX)
        return ferr(err, errlen, MW_EINVAL, "%s: props must be a JSON object of at most %d bytes", who,
                    PROPS_MAX);
      f->props = v;
      f->props_n = vn;
    } else {
      return ferr(err, errlen, MW_EINVAL, "%s: unknown node field \"%.*s\"", who, (int)(kn > 64 ? 64 : kn), k);
    }
  }
  if (!(have & 1)) return ferr(err, errlen, MW_EINVAL, "%s: node key must be " KEY_RULE, who);
  if (!(have & 2)) return ferr(err, errlen, MW_EINVAL, "%s: node kind must be 1-64 of A-Z a-z 0-9 _ . : / -", who);
  if (!(have & 4))
    return ferr(err, errlen, MW_EINVAL, "%s: node label must be a string of at most %d bytes", who, LABEL_MAX);
  return 0;
}

/* {"node": key} or {"edge": {"from", "rel", "to"}} after promote/retract. */
static int parse_target(const char *s, size_t n, fact *f, const char *what, const char *who, char *err,
                        size_t errlen) {
  size_t i = 0, kn, vn;
  const char *k, *v;
  int count = 0, rc = 0;
  while (next_member(s, n, &i, &k, &kn, &v, &vn)) {
    count++;
    if (is(k, kn, "node")) {
      f->edge = 0;
      if (!get_key(v, vn, f->key)) rc = ferr(err, errlen, MW_EINVAL, "%s: node key must be " KEY_RULE, who);
    } else if (is(k, kn, "edge") && is_obj(v, vn)) {
      f->edge = 1;
      rc = parse_edge_ref(v, vn, f, 0, who, err, errlen);
    } else {
      count = 0;
      break;
    }
    if (rc) return rc;
  }
  if (count != 1)
    return ferr(err, errlen, MW_EINVAL, "%s: %s needs {\"node\": key} or {\"edge\": {\"from\", \"rel\", \"to\"}}",
                who, what);
  return 0;
}

static int parse_item(const char *s, size_t n, fact *f, int nested, const char *who, char *err, size_t errlen) {
  size_t i = 0, kn, vn, bn = 0;
  const char *k, *v, *body = NULL;
  int have_trust = 0, kinds = 0;
  memset(f, 0, offsetof(fact, label));
  f->label[0] = '\0';
  f->label_n = 0;
  f->props = NULL;
  f->props_n = 0;
  f->weight = 1;
  f->trust = 0;
  if (!is_obj(s, n)) return ferr(err, errlen, MW_EINVAL, "%s: a fact must be a JSON object", who);
  while (next_member(s, n, &i, &k, &kn, &v, &vn)) {
    if (is(k, kn, "trust")) {
      if (is(v, vn, "\"claim\"")) f->trust = 0;
      else if (is(v, vn, "\"fact\"")) f->trust = 1;
      else return ferr(err, errlen, MW_EINVAL, "%s: trust must be claim or fact", who);
      have_trust = 1;
      continue;
    }
    int op = is(k, kn, "node") ? F_NODE : is(k, kn, "edge") ? F_EDGE : is(k, kn, "promote") ? F_PROMOTE
           : is(k, kn, "retract") ? F_RETRACT : -1;
    if (op < 0) {
      if (is(k, kn, "facts"))
        return ferr(err, errlen, MW_EINVAL, nested ? "%s: facts cannot nest"
                                                   : "%s: facts cannot be combined with other members", who);
      return ferr(err, errlen, MW_EINVAL, "%s: unknown fact kind \"%.*s\"", who, (int)(kn > 64 ? 64 : kn), k);
    }
    if (kinds++) return ferr(err, errlen, MW_EINVAL, "%s: give exactly one of node, edge, promote, retract", who);
    f->op = op;
    body = v;
    bn = vn;
  }
  if (!kinds) return ferr(err, errlen, MW_EINVAL, "%s: give one of node, edge, promote, retract, facts", who);
  if (have_trust && (f->op == F_PROMOTE || f->op == F_RETRACT))
    return ferr(err, errlen, MW_EINVAL, "%s: trust applies to node and edge only", who);
  switch (f->op) {
    case F_NODE:
      if (!is_obj(body, bn)) return ferr(err, errlen, MW_EINVAL, "%s: node must be a JSON object", who);
      return parse_node(body, bn, f, who, err, errlen);
    case F_EDGE:
      if (!is_obj(body, bn)) return ferr(err, errlen, MW_EINVAL, "%s: edge must be a JSON object", who);
      f->edge = 1;
      return parse_edge_ref(body, bn, f, 1, who, err, errlen);
    default:
      return parse_target(body, bn, f, f->op == F_PROMOTE ? "promote" : "retract", who, err, errlen);
  }
}

/* Parses a canonical body and hands each item to fn (NULL: validate only). */
static int parse_body(const char *s, size_t n, fact_fn fn, void *ud, char *err, size_t errlen) {
  const char *list, *k, *v;
  size_t ln, kn, vn, i = 0;
  char who[32];
  int rc;
  fact *f = malloc(sizeof *f);
  if (!f) return ferr(err, errlen, MW_ENOMEM, "out of memory");
  if (!mw__jis_object(s, n)) {
    rc = ferr(err, errlen, MW_EINVAL, "fact: body must be a JSON object");
  } else if (mw__jfield(s, n, "facts", &list, &ln) != 0) {
    rc = parse_item(s, n, f, 0, "fact", err, errlen);
    if (!rc && fn) rc = fn(ud, f, 0, "fact");
  } else {
    rc = 0;
    while (!rc && next_member(s, n, &i, &k, &kn, &v, &vn)) {
      if (is(k, kn, "facts")) continue;
      if (is(k, kn, "trust")) rc = ferr(err, errlen, MW_EINVAL, "fact: trust goes inside each item of facts");
      else if (is(k, kn, "node") || is(k, kn, "edge") || is(k, kn, "promote") || is(k, kn, "retract"))
        rc = ferr(err, errlen, MW_EINVAL, "fact: facts cannot be combined with other members");
      else rc = ferr(err, errlen, MW_EINVAL, "fact: unknown fact kind \"%.*s\"", (int)(kn > 64 ? 64 : kn), k);
    }
    if (!rc && (ln < 3 || list[0] != '['))
      rc = ferr(err, errlen, MW_EINVAL, "fact: facts must be a non-empty array");
    int item = 0;
    i = 0;
    while (!rc && next_elem(list, ln, &i, &v, &vn)) {
      if (item >= FACTS_MAX) {
        rc = ferr(err, errlen, MW_EINVAL, "fact: more than %d facts in one entry", FACTS_MAX);
        break;
      }
      snprintf(who, sizeof who, "facts[%d]", item);
      rc = parse_item(v, vn, f, 1, who, err, errlen);
      if (!rc && fn) rc = fn(ud, f, item, who);
      item++;
    }
  }
  free(f);
  return rc;
}

int mw_cortex_validate(const char *body, size_t len, char *err, size_t errlen) {
  mw_buf b = {0};
  char jerr[160];
  if (err && errlen) err[0] = '\0';
  int rc = mw__json_canon(body ? body : "", body ? len : 0, &b, jerr, sizeof jerr);
  if (rc == MW_ENOMEM) rc = ferr(err, errlen, rc, "out of memory");
  else if (rc) rc = ferr(err, errlen, MW_EJSON, "fact: invalid JSON: %s", jerr);
  else rc = parse_body(b.p, b.len, NULL, NULL, err, errlen);
  mw__buf_free(&b);
  return rc;
}

/* ---- versions ------------------------------------------------------------ */

enum { O_STATED, O_PROMOTED, O_IMPLIED };
static const char *const ORIGIN[] = {"stated", "promoted", "implied"};

static int origin_code(const unsigned char *s) {
  if (s && !strcmp((const char *)s, "promoted")) return O_PROMOTED;
  if (s && !strcmp((const char *)s, "implied")) return O_IMPLIED;
  return O_STATED;
}

/* Does a version take effect, given whether the key is live just before it? */
static int effective(int origin, int retract, int live) {
  if (retract || origin == O_PROMOTED) return live;
  if (origin == O_IMPLIED) return !live;
  return 1;
}

typedef struct vmeta {
  int64_t ts, cursor;
  const char *actor;
  int item;
} vmeta;

/* A version's content: kind, label, props, trust (NULL: SQL NULL) and weight.
 * Owned copies live in `own`; s[3] may point at the literal "fact". */
typedef struct content {
  const char *s[4];
  size_t n[4];
  int has_weight;
  double weight;
  char *own;
} content;

static void content_free(content *ct) {
  free(ct->own);
  memset(ct, 0, sizeof *ct);
}

static int content_set(content *ct, const char *const s[4], const size_t n[4], int has_weight, double weight) {
  size_t total = 0;
  char *own = NULL, *w;
  for (int i = 0; i < 4; i++)
    if (s[i]) total += n[i] + 1;
  if (total && !(own = malloc(total))) return MW_ENOMEM;
  content_free(ct);
  ct->own = w = own;
  for (int i = 0; i < 4; i++) {
    if (!s[i]) continue;
    memcpy(w, s[i], n[i]);
    w[n[i]] = '\0';
    ct->s[i] = w;
    ct->n[i] = n[i];
    w += n[i] + 1;
  }
  ct->has_weight = has_weight;
  ct->weight = weight;
  return 0;
}

/* Copies the content columns col0..col0+4 of the current row. */
static int content_load(content *ct, sqlite3_stmt *st, int col0) {
  const char *s[4];
  size_t n[4];
  for (int i = 0; i < 4; i++) {
    s[i] = NULL;
    n[i] = 0;
    if (sqlite3_column_type(st, col0 + i) == SQLITE_NULL) continue;
    s[i] = (const char *)sqlite3_column_text(st, col0 + i);
    n[i] = (size_t)sqlite3_column_bytes(st, col0 + i);
    if (!s[i]) return MW_ENOMEM;
  }
  int hw = sqlite3_column_type(st, col0 + 4) != SQLITE_NULL;
  return content_set(ct, s, n, hw, hw ? sqlite3_column_double(st, col0 + 4) : 0);
}

static int content_dup(content *dst, const content *src) {
  return content_set(dst, src->s, src->n, src->has_weight, src->weight);
}

static int has_param(sqlite3_stmt *st, int i) { return i <= sqlite3_bind_parameter_count(st); }

static void bind_key(sqlite3_stmt *st, int t, const char *const k[3]) {
  sqlite3_bind_text(st, 1, k[0], -1, SQLITE_STATIC);
  if (t == T_EDGES) {
    sqlite3_bind_text(st, 2, k[1], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, k[2], -1, SQLITE_STATIC);
  }
}

static void bind_meta(sqlite3_stmt *st, const vmeta *m) {
  sqlite3_bind_int64(st, 4, m->ts);
  sqlite3_bind_text(st, 5, m->actor, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 6, m->cursor);
  sqlite3_bind_int(st, 7, m->item);
}

static void bind_content(sqlite3_stmt *st, const content *ct) {
  for (int i = 0; i < 4; i++) {
    if (!has_param(st, 10 + i)) continue;
    if (ct->s[i]) sqlite3_bind_text(st, 10 + i, ct->s[i], (int)ct->n[i], SQLITE_STATIC);
    else sqlite3_bind_null(st, 10 + i);
  }
  if (has_param(st, 14)) {
    if (ct->has_weight) sqlite3_bind_double(st, 14, ct->weight);
    else sqlite3_bind_null(st, 14);
  }
}

/* Runs a statement naming version (k, m) of table t; binds what set binds. */
typedef void (*binder)(sqlite3_stmt *st, const void *ud);

static int on_version(mw_cortex *c, int t, int which, const char *const k[3], const vmeta *m, binder set,
                      const void *ud) {
  sqlite3_stmt *st = VQ(c, t, which);
  if (!st) return prepfail(c);
  bind_key(st, t, k);
  bind_meta(st, m);
  if (set) set(st, ud);
  return run(c, st);
}

typedef struct livevt {
  int live, has_vt;
  int64_t vt;
} livevt;

static void bind_livevt(sqlite3_stmt *st, const void *ud) {
  const livevt *l = ud;
  sqlite3_bind_int(st, 16, l->live);
  if (l->has_vt) sqlite3_bind_int64(st, 17, l->vt);
}

static void bind_content_ud(sqlite3_stmt *st, const void *ud) { bind_content(st, ud); }

static int set_live(mw_cortex *c, int t, const char *const k[3], const vmeta *m, int live, int has_vt, int64_t vt) {
  livevt l = {live, has_vt, vt};
  return on_version(c, t, V_SET_LIVE, k, m, bind_livevt, &l);
}

static int set_content(mw_cortex *c, int t, const char *const k[3], const vmeta *m, const content *ct) {
  return on_version(c, t, V_SET_CONTENT, k, m, bind_content_ud, ct);
}

static int cur_put(mw_cortex *c, int t, const char *const k[3], const vmeta *m) {
  return on_version(c, t, V_CUR_PUT, k, m, NULL, NULL);
}

static int cur_del(mw_cortex *c, int t, const char *const k[3]) {
  sqlite3_stmt *st = VQ(c, t, V_CUR_DEL);
  if (!st) return prepfail(c);
  bind_key(st, t, k);
  return run(c, st);
}

/* Inserts a version row; *added is 0 when it was already there. */
typedef struct newrow {
  int retract, origin, live, has_vt;
  int64_t vt;
  const content *ct;
} newrow;

static void bind_newrow(sqlite3_stmt *st, const void *ud) {
  const newrow *r = ud;
  sqlite3_bind_int(st, 8, r->retract);
  sqlite3_bind_text(st, 9, ORIGIN[r->origin], -1, SQLITE_STATIC);
  bind_content(st, r->ct);
  sqlite3_bind_int(st, 16, r->live);
  if (r->has_vt) sqlite3_bind_int64(st, 17, r->vt);
}

static int insert_row(mw_cortex *c, int t, const char *const k[3], const vmeta *m, const newrow *r, int *added) {
  int rc = on_version(c, t, V_INS, k, m, bind_newrow, r);
  *added = !rc && sqlite3_changes(c->db) > 0;
  return rc;
}

/* The content an implied version has. */
static content implied_content(const char *key) {
  return (content){.s = {"unknown", key, "{}", "claim"}, .n = {7, strlen(key), 2, 5}};
}

/* The last live version of a key (the state after everything stored):
 * *have, its name in *pm (actor copied into actor[]), whether it is a
 * retraction, and its content when want_content. */
static int last_live(mw_cortex *c, int t, const char *const k[3], int *have, vmeta *pm, char *actor,
                     int *retract, content *ct) {
  sqlite3_stmt *st = VQ(c, t, V_PREV);
  if (!st) return prepfail(c);
  bind_key(st, t, k);
  int rc = sqlite3_step(st), lrc = 0;
  *have = rc == SQLITE_ROW;
  if (*have) {
    const char *a = (const char *)sqlite3_column_text(st, 1);
    size_t an = (size_t)sqlite3_column_bytes(st, 1);
    if (!a || an > ACTOR_MAX) lrc = MW_EINTERNAL;
    else memcpy(actor, a, an), actor[an] = '\0';
    *pm = (vmeta){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 2), actor, sqlite3_column_int(st, 3)};
    *retract = sqlite3_column_int(st, 4);
    if (!lrc && ct && !*retract) lrc = content_load(ct, st, 8);
  }
  sqlite3_reset(st);
  if (!*have && rc != SQLITE_DONE) return dbfail(c, rc);
  if (lrc) return lrc == MW_ENOMEM ? cfail(c, lrc, "out of memory") : cfail(c, lrc, "cortex: bad version row");
  return 0;
}

/* Is there a version of k after m? */
static int later(mw_cortex *c, int t, const char *const k[3], const vmeta *m, int *yes) {
  sqlite3_stmt *st = VQ(c, t, V_LATER);
  if (!st) return prepfail(c);
  bind_key(st, t, k);
  bind_meta(st, m);
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  *yes = rc == SQLITE_ROW;
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dbfail(c, rc);
}

typedef struct wrow {
  int64_t ts, cursor, vt, new_vt;
  size_t actor, actorn;                /* in the walk's name buffer */
  const char *actorp;
  int item, retract, origin, live, has_vt, new_live, new_has_vt, event;
  content pc;                          /* stated: its content; promoted: the resolved one */
} wrow;

typedef struct wlist {
  wrow *w;
  size_t n, cap;
  mw_buf names;
} wlist;

static int wrow_cmp(const void *pa, const void *pb) {
  const wrow *a = pa, *b = pb;
  if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  size_t n = a->actorn < b->actorn ? a->actorn : b->actorn;
  int r = memcmp(a->actorp, b->actorp, n);   /* SQLite's BINARY collation */
  if (r) return r;
  if (a->actorn != b->actorn) return a->actorn < b->actorn ? -1 : 1;
  if (a->cursor != b->cursor) return a->cursor < b->cursor ? -1 : 1;
  return (a->item > b->item) - (a->item < b->item);
}

/* Reads stored versions (events=0) or a node's implied events (events=1). */
static int walk_read(mw_cortex *c, int t, const char *const k[3], int events, wlist *l) {
  sqlite3_stmt *st = VQ(c, t, events ? V_EVENTS : V_WALK);
  if (!st) return prepfail(c);
  bind_key(st, t, k);
  int rc = 0, src;
  while ((src = sqlite3_step(st)) == SQLITE_ROW) {
    if (l->n == l->cap) {
      size_t ncap = l->cap ? l->cap * 2 : 16;
      wrow *nw = realloc(l->w, ncap * sizeof *nw);
      if (!nw) {
        rc = MW_ENOMEM;
        break;
      }
      l->w = nw;
      l->cap = ncap;
    }
    wrow *r = &l->w[l->n++];
    memset(r, 0, sizeof *r);
    const char *a = (const char *)sqlite3_column_text(st, 1);
    r->ts = sqlite3_column_int64(st, 0);
    r->actor = l->names.len;
    r->actorn = (size_t)sqlite3_column_bytes(st, 1);
    r->cursor = sqlite3_column_int64(st, 2);
    r->item = sqlite3_column_int(st, 3);
    r->event = events;
    if (!a || mw__buf_add(&l->names, a, r->actorn) || mw__buf_addc(&l->names, '\0')) {
      rc = MW_ENOMEM;
      break;
    }
    if (events) {
      r->origin = O_IMPLIED;
      continue;
    }
    r->retract = sqlite3_column_int(st, 4);
    r->origin = origin_code(sqlite3_column_text(st, 5));
    r->live = sqlite3_column_int(st, 6);
    r->has_vt = sqlite3_column_type(st, 7) != SQLITE_NULL;
    r->vt = sqlite3_column_int64(st, 7);
    if (!r->retract && r->origin == O_STATED && (rc = content_load(&r->pc, st, 8))) break;
  }
  sqlite3_reset(st);
  if (rc) return cfail(c, MW_ENOMEM, "out of memory");
  return src == SQLITE_DONE ? 0 : dbfail(c, src);
}

static int walk_write(mw_cortex *c, int t, const char *const k[3], wlist *l, long last, int live);

/* Recomputes a key's whole chain from its stored versions and (nodes) its
 * implied events, then writes what changed: live flags, valid_to, promoted
 * contents, the implied rows that take effect, the current row. */
static int walk(mw_cortex *c, int t, const char *const k[3]) {
  wlist l = {0};
  int rc = walk_read(c, t, k, 0, &l);
  if (!rc && t == T_NODES) rc = walk_read(c, t, k, 1, &l);
  if (rc) goto done;
  for (size_t i = 0; i < l.n; i++) l.w[i].actorp = l.names.p + l.w[i].actor;
  qsort(l.w, l.n, sizeof *l.w, wrow_cmp);   /* names are unique: a total order */
  const content *state = NULL;
  content imp = implied_content(k[0]);
  long last = -1;
  for (size_t i = 0; i < l.n; i++) {
    wrow *r = &l.w[i];
    r->new_live = effective(r->origin, r->retract, state != NULL);
    if (!r->new_live) continue;
    if (last >= 0) {
      l.w[last].new_has_vt = 1;
      l.w[last].new_vt = r->ts;
    }
    last = (long)i;
    if (r->retract) {
      state = NULL;
    } else if (r->origin == O_PROMOTED) {
      if (content_dup(&r->pc, state)) {
        rc = cfail(c, MW_ENOMEM, "out of memory");
        goto done;
      }
      r->pc.s[3] = "fact";
      r->pc.n[3] = 4;
      state = &r->pc;
    } else {
      state = r->event ? &imp : &r->pc;
    }
  }
  rc = walk_write(c, t, k, &l, last, state != NULL);
done:
  for (size_t i = 0; i < l.n; i++) content_free(&l.w[i].pc);
  free(l.w);
  mw__buf_free(&l.names);
  return rc;
}

static int walk_write(mw_cortex *c, int t, const char *const k[3], wlist *l, long last, int live) {
  int rc = 0;
  content imp = implied_content(k[0]);
  if (t == T_NODES) {
    sqlite3_stmt *st = VQ(c, t, V_DEL_IMPLIED);
    if (!st) return prepfail(c);
    bind_key(st, t, k);
    if ((rc = run(c, st))) return rc;
  }
  for (size_t i = 0; i < l->n && !rc; i++) {
    wrow *r = &l->w[i];
    vmeta m = {r->ts, r->cursor, r->actorp, r->item};
    if (r->event) {
      if (!r->new_live) continue;
      newrow nr = {0, O_IMPLIED, 1, r->new_has_vt, r->new_vt, &imp};
      int added;
      rc = insert_row(c, t, k, &m, &nr, &added);
      continue;
    }
    if (r->new_live != r->live || r->new_has_vt != r->has_vt || (r->new_has_vt && r->new_vt != r->vt))
      rc = set_live(c, t, k, &m, r->new_live, r->new_has_vt, r->new_vt);
    if (!rc && r->origin == O_PROMOTED) {
      if (!r->new_live) content_free(&r->pc);   /* an inert promote holds no content */
      rc = set_content(c, t, k, &m, &r->pc);
    }
  }
  if (rc) return rc;
  if (!live) return cur_del(c, t, k);
  const wrow *r = &l->w[last];
  vmeta m = {r->ts, r->cursor, r->actorp, r->item};
  return cur_put(c, t, k, &m);
}

/* After inserting the stated, promoted or retraction version m: when it is
 * the last of its key (the usual case: facts arrive in order), the state
 * before it is the last live version, and only that one, the new one and the
 * current row change; otherwise the whole chain is walked.  A node
 * retraction always walks: it may wake implied events after it. */
static int chain(mw_cortex *c, int t, const char *const k[3], const vmeta *m, int retract, int origin) {
  int yes, rc;
  if (t == T_NODES && retract) return walk(c, t, k);
  if ((rc = later(c, t, k, m, &yes))) return rc;
  if (yes) return walk(c, t, k);
  /* The new row has live=0, so the last live one is the state before it. */
  int have, prev_retract = 0;
  vmeta pm;
  char pactor[ACTOR_MAX + 1];
  content prev = {0};
  if ((rc = last_live(c, t, k, &have, &pm, pactor, &prev_retract, origin == O_PROMOTED ? &prev : NULL)))
    return rc;
  int live = have && !prev_retract;
  if (effective(origin, retract, live)) {
    if (origin == O_PROMOTED) {
      prev.s[3] = "fact";
      prev.n[3] = 4;
      rc = set_content(c, t, k, m, &prev);
    }
    if (!rc) rc = set_live(c, t, k, m, 1, 0, 0);
    if (!rc && have) rc = set_live(c, t, k, &pm, 1, 1, m->ts);
    if (!rc) rc = retract ? cur_del(c, t, k) : cur_put(c, t, k, m);
  }
  content_free(&prev);
  return rc;
}

/* Inserts one stated, promoted or retraction version and recomputes its
 * chain.  Returns 0 (also when the version was already there: idempotent),
 * 1 when must_be_current and the key has no current row (nothing written),
 * or an MW_ code.  *added tells whether it was new. */
static int version(mw_cortex *c, int t, const char *const k[3], const vmeta *m, int retract, int origin,
                   const content *ct, int must_be_current, int *added) {
  newrow nr = {retract, origin, 0, 0, 0, ct};
  int rc = insert_row(c, t, k, m, &nr, added);
  if (rc || !*added) return rc;
  if (must_be_current) {
    sqlite3_stmt *st = VQ(c, t, V_CUR_HAS);
    if (!st) return prepfail(c);
    bind_key(st, t, k);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE) return 1;
    if (rc != SQLITE_ROW) return dbfail(c, rc);
  }
  return chain(c, t, k, m, retract, origin);
}

/* The implied event of a new stated edge m for one of its nodes: in order
 * (nothing stored after m) it takes effect only if the node is absent, and
 * then it is a row of its own; out of order, the node's chain is walked. */
static int implied(mw_cortex *c, const char *key, const vmeta *m) {
  const char *k[3] = {key, NULL, NULL};
  int yes, have, prev_retract = 0, added;
  vmeta pm;
  char pactor[ACTOR_MAX + 1];
  int rc = later(c, T_NODES, k, m, &yes);
  if (rc) return rc;
  if (yes) return walk(c, T_NODES, k);
  if ((rc = last_live(c, T_NODES, k, &have, &pm, pactor, &prev_retract, NULL))) return rc;
  if (have && !prev_retract) return 0;   /* the node is there: the event is inert */
  content imp = implied_content(key);
  newrow nr = {0, O_IMPLIED, 1, 0, 0, &imp};
  if ((rc = insert_row(c, T_NODES, k, m, &nr, &added))) return rc;
  if (have && (rc = set_live(c, T_NODES, k, &pm, 1, 1, m->ts))) return rc;
  return cur_put(c, T_NODES, k, m);
}

typedef struct actx {
  mw_cortex *c;
  const char *actor;
  int64_t cursor, ts;
} actx;

static int apply_fact(void *ud, const fact *f, int item, const char *who) {
  actx *a = ud;
  mw_cortex *c = a->c;
  vmeta m = {a->ts, a->cursor, a->actor, item};
  const char *k[3] = {f->key, f->rel, f->to};
  const char *trust = f->trust ? "fact" : "claim";
  content ct = {0};
  int rc, added;
  switch (f->op) {
    case F_NODE:
      ct = (content){.s = {f->kind, f->label, f->props, trust},
                     .n = {strlen(f->kind), f->label_n, f->props_n, strlen(trust)}};
      return version(c, T_NODES, k, &m, 0, O_STATED, &ct, 0, &added);
    case F_EDGE:
      ct = (content){.s = {NULL, NULL, f->props, trust}, .n = {0, 0, f->props_n, strlen(trust)},
                     .has_weight = 1, .weight = f->weight};
      if ((rc = version(c, T_EDGES, k, &m, 0, O_STATED, &ct, 0, &added)) || !added) return rc;
      if ((rc = implied(c, f->key, &m))) return rc;
      return strcmp(f->to, f->key) ? implied(c, f->to, &m) : 0;
    default:
      rc = version(c, f->edge ? T_EDGES : T_NODES, k, &m, f->op == F_RETRACT,
                   f->op == F_PROMOTE ? O_PROMOTED : O_STATED, &ct, f->op == F_PROMOTE, &added);
      if (rc != 1) return rc;
      if (f->edge)
        return cfail(c, MW_EINVAL, "%s: promote of a missing edge %s -%s-> %s", who, f->key, f->rel, f->to);
      return cfail(c, MW_EINVAL, "%s: promote of a missing node \"%s\"", who, f->key);
  }
}

int mw_cortex_apply(mw_cortex *c, const char *actor, int64_t cursor, int64_t ts, const char *body, size_t len) {
  if (!c || !c->db) return MW_EINVAL;
  if (!actor || !valid_name(actor, strlen(actor), ACTOR_MAX))
    return cfail(c, MW_EINVAL, "fact: actor must be 1-64 of A-Z a-z 0-9 _ . : / -");
  if (cursor < 0 || ts < 0) return cfail(c, MW_EINVAL, "fact: cursor and ts must not be negative");
  char jerr[160];
  c->canon.len = 0;
  int rc = mw__json_canon(body ? body : "", body ? len : 0, &c->canon, jerr, sizeof jerr);
  if (rc == MW_ENOMEM) return cfail(c, rc, "out of memory");
  if (rc) return cfail(c, MW_EJSON, "fact: invalid JSON: %s", jerr);
  tx t;
  if ((rc = tx_open(c, &t))) return rc;
  actx a = {c, actor, cursor, ts};
  rc = parse_body(c->canon.p, c->canon.len, apply_fact, &a, c->err, sizeof c->err);
  if (!rc) {
    sqlite3_stmt *st = Q(c, Q_NEWEST_SET);
    if (st) sqlite3_bind_int64(st, 1, ts);
    rc = run(c, st);
  }
  return tx_close(c, &t, rc);
}

/* ---- applied cursors, clear --------------------------------------------- */

int mw_cortex_applied(mw_cortex *c, const char *actor, int64_t *cursor) {
  if (!c || !c->db || !cursor) return MW_EINVAL;
  *cursor = 0;
  if (!actor || !valid_name(actor, strlen(actor), ACTOR_MAX))
    return cfail(c, MW_EINVAL, "cortex: invalid actor id");
  sqlite3_stmt *st = Q(c, Q_APPLIED);
  if (!st) return prepfail(c);
  sqlite3_bind_text(st, 1, actor, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *cursor = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dbfail(c, rc);
}

int mw_cortex_set_applied(mw_cortex *c, const char *actor, int64_t cursor) {
  if (!c || !c->db) return MW_EINVAL;
  if (!actor || !valid_name(actor, strlen(actor), ACTOR_MAX))
    return cfail(c, MW_EINVAL, "cortex: invalid actor id");
  if (cursor < 0) return cfail(c, MW_EINVAL, "cortex: cursor must not be negative");
  sqlite3_stmt *st = Q(c, Q_APPLIED_SET);
  if (!st) return prepfail(c);
  sqlite3_bind_text(st, 1, actor, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, cursor);
  return run(c, st);
}

/* Drops and recreates every table: cheaper than deleting row by row, and the
 * FTS index cannot drift from its content table on the way. */
int mw_cortex_clear(mw_cortex *c) {
  if (!c || !c->db) return MW_EINVAL;
  drop_statements(c);   /* none may hold a table being dropped */
  tx t;
  int rc = tx_open(c, &t);
  if (rc) return rc;
  rc = exec(c, DROP);
  if (!rc) rc = exec(c, SCHEMA);
  return tx_close(c, &t, rc);
}

/* ---- JSON output ----------------------------------------------------------
 * Rows are written as canonical objects from a field list already in
 * canonical key order (all names are ASCII, so bytewise order is RFC 8785
 * order).  Field types: 's' text, 'i' integer, 'd' number, 'j' raw
 * canonical JSON (props, stored canonical), '*' the score. */

typedef struct field {
  const char *name;            /* "\"name\":", ready to copy */
  int col;
  char type;
} field;

#define FLD(n, col, type) {"\"" n "\":", col, type}
static const field NODE_F[] = {
  FLD("actor", 7, 's'), FLD("cursor", 8, 'i'), FLD("key", 0, 's'), FLD("kind", 1, 's'), FLD("label", 2, 's'),
  FLD("props", 3, 'j'), FLD("score", -1, '*'), FLD("trust", 4, 's'), FLD("valid_from", 5, 'i'),
  FLD("valid_to", 6, 'i'),
};
static const field EDGE_F[] = {
  FLD("actor", 8, 's'), FLD("cursor", 9, 'i'), FLD("from", 0, 's'), FLD("props", 4, 'j'), FLD("rel", 1, 's'),
  FLD("to", 2, 's'), FLD("trust", 5, 's'), FLD("valid_from", 6, 'i'), FLD("valid_to", 7, 'i'),
  FLD("weight", 3, 'd'),
};
#define NF(a) ((int)(sizeof a / sizeof a[0]))

static int put_int(mw_buf *b, long long x) {
  char tmp[24], *e = tmp + sizeof tmp, *p = e;
  unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
  do *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (x < 0) *--p = '-';
  return mw__buf_add(b, p, (size_t)(e - p));
}

/* Integral values (weights mostly are) take the short road: for |d| < 2^53
 * the canonical form of an integral double is its integer digits. */
static int put_double(mw_buf *b, double d) {
  if (d == 0) return mw__buf_add(b, "0", 1);
  if (fabs(d) < 9007199254740992.0 && d == (double)(long long)d) return put_int(b, (long long)d);
  return mw__json_double(b, d);
}

/* Keys, relations, actors and most labels are printable ASCII with nothing
 * to escape: copied as they are; anything else goes through the encoder. */
static int put_str(mw_buf *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') return mw__json_string(b, s, n);
  }
  if (mw__buf_reserve(b, n + 2)) return MW_ENOMEM;
  char *w = b->p + b->len;
  *w++ = '"';
  memcpy(w, s, n);
  w[n] = '"';
  b->len += n + 2;
  b->p[b->len] = '\0';
  return 0;
}

static int put_row(mw_buf *b, sqlite3_stmt *st, int col0, const field *f, int nf, const double *score) {
  int rc = mw__buf_addc(b, '{');
  for (int i = 0, first = 1; i < nf && !rc; i++) {
    if (f[i].type == '*' && !score) continue;
    if (!first && (rc = mw__buf_addc(b, ','))) break;
    first = 0;
    if ((rc = mw__buf_addstr(b, f[i].name))) break;
    if (f[i].type == '*') {
      rc = put_double(b, *score);
      continue;
    }
    int col = col0 + f[i].col;
    if (sqlite3_column_type(st, col) == SQLITE_NULL) {
      rc = mw__buf_add(b, "null", 4);
      continue;
    }
    switch (f[i].type) {
      case 's': case 'j': {
        const char *s = (const char *)sqlite3_column_text(st, col);
        size_t n = (size_t)sqlite3_column_bytes(st, col);
        rc = !s ? MW_ENOMEM : f[i].type == 's' ? put_str(b, s, n) : mw__buf_add(b, s, n);
        break;
      }
      case 'i': rc = put_int(b, sqlite3_column_int64(st, col)); break;
      default: rc = put_double(b, sqlite3_column_double(st, col));
    }
  }
  if (!rc) rc = mw__buf_addc(b, '}');
  return rc == MW_EJSON ? MW_EINTERNAL : rc;
}

/* ---- navigation ---------------------------------------------------------- */

/* A set of byte strings -> index, open addressing (FNV-1a). */
typedef struct sslot {
  size_t off;
  uint32_t len;
  int32_t val;                 /* -1: empty */
} sslot;

typedef struct sset {
  mw_buf mem;
  sslot *slot;
  size_t cap, n;
} sset;

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static long sset_get(const sset *h, const char *k, size_t n) {
  if (!h->cap) return -1;
  for (size_t i = fnv(k, n) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
    const sslot *s = &h->slot[i];
    if (s->val < 0) return -1;
    if (s->len == n && !memcmp(h->mem.p + s->off, k, n)) return s->val;
  }
}

static int sset_put(sset *h, const char *k, size_t n, long val) {
  if ((h->n + 1) * 2 > h->cap) {
    size_t ncap = h->cap ? h->cap * 2 : 64;
    sslot *ns = malloc(ncap * sizeof *ns);
    if (!ns) return MW_ENOMEM;
    for (size_t i = 0; i < ncap; i++) ns[i].val = -1;
    for (size_t i = 0; i < h->cap; i++) {
      if (h->slot[i].val < 0) continue;
      size_t j = fnv(h->mem.p + h->slot[i].off, h->slot[i].len) & (ncap - 1);
      while (ns[j].val >= 0) j = (j + 1) & (ncap - 1);
      ns[j] = h->slot[i];
    }
    free(h->slot);
    h->slot = ns;
    h->cap = ncap;
  }
  size_t off = h->mem.len;
  if (mw__buf_add(&h->mem, k, n)) return MW_ENOMEM;
  size_t i = fnv(k, n) & (h->cap - 1);
  while (h->slot[i].val >= 0) i = (i + 1) & (h->cap - 1);
  h->slot[i] = (sslot){off, (uint32_t)n, (int32_t)val};
  h->n++;
  return 0;
}

static void sset_free(sset *h) {
  mw__buf_free(&h->mem);
  free(h->slot);
}

typedef struct nnode {
  size_t key, keyn, json, jsonn;     /* offsets into nav.mem */
  int64_t vf;
  double score;
  int scored, dist, hist;
  long parent, pedge;                /* path search: where it was reached from */
} nnode;

typedef struct nedge {
  size_t src, srcn, rel, reln, dst, dstn, json, jsonn;
  int64_t vf;
  int hist;
} nedge;

typedef struct nav {
  mw_cortex *c;
  const char *rels[RELS_MAX];
  int nrels;
  mw_buf mem;                        /* keys and JSON texts */
  nnode *n;
  size_t nn, ncap;
  nedge *e;
  size_t ne, ecap;
  sset nodes, edges;
  size_t *seln, *sele;               /* output order: indexes into n, e */
  size_t nseln, nsele, fixedn, fixede;
} nav;

static void nav_free(nav *v) {
  mw__buf_free(&v->mem);
  free(v->n);
  free(v->e);
  sset_free(&v->nodes);
  sset_free(&v->edges);
  free(v->seln);
  free(v->sele);
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 32;
  while (ncap < need) ncap *= 2;
  void *np = realloc(*p, ncap * size);
  if (!np) return MW_ENOMEM;
  *p = np;
  *cap = ncap;
  return 0;
}

static int keep(nav *v, sqlite3_stmt *st, int col, size_t *off, size_t *n) {
  const char *s = (const char *)sqlite3_column_text(st, col);
  if (!s) return MW_ENOMEM;
  *off = v->mem.len;
  *n = (size_t)sqlite3_column_bytes(st, col);
  return mw__buf_add(&v->mem, s, *n);
}

/* Adds the node of the current row (NODE layout from col0); a current node
 * also enters the visited set. */
static int add_node(nav *v, sqlite3_stmt *st, int col0, int dist, long parent, const double *score, int hist,
                    size_t *idx) {
  int rc = grow((void **)&v->n, &v->ncap, v->nn + 1, sizeof *v->n);
  if (rc) return rc;
  nnode *x = &v->n[v->nn];
  memset(x, 0, sizeof *x);
  if ((rc = keep(v, st, col0, &x->key, &x->keyn))) return rc;
  x->json = v->mem.len;
  if ((rc = put_row(&v->mem, st, col0, NODE_F, NF(NODE_F), score))) return rc;
  x->jsonn = v->mem.len - x->json;
  x->vf = sqlite3_column_int64(st, col0 + 5);
  x->score = score ? *score : 0;
  x->scored = score != NULL;
  x->dist = dist;
  x->hist = hist;
  x->parent = parent;
  x->pedge = -1;
  if (!hist && (rc = sset_put(&v->nodes, v->mem.p + x->key, x->keyn, (long)v->nn))) return rc;
  *idx = v->nn++;
  return 0;
}

/* Adds the edge of the current row (EDGE layout from col0) unless a current
 * one with the same from/rel/to is already there; *idx is it either way. */
static int add_edge(nav *v, sqlite3_stmt *st, int col0, int hist, size_t *idx) {
  char id[3 * KEY_MAX + 3];
  size_t idn = 0;
  if (!hist) {
    for (int i = 0; i < 3; i++) {
      const char *s = (const char *)sqlite3_column_text(st, col0 + i);
      size_t n = (size_t)sqlite3_column_bytes(st, col0 + i);
      if (!s) return MW_ENOMEM;
      if (n > KEY_MAX) n = KEY_MAX;
      memcpy(id + idn, s, n);
      idn += n;
      id[idn++] = '\0';
    }
    long have = sset_get(&v->edges, id, idn);
    if (have >= 0) {
      *idx = (size_t)have;
      return 0;
    }
  }
  int rc = grow((void **)&v->e, &v->ecap, v->ne + 1, sizeof *v->e);
  if (rc) return rc;
  nedge *x = &v->e[v->ne];
  memset(x, 0, sizeof *x);
  if ((rc = keep(v, st, col0, &x->src, &x->srcn)) || (rc = keep(v, st, col0 + 1, &x->rel, &x->reln)) ||
      (rc = keep(v, st, col0 + 2, &x->dst, &x->dstn)))
    return rc;
  x->json = v->mem.len;
  if ((rc = put_row(&v->mem, st, col0, EDGE_F, NF(EDGE_F), NULL))) return rc;
  x->jsonn = v->mem.len - x->json;
  x->vf = sqlite3_column_int64(st, col0 + 6);
  x->hist = hist;
  if (!hist && (rc = sset_put(&v->edges, id, idn, (long)v->ne))) return rc;
  *idx = v->ne++;
  return 0;
}

/* Visits the current edges of node i, out then in, by relation and other
 * end.  A node not yet seen is added while fewer than cap nodes are; an edge
 * is kept when both its ends are in. */
static int expand(nav *v, size_t i, size_t cap) {
  mw_cortex *c = v->c;
  char key[KEY_MAX + 1];
  size_t kn = v->n[i].keyn > KEY_MAX ? KEY_MAX : v->n[i].keyn;
  memcpy(key, v->mem.p + v->n[i].key, kn);
  key[kn] = '\0';
  int dist = v->n[i].dist;
  static const int which[2][2][2] = {   /* [full][in][by relation] */
    {{Q_OUT, Q_OUT_REL}, {Q_IN, Q_IN_REL}}, {{Q_OUT_E, Q_OUT_E_REL}, {Q_IN_E, Q_IN_E_REL}}};
  for (int dir = 0; dir < 2; dir++) {
    for (int r = 0; r < (v->nrels ? v->nrels : 1); r++) {
      int full = v->nn >= cap;
      sqlite3_stmt *st = Q(c, which[full][dir][v->nrels > 0]);
      if (!st) return prepfail(c);
      sqlite3_bind_text(st, 1, key, (int)kn, SQLITE_STATIC);
      if (v->nrels) sqlite3_bind_text(st, 2, v->rels[r], -1, SQLITE_STATIC);
      int rc = 0, src;
      while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *ok = (const char *)sqlite3_column_text(st, EDGE_NCOLS);
        if (!ok) {
          rc = MW_ENOMEM;
          break;
        }
        long j = sset_get(&v->nodes, ok, (size_t)sqlite3_column_bytes(st, EDGE_NCOLS));
        int fresh = j < 0;
        size_t nj, e;
        if (fresh) {
          if (full || v->nn >= cap) continue;
          if ((rc = add_node(v, st, EDGE_NCOLS, dist + 1, (long)i, NULL, 0, &nj))) break;
          j = (long)nj;
        }
        if ((rc = add_edge(v, st, 0, 0, &e))) break;
        if (fresh) v->n[j].pedge = (long)e;
      }
      sqlite3_reset(st);
      if (rc) return outfail(c, rc);
      if (src != SQLITE_DONE) return dbfail(c, src);
    }
  }
  return 0;
}

/* The node `key`, if current, as the first node (dist 0). */
static int add_root(nav *v, const char *key, const double *score, int *found) {
  mw_cortex *c = v->c;
  sqlite3_stmt *st = Q(c, Q_NODE);
  if (!st) return prepfail(c);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  int rc = 0, src = sqlite3_step(st);
  size_t idx;
  *found = src == SQLITE_ROW;
  if (*found) rc = add_node(v, st, 0, 0, -1, score, 0, &idx);
  sqlite3_reset(st);
  if (rc) return outfail(c, rc);
  return src == SQLITE_ROW || src == SQLITE_DONE ? 0 : dbfail(c, src);
}

/* Sizes the output selections for n nodes and e edges. */
static int select_room(nav *v, size_t n, size_t e) {
  size_t *sn = realloc(v->seln, (n + 1) * sizeof *sn);
  if (sn) v->seln = sn;
  size_t *se = sn ? realloc(v->sele, (e + 1) * sizeof *se) : NULL;
  if (se) v->sele = se;
  return sn && se ? 0 : cfail(v->c, MW_ENOMEM, "out of memory");
}

static int select_all(nav *v) {
  int rc = select_room(v, v->nn, v->ne);
  if (rc) return rc;
  for (size_t i = 0; i < v->nn; i++) v->seln[i] = i;
  for (size_t i = 0; i < v->ne; i++) v->sele[i] = i;
  v->nseln = v->nn;
  v->nsele = v->ne;
  return 0;
}

static int nav_around(nav *v, const char *from, int depth, int limit) {
  int found;
  int rc = add_root(v, from, NULL, &found);
  for (size_t h = 0; !rc && found && h < v->nn; h++)
    if (v->n[h].dist < depth) rc = expand(v, h, (size_t)limit);
  return rc ? rc : select_all(v);
}

/* Breadth first over current edges (both directions), so the first path
 * found is a shortest one; it visits at most PATH_VISIT_MAX nodes. */
static int nav_path(nav *v, const char *from, const char *to) {
  int found;
  int rc = add_root(v, from, NULL, &found);
  long hit = found ? sset_get(&v->nodes, to, strlen(to)) : -1;
  for (size_t h = 0; !rc && found && hit < 0 && h < v->nn; h++) {
    rc = expand(v, h, PATH_VISIT_MAX);
    hit = sset_get(&v->nodes, to, strlen(to));
  }
  if (rc || hit < 0) return rc;
  size_t len = 0;
  for (long j = hit; j >= 0; j = v->n[j].parent) len++;
  if ((rc = select_room(v, len, len))) return rc;
  size_t k = len;
  for (long j = hit; j >= 0; j = v->n[j].parent) {
    k--;
    v->seln[k] = (size_t)j;
    if (k > 0) v->sele[k - 1] = (size_t)v->n[j].pedge;
  }
  v->nseln = v->fixedn = len;
  v->nsele = v->fixede = len - 1;
  return 0;
}

/* Plain FTS5 terms from free text: runs of ASCII letters and digits and
 * well-formed UTF-8 sequences, each double-quoted (they hold no quote),
 * OR-joined, at most HINT_TOKENS distinct ones of at most TOKEN_MAX bytes.
 * Nothing of the hint reaches FTS5 as syntax. */
static int utf8_len(const unsigned char *s) {
  unsigned char a = s[0];
  if (a >= 0xC2 && a <= 0xDF) return (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (a >= 0xE0 && a <= 0xEF) {
    unsigned char lo = a == 0xE0 ? 0xA0 : 0x80, hi = a == 0xED ? 0x9F : 0xBF;
    return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
  }
  if (a >= 0xF0 && a <= 0xF4) {
    unsigned char lo = a == 0xF0 ? 0x90 : 0x80, hi = a == 0xF4 ? 0x8F : 0xBF;
    return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
  }
  return 0;
}

static int hint_terms(const char *hint, mw_buf *q, int *ntok) {
  const unsigned char *s = (const unsigned char *)hint;
  char seen[HINT_TOKENS][TOKEN_MAX + 1];
  int nseen = 0;
  *ntok = 0;
  while (*s && nseen < HINT_TOKENS) {
    char tok[TOKEN_MAX + 1];
    size_t tn = 0;
    for (;;) {
      int cl = (*s < 0x80) ? ((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))
                           : utf8_len(s);
      if (!cl) break;
      if (tn + (size_t)cl <= TOKEN_MAX) {
        memcpy(tok + tn, s, (size_t)cl);
        tn += (size_t)cl;
      }
      s += cl;
    }
    if (!tn) {
      s++;
      continue;
    }
    tok[tn] = '\0';
    char low[TOKEN_MAX + 1];
    for (size_t i = 0; i <= tn; i++) low[i] = (tok[i] >= 'A' && tok[i] <= 'Z') ? (char)(tok[i] + 32) : tok[i];
    int dup = 0;
    for (int i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], low);
    if (dup) continue;
    memcpy(seen[nseen++], low, tn + 1);
    if ((*ntok && mw__buf_add(q, " OR ", 4)) || mw__buf_addc(q, '"') || mw__buf_add(q, tok, tn) ||
        mw__buf_addc(q, '"'))
      return MW_ENOMEM;
    (*ntok)++;
  }
  return 0;
}

typedef struct cand {
  size_t off, n;
  const char *key;
  double score;
} cand;

static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  size_t n = x->n < y->n ? x->n : y->n;
  int r = memcmp(x->key, y->key, n);
  return r ? r : (x->n > y->n) - (x->n < y->n);
}

/* Seeds: the FTS matches ranked by bm25 x recency, recency measured from the
 * newest fact in the Cortex (never the wall clock: the same Cortex gives the
 * same ranking); then their 1-hop edges, nodes cut to limit. */
static int nav_hint(nav *v, const char *hint, int limit) {
  mw_cortex *c = v->c;
  mw_buf q = {0}, keys = {0};
  cand *cs = NULL;
  size_t nc = 0, cc = 0;
  int ntok, rc = hint_terms(hint, &q, &ntok), src;
  if (rc) goto oom;
  if (!ntok) goto out;
  int64_t newest = 0;
  sqlite3_stmt *st = Q(c, Q_NEWEST);
  if (!st) {
    rc = prepfail(c);
    goto out;
  }
  src = sqlite3_step(st);
  if (src == SQLITE_ROW) newest = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  if (src != SQLITE_ROW && src != SQLITE_DONE) {
    rc = dbfail(c, src);
    goto out;
  }
  if (!(st = Q(c, Q_FTS))) {
    rc = prepfail(c);
    goto out;
  }
  sqlite3_bind_text(st, 1, q.p, (int)q.len, SQLITE_STATIC);
  while ((src = sqlite3_step(st)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(st, 0);
    size_t kn = (size_t)sqlite3_column_bytes(st, 0);
    double age = (double)(newest - sqlite3_column_int64(st, 2));
    double s = -sqlite3_column_double(st, 1) * exp(-(age > 0 ? age : 0) / RECENCY_MS);
    if (!k || grow((void **)&cs, &cc, nc + 1, sizeof *cs) || mw__buf_add(&keys, k, kn)) {
      rc = MW_ENOMEM;
      break;
    }
    cs[nc++] = (cand){keys.len - kn, kn, NULL, s == 0 ? 0 : s};
  }
  sqlite3_reset(st);
  if (rc) goto oom;
  if (src != SQLITE_DONE) {
    rc = dbfail(c, src);
    goto out;
  }
  for (size_t i = 0; i < nc; i++) cs[i].key = keys.p + cs[i].off;
  if (nc) qsort(cs, nc, sizeof *cs, cand_cmp);
  for (size_t i = 0; i < nc && v->nn < (size_t)limit && !rc; i++) {
    char key[KEY_MAX + 1];
    int found;
    size_t kn = cs[i].n > KEY_MAX ? KEY_MAX : cs[i].n;
    memcpy(key, cs[i].key, kn);
    key[kn] = '\0';
    rc = add_root(v, key, &cs[i].score, &found);
  }
  for (size_t i = 0, seeds = v->nn; i < seeds && !rc; i++) rc = expand(v, i, (size_t)limit);
  if (!rc) rc = select_all(v);
  goto out;
oom:
  rc = cfail(c, MW_ENOMEM, "out of memory");
out:
  mw__buf_free(&q);
  mw__buf_free(&keys);
  free(cs);
  return rc;
}

/* history=1: every selected current node and edge brings its superseded
 * versions (live, not a retraction, closed by a later one), selected after
 * the current ones. */
static int nav_history(nav *v) {
  mw_cortex *c = v->c;
  size_t cn = v->nseln, ce = v->nsele;
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < (t ? ce : cn); i++) {
      char k[3][KEY_MAX + 1];
      const char *kp[3] = {k[0], k[1], k[2]};
      size_t off[3] = {0}, len[3] = {0};
      if (t == T_NODES) {
        off[0] = v->n[v->seln[i]].key, len[0] = v->n[v->seln[i]].keyn;
      } else {
        const nedge *x = &v->e[v->sele[i]];
        off[0] = x->src, len[0] = x->srcn, off[1] = x->rel, len[1] = x->reln, off[2] = x->dst, len[2] = x->dstn;
      }
      for (int j = 0; j < 3; j++) {
        size_t n = len[j] > KEY_MAX ? KEY_MAX : len[j];
        memcpy(k[j], v->mem.p + off[j], n);
        k[j][n] = '\0';
      }
      sqlite3_stmt *st = VQ(c, t, V_HIST);
      if (!st) return prepfail(c);
      bind_key(st, t, kp);
      int rc = 0, src;
      size_t idx;
      while ((src = sqlite3_step(st)) == SQLITE_ROW)
        if ((rc = t ? add_edge(v, st, 0, 1, &idx) : add_node(v, st, 0, 0, -1, NULL, 1, &idx))) break;
      sqlite3_reset(st);
      if (rc) return outfail(c, rc);
      if (src != SQLITE_DONE) return dbfail(c, src);
    }
  }
  int rc = select_room(v, v->nn, v->ne);
  if (rc) return rc;
  for (size_t i = 0; i < v->nn; i++)
    if (v->n[i].hist) v->seln[v->nseln++] = i;
  for (size_t i = 0; i < v->ne; i++)
    if (v->e[i].hist) v->sele[v->nsele++] = i;
  return 0;
}

/* Output order: nodes by score (scored first, higher first), key,
 * valid_from, then their bytes; edges by from, rel, to, valid_from, bytes.
 * All of it is content, so the order is the same for the same graph. */
typedef struct orec {
  const char *a, *b, *c2, *json;
  size_t an, bn, cn, jn;
  int64_t vf;
  double score;
  int scored;
} orec;

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn) {
  int r = memcmp(a, b, an < bn ? an : bn);
  return r ? r : (an > bn) - (an < bn);
}

static int orec_cmp(const void *pa, const void *pb) {
  const orec *x = pa, *y = pb;
  int r;
  if (x->scored != y->scored) return x->scored ? -1 : 1;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  if ((r = bytes_cmp(x->a, x->an, y->a, y->an))) return r;
  if ((r = bytes_cmp(x->b, x->bn, y->b, y->bn))) return r;
  if ((r = bytes_cmp(x->c2, x->cn, y->c2, y->cn))) return r;
  if (x->vf != y->vf) return x->vf < y->vf ? -1 : 1;
  return bytes_cmp(x->json, x->jn, y->json, y->jn);
}

static int emit_list(nav *v, mw_buf *out, int edges) {
  size_t n = edges ? v->nsele : v->nseln, fixed = edges ? v->fixede : v->fixedn;
  orec *o = malloc((n + 1) * sizeof *o);
  if (!o) return MW_ENOMEM;
  const char *m = v->mem.p;
  for (size_t i = 0; i < n; i++) {
    orec *r = &o[i];
    memset(r, 0, sizeof *r);
    if (edges) {
      const nedge *x = &v->e[v->sele[i]];
      *r = (orec){m + x->src, m + x->rel, m + x->dst, m + x->json, x->srcn, x->reln, x->dstn, x->jsonn, x->vf, 0, 0};
    } else {
      const nnode *x = &v->n[v->seln[i]];
      *r = (orec){m + x->key, "", "", m + x->json, x->keyn, 0, 0, x->jsonn, x->vf, x->score, x->scored};
    }
  }
  qsort(o + fixed, n - fixed, sizeof *o, orec_cmp);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    if (i) rc = mw__buf_addc(out, ',');
    if (!rc) rc = mw__buf_add(out, o[i].json, o[i].jn);
  }
  free(o);
  return rc;
}

int mw_cortex_navigate(mw_cortex *c, const mw_nav *o, mw_buf *out) {
  if (!c || !c->db || !o || !out) return MW_EINVAL;
  int depth = o->depth ? o->depth : 1, limit = o->limit ? o->limit : 20;
  if (depth < 1 || depth > 4) return cfail(c, MW_EINVAL, "navigate: depth must be 1-4");
  if (limit < 1 || limit > 500) return cfail(c, MW_EINVAL, "navigate: limit must be 1-500");
  if (o->from && !valid_key(o->from)) return cfail(c, MW_EINVAL, "navigate: from must be " KEY_RULE);
  if (o->to && !valid_key(o->to)) return cfail(c, MW_EINVAL, "navigate: to must be " KEY_RULE);
  if (o->to && !o->from) return cfail(c, MW_EINVAL, "navigate: to needs from");
  if (o->nrels < 0 || o->nrels > RELS_MAX || (o->nrels && !o->rels))
    return cfail(c, MW_EINVAL, "navigate: at most %d relations", RELS_MAX);
  nav v;
  memset(&v, 0, sizeof v);
  v.c = c;
  /* The filter in byte order, without repeats: the walk does not depend on
   * how the caller listed it. */
  for (int i = 0; i < o->nrels; i++) {
    const char *r = o->rels[i];
    if (!valid_key(r)) return cfail(c, MW_EINVAL, "navigate: relation must be " KEY_RULE);
    int j = v.nrels, dup = 0;
    for (int k = 0; k < v.nrels; k++) dup |= !strcmp(v.rels[k], r);
    if (dup) continue;
    while (j > 0 && strcmp(v.rels[j - 1], r) > 0) {
      v.rels[j] = v.rels[j - 1];
      j--;
    }
    v.rels[j] = r;
    v.nrels++;
  }
  size_t mark = out->len;
  tx t;
  int rc = read_open(c, &t);
  if (rc) return rc;
  if (o->from && o->to) rc = nav_path(&v, o->from, o->to);
  else if (o->from) rc = nav_around(&v, o->from, depth, limit);
  else if (o->hint) rc = nav_hint(&v, o->hint, limit);
  if (!rc && o->history) rc = nav_history(&v);
  read_close(c, &t);
  if (!rc) {
    rc = mw__buf_addstr(out, "{\"edges\":[");
    if (!rc) rc = emit_list(&v, out, 1);
    if (!rc) rc = mw__buf_addstr(out, "],\"nodes\":[");
    if (!rc) rc = emit_list(&v, out, 0);
    if (!rc) rc = mw__buf_addstr(out, "]}");
    if (rc) rc = cfail(c, MW_ENOMEM, "out of memory");
  }
  if (rc) {
    out->len = mark;
    if (out->p) out->p[mark] = '\0';
  }
  nav_free(&v);
  return rc;
}

/* ---- dump ------------------------------------------------------------------ */

static const field NV_F[] = {
  FLD("actor", 0, 's'), FLD("cursor", 1, 'i'), FLD("item", 2, 'i'), FLD("key", 3, 's'), FLD("kind", 4, 's'),
  FLD("label", 5, 's'), FLD("live", 6, 'i'), FLD("origin", 7, 's'), FLD("props", 8, 'j'),
  FLD("retract", 9, 'i'), FLD("trust", 10, 's'), FLD("valid_from", 11, 'i'), FLD("valid_to", 12, 'i'),
};
static const field EV_F[] = {
  FLD("actor", 0, 's'), FLD("cursor", 1, 'i'), FLD("from", 2, 's'), FLD("item", 3, 'i'), FLD("live", 4, 'i'),
  FLD("origin", 5, 's'), FLD("props", 6, 'j'), FLD("rel", 7, 's'), FLD("retract", 8, 'i'), FLD("to", 9, 's'),
  FLD("trust", 10, 's'), FLD("valid_from", 11, 'i'), FLD("valid_to", 12, 'i'), FLD("weight", 13, 'd'),
};

static int dump_query(mw_cortex *c, mw_buf *out, const char *sql, const field *f, int nf) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL), src;
  if (rc) return dbfail(c, rc);
  rc = mw__buf_addc(out, '[');
  for (int first = 1; !rc && (src = sqlite3_step(st)) == SQLITE_ROW; first = 0) {
    if (!first) rc = mw__buf_addc(out, ',');
    if (!rc) rc = put_row(out, st, 0, f, nf, NULL);
  }
  if (!rc) rc = mw__buf_addc(out, ']');
  sqlite3_finalize(st);
  if (rc) return cfail(c, rc == MW_ENOMEM ? rc : MW_EINTERNAL, "cortex: dump failed");
  return src == SQLITE_DONE ? 0 : dbfail(c, src);
}

/* {"current":{"edges","nodes"},"versions":{"edges","nodes"}}: every column
 * that is content, in content order -- no rowids, which depend on the order
 * facts arrived in. */
int mw_cortex_dump(mw_cortex *c, mw_buf *out) {
  if (!c || !c->db || !out) return MW_EINVAL;
  size_t mark = out->len;
  tx t;
  int rc = read_open(c, &t);
  if (rc) return rc;
  rc = mw__buf_addstr(out, "{\"current\":{\"edges\":") ? MW_ENOMEM : 0;
  if (!rc) rc = dump_query(c, out, "SELECT " EDGE_COLS("") " FROM edges_current ORDER BY src, rel, dst",
                           EDGE_F, NF(EDGE_F));
  if (!rc) rc = mw__buf_addstr(out, ",\"nodes\":") ? MW_ENOMEM : 0;
  if (!rc) rc = dump_query(c, out, "SELECT " NODE_COLS("") " FROM nodes_current ORDER BY key", NODE_F,
                           NF(NODE_F));
  if (!rc) rc = mw__buf_addstr(out, "},\"versions\":{\"edges\":") ? MW_ENOMEM : 0;
  if (!rc)
    rc = dump_query(c, out, "SELECT actor, cursor, src, item, live, origin, props, rel, retract, dst, trust,"
                            " valid_from, valid_to, weight FROM edge_versions ORDER BY src, rel, dst, " VORDER,
                    EV_F, NF(EV_F));
  if (!rc) rc = mw__buf_addstr(out, ",\"nodes\":") ? MW_ENOMEM : 0;
  if (!rc)
    rc = dump_query(c, out, "SELECT actor, cursor, item, key, kind, label, live, origin, props, retract, trust,"
                            " valid_from, valid_to FROM node_versions ORDER BY key, " VORDER,
                    NV_F, NF(NV_F));
  if (!rc) rc = mw__buf_addstr(out, "}}") ? MW_ENOMEM : 0;
  if (rc == MW_ENOMEM) cfail(c, rc, "out of memory");
  read_close(c, &t);
  if (rc) {
    out->len = mark;
    if (out->p) out->p[mark] = '\0';
  }
  return rc;
}
