/*
 * mw.h -- the public C API of MW: the store (hash-chained log, snapshots,
 * tokens) and, above it, the lifecycle engine (wake -> run -> sleep).
 * An embedder links these and never touches HTTP; the host's HTTP layer calls
 * exactly the same functions.  Lifetimes are described in docs/c-api.md.
 */
#ifndef MW_H
#define MW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Status codes, one list (the shape of libuv's UV_ERRNO_MAP).  Every failure
 * in MW is one of these, negative; the HTTP status and the contract's error
 * code come from the same row.
 *   XX(NAME, value, http status, contract code, message)
 */
#define MW_ERRNO_MAP(XX)                                                      \
  XX(EINVAL,     -1, 400, "bad_request",       "invalid argument")            \
  XX(EJSON,      -2, 400, "bad_request",       "invalid JSON")                \
  XX(ETENANT,    -3, 400, "tenant_in_payload", "tenant comes from the token") \
  XX(EAUTH,      -4, 401, "unauthorized",      "unknown or revoked token")    \
  XX(EFORBID,    -5, 403, "forbidden",         "operator token required")     \
  XX(ESESSION,   -6, 404, "unknown_session",   "no such session")             \
  XX(ENOENT,     -7, 404, "not_found",         "not found")                   \
  XX(EAWAKE,     -8, 409, "already_awake",     "actor has an open session")   \
  XX(ECLOSED,    -9, 409, "session_closed",    "session is closed")           \
  XX(ECORRUPT,  -10, 409, "snapshot_corrupt",  "snapshot fails verification") \
  XX(ECONFLICT, -11, 409, "conflict",          "expected cursor mismatch")    \
  XX(ETOOBIG,   -12, 413, "payload_too_large", "payload too large")           \
  XX(ESKILL,    -13, 422, "skill_error",       "skill raised an error")       \
  XX(EQUOTA,    -14, 429, "quota_exceeded",    "quota exceeded")              \
  XX(ETIMEOUT,  -15, 503, "skill_timeout",     "skill ran past its budget")   \
  XX(EUNAVAIL,  -16, 503, "unavailable",       "store cannot write durably")  \
  XX(EFOLD,     -17, 500, "internal",          "fold failed")                 \
  XX(ENOTHOME,  -18, 500, "internal",          "not an MW home")              \
  XX(EBROKEN,   -19, 500, "internal",          "log chain is broken")         \
  XX(ENOMEM,    -20, 500, "internal",          "out of memory")               \
  XX(EINTERNAL, -21, 500, "internal",          "internal error")

typedef enum {
  MW_OK = 0,
#define XX(name, val, http, code, msg) MW_##name = (val),
  MW_ERRNO_MAP(XX)
#undef XX
  MW_ERRNO_MAX = -22
} mw_errno_t;

const char *mw_err_name(int err);    /* "EJSON" */
const char *mw_err_code(int err);    /* "bad_request" (the contract's code) */
const char *mw_strerror(int err);    /* "invalid JSON" */
int mw_err_http(int err);            /* 400 */

/* ---- Store: the home, its log streams and snapshots --------------------- */

typedef struct mw_store mw_store;    /* one open home database */

/* A growable byte buffer: functions that produce bytes append to one.  Start
 * it zeroed; free it with mw_buf_free. */
typedef struct mw_buf {
  char *p;
  size_t len, cap;
} mw_buf;
void mw_buf_free(mw_buf *b);

typedef struct mw_entry {
  int64_t cursor;                    /* 1-based */
  int64_t ts;                        /* ms since the epoch */
  const char *kind;
  const char *body;                  /* canonical JSON */
  size_t body_len;
  unsigned char prev[32];
  unsigned char hash[32];
} mw_entry;

typedef struct mw_snapshot {
  char id[40];                       /* "s_" + hex */
  int64_t cursor;
  char *state;                       /* canonical JSON, owned */
  size_t state_len;
  unsigned char state_hash[32];
  unsigned char entry_hash[32];      /* hash of the log entry at cursor */
  char fold[65];                     /* fold fingerprint, hex */
  int64_t created_at;
  int safe;
  int is_head;                       /* a head (made by sleep) or a checkpoint */
} mw_snapshot;


#define MW_STORE_CREATE   1   /* create the home if it does not exist */
#define MW_STORE_READONLY 2   /* open for reading only */

/* Open the home's database (HOME/mw.db).  err receives a message on failure:
 * MW_ENOTHOME when HOME is not an MW home, MW_EUNAVAIL when it cannot be
 * opened for writing.  Close with mw_store_close (NULL is fine).  A store is
 * used by one thread at a time. */
