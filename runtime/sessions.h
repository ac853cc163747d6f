/* sessions.h -- durable session records, kept beside the log (never in it):
 * a session survives a restart of the host.  Storage layer: SQLite only. */
#ifndef MW_SESSIONS_H
#define MW_SESSIONS_H
#include <stdint.h>
#include "mw.h"

typedef struct mw_session_rec {
  char id[48];
  char tenant[65], actor[65];
  char profile[16], trigger[16];
  unsigned char wake_token[32];   /* SHA-256 of the internal wake token */
  int64_t opened_at, last_seen, closed_at;   /* ms; closed_at 0 while open */
  char close_reason[16];
  char prior[48];                 /* the session before it, "" if none */
  int64_t committed;              /* entries this session committed */
  const char *context_hint;       /* may be NULL */
  const char *navigated;          /* JSON of what Waking navigated, may be NULL */
} mw_session_rec;

int mw__session_insert(mw_store *s, const mw_session_rec *r);
int mw__session_touch(mw_store *s, const char *id, int64_t last_seen, int64_t committed);
int mw__session_close(mw_store *s, const char *id, int64_t at, const char *reason);
/* The most recent session of (tenant, actor) that is closed; "" if none. */
int mw__session_prior(mw_store *s, const char *tenant, const char *actor, char prior[48]);
/* Calls cb for every open session (context_hint and navigated valid during the call). */
int mw__session_each_open(mw_store *s, int (*cb)(void *ud, const mw_session_rec *r), void *ud);
/* 1 when the session exists in this tenant and is closed (slept or expired). */
int mw__session_closed(mw_store *s, const char *id, const char *tenant);
#endif
