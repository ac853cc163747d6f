/* sessions.c -- durable session records in the home database.  Every write
 * is one statement, run inside the caller's transaction (the engine's group
 * commit) or on its own. */
#include "sessions.h"
#include "store_int.h"

#include <stdio.h>
#include <string.h>

static int step_done(mw_store *s, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  rc = rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

/* sql must be a static text: statements are cached by its address. */
static int prep(mw_store *s, const char *sql, sqlite3_stmt **st) {
  *st = mw__store_stmt(s, sql);
  return *st ? 0 : mw__store_dbfail(s, sqlite3_errcode(mw__store_db(s)));
}

int mw__session_insert(mw_store *s, const mw_session_rec *r) {
  sqlite3_stmt *st;
  int rc = prep(s, "INSERT INTO sessions(id, tenant, actor, profile, trigger, wake_token, opened_at,"
                   " last_seen, prior, committed, context_hint, navigated)"
                   " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)", &st);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, r->tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, r->actor, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, r->profile, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, r->trigger, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 6, r->wake_token, 32, SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, r->opened_at);
  sqlite3_bind_int64(st, 8, r->last_seen);
  if (r->prior[0]) sqlite3_bind_text(st, 9, r->prior, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 10, r->committed);
  if (r->context_hint) sqlite3_bind_text(st, 11, r->context_hint, -1, SQLITE_STATIC);
  if (r->navigated) sqlite3_bind_text(st, 12, r->navigated, -1, SQLITE_STATIC);
  return step_done(s, st);
}

int mw__session_touch(mw_store *s, const char *id, int64_t last_seen, int64_t committed) {
  sqlite3_stmt *st;
  int rc = prep(s, "UPDATE sessions SET last_seen=?2, committed=?3 WHERE id=?1", &st);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, last_seen);
  sqlite3_bind_int64(st, 3, committed);
  return step_done(s, st);
}

int mw__session_close(mw_store *s, const char *id, int64_t at, const char *reason) {
  sqlite3_stmt *st;
  int rc = prep(s, "UPDATE sessions SET closed_at=?2, close_reason=?3, last_seen=?2"
                   " WHERE id=?1 AND closed_at IS NULL", &st);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, at);
  sqlite3_bind_text(st, 3, reason, -1, SQLITE_STATIC);
  return step_done(s, st);
}

int mw__session_prior(mw_store *s, const char *tenant, const char *actor, char prior[48]) {
  sqlite3_stmt *st;
  prior[0] = '\0';
  int rc = prep(s, "SELECT id FROM sessions WHERE tenant=?1 AND actor=?2 AND closed_at IS NOT NULL"
                   " ORDER BY closed_at DESC, rowid DESC LIMIT 1", &st);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, actor, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) snprintf(prior, 48, "%s", (const char *)sqlite3_column_text(st, 0));
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

static const char OPEN_SQL[] = "SELECT id, tenant, actor, profile, trigger, wake_token, opened_at, last_seen,"
                               " closed_at, close_reason, prior, committed, context_hint, navigated FROM sessions"
                               " WHERE closed_at IS NULL ORDER BY opened_at";

static void row(sqlite3_stmt *st, mw_session_rec *r) {
  memset(r, 0, sizeof *r);
#define TXT(i) (sqlite3_column_text(st, i) ? (const char *)sqlite3_column_text(st, i) : "")
  snprintf(r->id, sizeof r->id, "%s", TXT(0));
  snprintf(r->tenant, sizeof r->tenant, "%s", TXT(1));
  snprintf(r->actor, sizeof r->actor, "%s", TXT(2));
  snprintf(r->profile, sizeof r->profile, "%s", TXT(3));
  snprintf(r->trigger, sizeof r->trigger, "%s", TXT(4));
  if (sqlite3_column_bytes(st, 5) == 32) memcpy(r->wake_token, sqlite3_column_blob(st, 5), 32);
  r->opened_at = sqlite3_column_int64(st, 6);
  r->last_seen = sqlite3_column_int64(st, 7);
  r->closed_at = sqlite3_column_int64(st, 8);
  snprintf(r->close_reason, sizeof r->close_reason, "%s", TXT(9));
  snprintf(r->prior, sizeof r->prior, "%s", TXT(10));
  r->committed = sqlite3_column_int64(st, 11);
  r->context_hint = (const char *)sqlite3_column_text(st, 12);
  r->navigated = (const char *)sqlite3_column_text(st, 13);
#undef TXT
}

int mw__session_each_open(mw_store *s, int (*cb)(void *ud, const mw_session_rec *r), void *ud) {
  sqlite3_stmt *st;
  int rc = prep(s, OPEN_SQL, &st);
  if (rc) return rc;
  mw_session_rec r;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    row(st, &r);
    if (cb(ud, &r)) break;
  }
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : mw__store_dbfail(s, rc);
  mw__store_done(s, st);
  return rc;
}

int mw__session_closed(mw_store *s, const char *id, const char *tenant) {
  sqlite3_stmt *st;
  if (prep(s, "SELECT closed_at IS NOT NULL FROM sessions WHERE id=?1 AND tenant=?2", &st)) return 0;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, tenant, -1, SQLITE_STATIC);
  int closed = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
  mw__store_done(s, st);
  return closed;
}