int mw_store_open(const char *home, int flags, mw_store **out, char *err, size_t errlen);
void mw_store_close(mw_store *s);
const char *mw_store_errmsg(const mw_store *s);   /* message of the last failure */
const char *mw_store_home(const mw_store *s);
int mw_store_keyed(const mw_store *s);            /* 1 when the chain is an HMAC chain */

/* Explicit transactions (group commit): inside one, every write call below
 * is its own SAVEPOINT, so a failing call leaves the others intact. */
int mw_store_begin(mw_store *s);
int mw_store_commit(mw_store *s);     /* MW_EUNAVAIL when COMMIT (or its fsync) fails */
void mw_store_rollback(mw_store *s);
/* After a failed commit: overwrite the refused transaction's WAL frames so a
 * restart cannot recover them (see store.c). */
void mw_store_scrub(mw_store *s);

/* Group commit plumbing: a per-job SAVEPOINT inside the open transaction,
 * released (ok) or rolled back; and how long a write waits for a lock. */
int mw_store_savepoint(mw_store *s);
int mw_store_release(mw_store *s, int ok);
int mw_store_in_tx(mw_store *s);
void mw_store_busy_timeout(mw_store *s, int ms);

/* 1-64 bytes of A-Z a-z 0-9 _ . -, and not "." or "..". */
int mw_valid_id(const char *s);

/* A stream is the log of one (tenant, actor).  MW_ENOENT when it does not
 * exist and create is 0. */
int mw_store_stream(mw_store *s, const char *tenant, const char *actor, int create, int64_t *id);
int mw_store_tenant(mw_store *s, const char *tenant, int create);   /* 0, MW_ENOENT */
/* Every stream of a tenant, by actor id; cb returns non-zero to stop. */
typedef int (*mw_stream_cb)(void *ud, int64_t stream, const char *actor, int64_t last_cursor);
int mw_store_streams(mw_store *s, const char *tenant, mw_stream_cb cb, void *ud);
/* For quotas: how many actors a tenant has, and the bytes of its log bodies. */
int64_t mw_store_count_streams(mw_store *s, const char *tenant);
int64_t mw_store_log_bytes(mw_store *s, const char *tenant);

typedef struct mw_append {
  const char *kind;                  /* an id (mw_valid_id) */
  const char *body;                  /* any JSON text; stored canonical */
  size_t body_len;
  int canonical;                     /* 1: the caller made body canonical itself (skips a pass) */
} mw_append;

#define MW_ANY (-1)                  /* expect: append wherever the head is */

/* Append n entries atomically.  expect is the cursor the caller believes is
 * the stream's last (0 for an empty stream), or MW_ANY; a mismatch writes
 * nothing and returns MW_ECONFLICT.  *last receives the new last cursor. */
int mw_log_append(mw_store *s, int64_t stream, const mw_append *items, size_t n,
                  int64_t expect, int64_t *last);

typedef int (*mw_entry_cb)(void *ud, const mw_entry *e);   /* non-zero stops */
int mw_log_read(mw_store *s, int64_t stream, int64_t from, int64_t limit,
                mw_entry_cb cb, void *ud);
int mw_log_head(mw_store *s, int64_t stream, int64_t *cursor, unsigned char hash[32]);
int mw_log_entry_hash(mw_store *s, int64_t stream, int64_t cursor, unsigned char hash[32]);
/* 0 when the whole chain holds; MW_EBROKEN with *bad the first bad cursor. */
int mw_log_verify(mw_store *s, int64_t stream, int64_t *bad);

/* Snapshots.  put fills id, hashes and created_at; is_head also moves the
 * stream's head to it and prunes old snapshots, in one transaction. */
int mw_snapshot_put(mw_store *s, int64_t stream, mw_snapshot *snap);
int mw_snapshot_get(mw_store *s, int64_t stream, const char *id, mw_snapshot *out);
void mw_snapshot_free(mw_snapshot *snap);
int mw_snapshot_verify(mw_store *s, int64_t stream, const mw_snapshot *snap);  /* 0 or MW_ECORRUPT */
int mw_snapshot_mark_unsafe(mw_store *s, const char *id);
int mw_snapshot_head(mw_store *s, int64_t stream, char id[40]);  /* "" when none */
typedef int (*mw_snapshot_cb)(void *ud, const mw_snapshot *snap);  /* state not loaded */
/* Newest first (by cursor, then creation). */
int mw_snapshot_list(mw_store *s, int64_t stream, mw_snapshot_cb cb, void *ud);

