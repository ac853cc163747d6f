/* corpus.c -- the sweep's record (see corpus.h). */
#include "corpus.h"
#include "store_int.h"

#include <string.h>

static int ensure(mw_store *s) {
  int rc = sqlite3_exec(mw__store_db(s),
                        "CREATE TABLE IF NOT EXISTS sweeps(stream INTEGER PRIMARY KEY, cursor INTEGER NOT NULL,"
                        " corpus TEXT NOT NULL, fold TEXT NOT NULL)", NULL, NULL, NULL);
  return rc ? mw__store_dbfail(s, rc) : 0;
}

int mw__corpus_get(mw_store *s, int64_t stream, const char *fp, int64_t *cursor, mw_buf *out) {
  sqlite3_stmt *st;
  *cursor = 0;
  out->len = 0;
  int rc = sqlite3_prepare_v2(mw__store_db(s), "SELECT cursor, corpus, fold FROM sweeps WHERE stream=?1", -1, &st, NULL);
  if (rc == SQLITE_ERROR) return 0;   /* no table yet: nothing swept */
  if (rc) return mw__store_dbfail(s, rc);
  sqlite3_bind_int64(st, 1, stream);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 2), fp) == 0) {
    *cursor = sqlite3_column_int64(st, 0);
    rc = mw__buf_add(out, sqlite3_column_text(st, 1), (size_t)sqlite3_column_bytes(st, 1));
  } else {
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  }
  sqlite3_finalize(st);
  return rc;
}

int mw__corpus_put(mw_store *s, int64_t stream, const char *fp, int64_t cursor, const char *corpus, size_t len) {
  int rc = ensure(s);
  if (rc) return rc;
  sqlite3_stmt *st;
  rc = sqlite3_prepare_v2(mw__store_db(s),
                          "INSERT INTO sweeps(stream, cursor, corpus, fold) VALUES(?1,?2,?3,?4)"
                          " ON CONFLICT(stream) DO UPDATE SET cursor=?2, corpus=?3, fold=?4", -1, &st, NULL);
  if (rc) return mw__store_dbfail(s, rc);
  sqlite3_bind_int64(st, 1, stream);
  sqlite3_bind_int64(st, 2, cursor);
  sqlite3_bind_text(st, 3, corpus, (int)len, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, fp, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  sqlite3_finalize(st);
  return rc;
}
