/* corpus.c -- the sweep's record (see corpus.h). */
#include "corpus.h"
#include "store_int.h"

#include <string.h>

static int ensure(mw_store *s) {
  static const char sql[] = "CREATE TABLE IF NOT EXISTS sweeps(stream INTEGER PRIMARY KEY,"
                            " cursor INTEGER NOT NULL, corpus TEXT NOT NULL, fold TEXT NOT NULL)";
  if (sqlite3_table_column_metadata(mw__store_db(s), NULL, "sweeps", "cursor", NULL, NULL, NULL, NULL, NULL) ==
      SQLITE_OK)
    return 0;
  int rc = sqlite3_exec(mw__store_db(s), sql, NULL, NULL, NULL);
  return rc ? mw__store_dbfail(s, rc) : 0;
}

int mw__corpus_get(mw_store *s, int64_t stream, const char *fp, int64_t *cursor, mw_buf *out) {
  static const char sql[] = "SELECT cursor, corpus, fold FROM sweeps WHERE stream=?1";
  *cursor = 0;
  out->len = 0;
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return 0;   /* no table yet: nothing swept */
  int rc;
  sqlite3_bind_int64(st, 1, stream);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 2), fp) == 0) {
    *cursor = sqlite3_column_int64(st, 0);
    rc = mw__buf_add(out, sqlite3_column_text(st, 1), (size_t)sqlite3_column_bytes(st, 1));
  } else {
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  }
  mw__store_done(s, st);
  return rc;
}

int mw__corpus_put(mw_store *s, int64_t stream, const char *fp, int64_t cursor, const char *corpus, size_t len) {
  int rc = ensure(s);
  if (rc) return rc;
  static const char sql[] = "INSERT INTO sweeps(stream, cursor, corpus, fold) VALUES(?1,?2,?3,?4)"
                            " ON CONFLICT(stream) DO UPDATE SET cursor=?2, corpus=?3, fold=?4";
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return mw__store_dbfail(s, sqlite3_errcode(mw__store_db(s)));
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, cursor);
  sqlite3_bind_text(st, 3, corpus, (int)len, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, fp, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

/* ---- consolidation: how far an actor has taken in each source ------------------- */

int mw__consolidation_get(mw_store *s, const char *tenant, const char *actor, const char *source, mw_buf *out) {
  static const char sql[] = "SELECT horizon FROM consolidation WHERE tenant=?1 AND actor=?2 AND source=?3";
  out->len = 0;
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return 0;   /* no table yet: nothing consolidated */
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, source, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) rc = mw__buf_add(out, sqlite3_column_text(st, 0), (size_t)sqlite3_column_bytes(st, 0));
  else rc = rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

int mw__consolidation_put(mw_store *s, const char *tenant, const char *actor, const char *source,
                          const char *horizon, size_t len, int64_t at) {
  static const char sql[] = "INSERT INTO consolidation(tenant, actor, source, horizon, at) VALUES(?1,?2,?3,?4,?5)"
                            " ON CONFLICT(tenant, actor, source) DO UPDATE SET horizon=?4, at=?5";
  sqlite3_stmt *st = mw__store_stmt(s, sql);
  if (!st) return mw__store_dbfail(s, sqlite3_errcode(mw__store_db(s)));
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, source, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, horizon, (int)len, SQLITE_STATIC);
  sqlite3_bind_int64(st, 5, at);
  int rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}