/* The newest safe snapshot's cursor made by `fold`, or -1. */
int mw_snapshot_newest(mw_store *s, int64_t stream, const char *fold, int64_t *cursor);

/* Retention: heads kept besides the current one, and checkpoints kept. */
void mw_store_retention(mw_store *s, int heads, int checkpoints);

/* Tokens: 256 random bits, printed once, stored as SHA-256 only. */
int mw_token_create(mw_store *s, const char *tenant, const char *role, char token[68]);
int mw_token_revoke(mw_store *s, const char *token);     /* MW_ENOENT when unknown */
int mw_token_lookup(mw_store *s, const char *token, char tenant[65], char role[16]);  /* MW_EAUTH */

/* ---- Fold, replay and hydrate ------------------------------------------- */

/* A fold is a Lua script (scripts/fold.lua by default) returning either a
 * function `fold(state, entry) -> state` or a table {fold = f, initial = f}.
 * It runs in its own Lua state with no clock, no randomness and no I/O, with
 * pairs/next visiting keys in sorted order and a deterministic instruction
 * budget per entry, so a replay gives the same bytes in any process. */
typedef struct mw_fold mw_fold;

typedef struct mw_fold_opts {
  int64_t budget;          /* instructions per entry; 0 = default (10M) */
  size_t mem_limit;        /* bytes for the fold's Lua state; 0 = 256 MiB */
} mw_fold_opts;

int mw_fold_open(const char *path, const mw_fold_opts *opts, mw_fold **out, char *err, size_t errlen);
/* The same from a source text (name is used in error messages). */
int mw_fold_open_source(const char *name, const char *src, size_t len, const mw_fold_opts *opts,
                        mw_fold **out, char *err, size_t errlen);
void mw_fold_close(mw_fold *f);
const char *mw_fold_fingerprint(const mw_fold *f);   /* hex SHA-256 of the source */

/* Fold entries from+1 .. to of a stream on top of `state` (canonical JSON at
 * cursor `from`; NULL means the fold's initial state at cursor 0) and write
 * the canonical result into out (out->len is reset first).  If ckpt_at is in
 * (from, to], a checkpoint snapshot is saved at that cursor on the way (best
 * effort: a failure to save it is not an error). */
int mw_fold_replay(mw_fold *f, mw_store *s, int64_t stream, const char *state, size_t state_len,
                   int64_t from, int64_t to, int64_t ckpt_at, struct mw_buf *out,
                   int64_t *checkpoints_saved, char *err, size_t errlen);

typedef struct mw_hydrate_opts {
  const char *from_snapshot;   /* NULL: the head; "genesis"; or a snapshot id */
  int64_t to;                  /* cursor to rebuild; -1 = the log's last */
  int64_t ckpt_every;          /* checkpoint interval K; 0 = default 100; <0 = none */
  int no_write;                /* write nothing: report unsafe snapshots in `unsafe` instead
                                  of marking them, save no checkpoint (for read connections) */
  int replay;                  /* a replay, not a wake: a bad head is skipped like any bad
                                  snapshot instead of refusing with MW_ECORRUPT */
} mw_hydrate_opts;

typedef struct mw_hydrated {
  struct mw_buf *state;        /* caller's buffer, receives canonical state */
  int64_t cursor;              /* the cursor the state is at */
  char head_id[40];            /* the head snapshot that was loaded, "" if none */
  char start_id[40];           /* the snapshot replay started from, "" = genesis */
  int64_t head_cursor;         /* the head's cursor (0 if none) */
  int64_t replayed;            /* entries folded on top of start */
  int refolded;                /* the fold changed since the head was made */
  int64_t checkpoints_failed;  /* checkpoints that failed verification, skipped */
  int64_t checkpoints_saved;
  char bad_id[40];             /* on MW_ECORRUPT: the snapshot that failed */
  char last_safe_id[40];       /* on MW_ECORRUPT: newest earlier safe one, "" none */
  char unsafe[4][40];          /* with no_write: snapshots found bad, to be marked unsafe */
  int n_unsafe;
} mw_hydrated;

/* hydrate: load the head (verified), start from the newest verified snapshot
 * at or after it made by this fold, replay the tail.  A head that fails is
 * marked unsafe and MW_ECORRUPT names it and the last safe snapshot; with
 * from_snapshot the state is rebuilt from that snapshot or from genesis. */
int mw_hydrate(mw_store *s, mw_fold *f, int64_t stream, const mw_hydrate_opts *opts,
               mw_hydrated *out, char *err, size_t errlen);

/* ---- Engine: the lifecycle (wake -> run -> sleep) ------------------------
 * The engine runs on one libuv loop (its own, or the embedder's).  Each call
 * takes the request exactly as the HTTP API does -- JSON bytes plus the
 * caller's tenant and role, which come from the token, never the payload --
 * and answers through a callback, on the loop thread, with the HTTP status
 * and the JSON body (the result, or {"error": {...}}).  The callback may fire
 * before the call returns.  Writes are group-committed: the callback of a
 * call that wrote fires only once its writes are durable. */
typedef struct mw_engine mw_engine;

typedef struct mw_engine_opts {
  const char *home;
  const char *scripts_dir;     /* NULL: the installed scripts */
  const char *skills_dir;      /* NULL: the installed skills */
  void *loop;                  /* a uv_loop_t *, or NULL for an engine-owned loop */
  int64_t session_ttl_ms;      /* default 30 min */
  int64_t checkpoint_every;    /* K, default 100 */
  int64_t skill_budget;        /* instructions per skill call, default 50M */
  int64_t skill_time_ms;       /* wall clock per skill call, default 2000 */
  size_t tenant_mem_limit;     /* bytes per tenant Lua state, default 64 MiB */
  const char *const *roots;    /* folders the tenants' sources may name */
  int nroots;
} mw_engine_opts;

int mw_engine_open(const mw_engine_opts *o, mw_engine **out, char *err, size_t errlen);
/* Closes the stores and frees everything; call once no call is in flight
 * (mw_engine_idle).  NULL is fine. */
void mw_engine_close(mw_engine *e);
int mw_engine_idle(const mw_engine *e);
/* Stops the engine's timers so that its loop can end (before close). */
void mw_engine_stop(mw_engine *e);

typedef struct mw_call {
  const char *tenant;          /* from the token */
  const char *role;            /* "agent" or "operator" */
  const char *actor;           /* for /v1/actors/{actor_id}/... calls, else NULL */
  const char *body;            /* request JSON (may be NULL for GETs) */
  size_t body_len;
  const char *query;           /* URL query for GETs, "" or NULL otherwise */
  uint64_t t0_ns;              /* when the request arrived (0: now) */
  const char *skill;           /* for /v1/actors/{actor_id}/skills/{name} */
  int quiet;                   /* run: a skill that stages nothing appends nothing, not even
                                  the run entry (heartbeats: an idle beat costs no disk) */
} mw_call;

typedef struct mw_reply {
  int status;                  /* HTTP status */
  const char *body;            /* JSON */
  size_t body_len;
} mw_reply;

typedef void (*mw_reply_cb)(void *ud, const mw_reply *r);
typedef int (*mw_call_fn)(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);

/* The lifecycle: wake (bootstrap + hydrate + compose), run
 * (run_with_continuity + commit), sleep (handover); load is the operator's
 * wake.  Each returns 0 when the call was taken (the callback will fire). */
int mw_wake(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_load(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_run(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_sleep(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
/* In-session: what the sources have new since the actor's consolidation point
 * (body {"session_id", "source"?}); and the operator's form for an actor that
 * need not be awake (mw_actor_delta, body {"source"?}). */
int mw_delta(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_actor_delta(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
/* In-session: the agent navigates its tenant's Cortex. */
int mw_navigate(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
/* 1 when every tenant Cortex the engine has opened is live (for /healthz). */
int mw_engine_cortex_live(mw_engine *e);
/* Skill entry (operator): wakes the actor (trigger "skill"), runs the named
 * skill with the body's "input", sleeps it with the result's "handover". */
int mw_actor_skill(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
/* Hot reload: rebuilds every tenant's Lua state from the files on disk; a
 * tenant whose new version fails keeps its old one (see /v1/status). */
void mw_engine_reload(mw_engine *e);
/* The deeper API (operator). */
int mw_sources(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);   /* the tenant's roster */
int mw_actor_log(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_actor_snapshots(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_actor_replay(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_actor_direction(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int mw_status(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);

/* For embedders without a loop of their own: makes the call and runs the
 * engine's loop until it answers.  *body is malloc'd (free it). */
int mw_call_sync(mw_engine *e, mw_call_fn fn, const mw_call *c, int *status, char **body, size_t *len);

/* Prometheus text for /metrics (host-wide, no tenant labels); appended to out. */
int mw_engine_metrics(mw_engine *e, struct mw_buf *out);

#ifdef __cplusplus
}
#endif
#endif /* MW_H */
