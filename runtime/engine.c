/* engine.c -- the lifecycle engine: wake (bootstrap, hydrate, compose), run
 * (run_with_continuity, commit) and sleep (handover), on one libuv loop.
 * Reads go through a read connection on the loop thread; every write is a
 * job applied in its own SAVEPOINT inside one open transaction on the write
 * connection, and the COMMIT (one fsync for the whole batch) runs on the
 * thread pool.  A caller is answered only after the commit that holds its
 * writes: nothing is acknowledged before it is durable. */
#include "mw.h"
#include "buf.h"
#include "chain.h"
#include "corpus.h"
#include "cortex.h"
#include "facts.h"
#include "sources.h"
#include "jfield.h"
#include "json.h"
#include "map.h"
#include "sessions.h"
#include "tenant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#ifndef MW_SCRIPTS_DIR
#define MW_SCRIPTS_DIR "scripts"
#endif
#ifndef MW_SKILLS_DIR
#define MW_SKILLS_DIR "skills"
#endif

#define NBUCKETS 14
static const double BUCKETS_MS[NBUCKETS] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000};

typedef struct hist {
  uint64_t n, b[NBUCKETS];
  double sum;
} hist;

typedef struct job job;
typedef struct session session;
typedef struct req req;
typedef struct reload_status reload_status;
static void tenant_loaded(mw_engine *e, const char *name, mw_tenant *t);
static void status_extra(mw_engine *e, const char *tenant, mw_buf *b);
static int need_operator(req *r, const mw_call *c);
static int get_tenant(mw_engine *e, const char *name, mw_tenant **out, char *err, size_t errlen);
static int entry_start(mw_engine *e, const char *tenant, const char *actor, const char *skill, const char *profile,
                       const char *trigger, const char *input, size_t input_len, mw_reply_cb cb, void *ud);

struct mw_engine {
  uv_loop_t *loop, own_loop;
  int owns_loop;
  mw_store *rd, *wr;
  mw_engine_opts o;
  char home[1024], scripts[1024], skills[1024];
  char *roots[16];             /* copies of the operator's roots */
  int nroots;
  mw_map tenants;              /* name -> mw_tenant */
  mw_map cortexes;             /* name -> tcortex */
  mw_map usage;                /* name -> usage: what a tenant has spent of its quotas */
  mw_map sessions;             /* session id -> session */
  mw_map awake;                /* "tenant/actor" -> session (open or opening) */
  job *pending, **pending_tail;   /* waiting for the write connection */
  job *batch, **batch_tail;       /* applied, waiting for COMMIT */
  int committing, in_tx, stopped;
  uv_work_t commit_work;
  int commit_rc;
  char commit_err[256];
  uv_check_t kick;
  uv_idle_t kick_now;          /* keeps the poll from blocking while a batch waits */
  uv_timer_t expiry;
  uv_timer_t reload_timer;
  int reload_all;
  mw_map reload_due;           /* tenant name -> (void *)1: files changed */
  mw_map reloads;              /* tenant name -> reload_status */
  mw_map beats;                /* "tenant/actor" -> beat */
  struct watch *watches;       /* folders watched for changes */
  uint64_t reload_ok, reload_failed, beat_ticks, beat_ok, beat_failed, beat_skipped;
  int64_t inflight;            /* calls taken but not yet answered */
  /* metrics */
  uint64_t commits, fsyncs, commit_failures, entries_appended, snapshot_failures, expired;
  uint64_t wakes, runs, sleeps, offloop, cortex_dark, navigations, quota_refusals;
  hist h_wake, h_run, h_sleep;
};

struct session {
  char id[48];
  mw_tenant *t;
  char tenant[65], actor[65], profile[16], trigger[16];
  char key[140];               /* "tenant/actor" */
  int64_t stream;              /* 0 until the stream exists */
  int64_t cursor;              /* the cursor `state` is at */
  mw_buf state;
  int state_ok;
  int64_t snap_cursor;         /* newest snapshot known by this fold */
  int64_t committed, opened_at, last_seen;
  char prior[48];
  int open, closed, busy;
  int ephemeral;               /* an internal trigger's: no session record */
  req *waiting, **waiting_tail;   /* calls queued behind the one in flight */
};

/* A call in flight: where its answer goes. */
struct req {
  mw_engine *e;
  mw_reply_cb cb;
  void *ud;
  uint64_t t0;
  hist *h;
  /* for calls queued behind a busy session */
  mw_call_fn fn;
  mw_call call;
  char *body_copy, tenant_copy[65], role_copy[16];
  req *next;
};

typedef int (*apply_fn)(mw_engine *e, job *j);
typedef void (*done_fn)(mw_engine *e, job *j, int rc);

struct job {
  job *next;
  apply_fn apply;
  done_fn done;
  int rc;
  char err[1024];
  req *r;
  session *s;
  /* payload */
  mw_append *items;
  size_t nitems;
  int owns_kinds;              /* items[1..] kinds are strdup'd (a run's staged entries) */
  mw_buf *bodies;              /* owned bodies of items */
  mw_buf out;                  /* the answer's body or the new state */
  mw_buf aux;                  /* a second buffer: result, packet */
  int64_t cursor, committed;
  char snap_id[40];
  char unsafe[5][40];
  int n_unsafe;
  const char *reason;
  char tenant[65], actor[65];
  int64_t stream;
  int with_append;
  mw_snapshot ckpt;            /* a checkpoint to save (state in ckpt_state) */
  mw_buf ckpt_state;
  mw_session_rec rec;
  char hint[2048];
  int has_hint;
  mw_enqueued *calls;          /* ctx.call: other actors' skills, after this commit */
  size_t ncalls;
  mw_buf navigated;            /* what Waking navigated, for the session record */
  mw_buf corpus;               /* the sweep's corpus to store, at corpus_cursor */
  int64_t corpus_cursor;
  char corpus_fp[65];
};

static int64_t now_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* ---- answers ------------------------------------------------------------------ */

static void observe(hist *h, double ms) {
  h->n++;
  h->sum += ms;
  for (int i = 0; i < NBUCKETS; i++)
    if (ms <= BUCKETS_MS[i]) h->b[i]++;
}

static double elapsed_ms(const req *r) { return (double)(uv_hrtime() - r->t0) / 1e6; }

static void answer(req *r, int status, mw_buf *body) {
  mw_engine *e = r->e;
  if (r->h && status == 200) observe(r->h, elapsed_ms(r));
  mw_reply rep = {status, body->p ? body->p : "{}", body->p ? body->len : 2};
  r->cb(r->ud, &rep);
  e->inflight--;
  free(r->body_copy);
  free(r);
}

/* Answers the contract's error shape; extra is "" or `,"k":v...` members. */
static void answer_error(req *r, int code, const char *message, const char *extra) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"error\":{\"code\":");
  mw__json_string(&b, mw_err_code(code), strlen(mw_err_code(code)));
  mw__buf_addstr(&b, ",\"message\":");
  const char *m = message && *message ? message : mw_strerror(code);
  if (mw__json_string(&b, m, strlen(m))) mw__buf_addstr(&b, "\"(message is not UTF-8)\"");
  if (extra) mw__buf_addstr(&b, extra);
  mw__buf_addstr(&b, "}}");
  answer(r, mw_err_http(code), &b);
  mw__buf_free(&b);
}

static void add_latency(mw_buf *b, const req *r) {
  char num[64];
  snprintf(num, sizeof num, ",\"latency_ms\":%.3f", elapsed_ms(r));
  mw__buf_addstr(b, num);
}

static void add_str_member(mw_buf *b, const char *key, const char *val, int first) {
  if (!first) mw__buf_addc(b, ',');
  mw__json_string(b, key, strlen(key));
  mw__buf_addc(b, ':');
  if (val && *val) mw__json_string(b, val, strlen(val));
  else mw__buf_addstr(b, "null");
}

static void add_int_member(mw_buf *b, const char *key, int64_t v, int first) {
  char num[48];
  if (!first) mw__buf_addc(b, ',');
  mw__json_string(b, key, strlen(key));
  snprintf(num, sizeof num, ":%" PRId64, v);
  mw__buf_addstr(b, num);
}

static req *new_req(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud, hist *h) {
  req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->e = e;
  r->cb = cb;
  r->ud = ud;
  r->t0 = c->t0_ns ? c->t0_ns : uv_hrtime();
  r->h = h;
  e->inflight++;
  return r;
}

/* ---- the write path: jobs and group commit -------------------------------------- */

static void commit_work(uv_work_t *w) {
  mw_engine *e = w->data;
  e->commit_rc = mw_store_commit(e->wr);
  if (e->commit_rc) {
    snprintf(e->commit_err, sizeof e->commit_err, "%s", mw_store_errmsg(e->wr));
    mw_store_scrub(e->wr);
  }
}

static void apply_pending(mw_engine *e);

static void finish_batch(mw_engine *e, int rc, const char *err) {
  job *j = e->batch;
  e->batch = NULL;
  e->batch_tail = &e->batch;
  while (j) {
    job *next = j->next;
    int jrc = j->rc ? j->rc : rc;
    if (!j->rc && rc) snprintf(j->err, sizeof j->err, "%s", err);
    j->done(e, j, jrc);
    j = next;
  }
}

static void commit_done(uv_work_t *w, int status) {
  mw_engine *e = w->data;
  (void)status;
  e->committing = 0;
  e->in_tx = 0;
  e->fsyncs++;
  if (e->commit_rc) {
    e->commit_failures++;
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"commit failed\",\"error\":\"%s\"}\n", e->commit_err);
    finish_batch(e, MW_EUNAVAIL, e->commit_err);
  } else {
    e->commits++;
    finish_batch(e, 0, "");
  }
  apply_pending(e);
}

static void kick_idle(uv_idle_t *h) { uv_idle_stop(h); }

/* After every loop iteration: seal the batch and commit it off the loop. */
static void kick_cb(uv_check_t *h) {
  mw_engine *e = h->data;
  uv_check_stop(h);
  uv_idle_stop(&e->kick_now);
  if (e->committing || !e->in_tx) return;
  e->committing = 1;
  e->commit_work.data = e;
  if (uv_queue_work(e->loop, &e->commit_work, commit_work, commit_done)) {
    /* no thread pool: commit here rather than never */
    commit_work(&e->commit_work);
    commit_done(&e->commit_work, 0);
  }
}

static void apply_one(mw_engine *e, job *j) {
  if (!e->in_tx) {
    int rc = mw_store_begin(e->wr);
    if (rc) {
      snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
      mw_buf m = {0};
      mw__json_string(&m, j->err, strlen(j->err));
      fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot begin a write\",\"error\":%s}\n", m.p ? m.p : "null");
      mw__buf_free(&m);
      j->rc = MW_EUNAVAIL;
      j->done(e, j, j->rc);
      return;
    }
    e->in_tx = 1;
  }
  int rc = mw_store_savepoint(e->wr);
  if (!rc) {
    rc = j->apply(e, j);
    mw_store_release(e->wr, rc == 0);
  } else {
    snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  }
  j->rc = rc;
  j->next = NULL;
  *e->batch_tail = j;
  e->batch_tail = &j->next;
  uv_check_start(&e->kick, kick_cb);
  /* a write made from a timer callback would otherwise wait for the poll to
   * wake up for something else: an idle handle makes this iteration's poll
   * return at once, so the check phase seals the batch now */
  uv_idle_start(&e->kick_now, kick_idle);
}

static void apply_pending(mw_engine *e) {
  while (e->pending && !e->committing) {
    job *j = e->pending;
    e->pending = j->next;
    if (!e->pending) e->pending_tail = &e->pending;
    apply_one(e, j);
  }
}

static void submit(mw_engine *e, job *j) {
  if (e->committing) {
    j->next = NULL;
    *e->pending_tail = j;
    e->pending_tail = &j->next;
    return;
  }
  apply_one(e, j);
}

static job *new_job(apply_fn a, done_fn d, req *r, session *s) {
  job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->apply = a;
  j->done = d;
  j->r = r;
  j->s = s;
  return j;
}

/* A job that appends n entries: its items and their owned bodies. */
static job *new_append_job(apply_fn a, done_fn d, req *r, session *s, size_t n) {
  job *j = new_job(a, d, r, s);
  if (!j) return NULL;
  j->items = calloc(n, sizeof *j->items);
  j->bodies = calloc(n, sizeof *j->bodies);
  if (!j->items || !j->bodies) {
    free(j->items);
    free(j->bodies);
    free(j);
    return NULL;
  }
  j->nitems = n;
  return j;
}

static void free_job(job *j) {
  if (!j) return;
  for (size_t i = 0; i < j->nitems; i++) mw__buf_free(&j->bodies[i]);
  if (j->owns_kinds && j->items)
    for (size_t i = 1; i < j->nitems; i++) free((char *)j->items[i].kind);
  free(j->bodies);
  free(j->items);
  mw__buf_free(&j->out);
  mw__buf_free(&j->aux);
  mw__buf_free(&j->ckpt_state);
  mw__buf_free(&j->corpus);
  mw__buf_free(&j->navigated);
  for (size_t i = 0; i < j->ncalls; i++) mw__buf_free(&j->calls[i].input);
  free(j->calls);
  free(j);
}

/* ---- the Cortex ------------------------------------------------------------------ */

/* A tenant's Cortex as the engine holds it.  It is opened lazily, probed on
 * every use (the file may be removed, replaced, corrupted or locked under
 * us), and caught up from the logs whenever it comes back. */
typedef struct tcortex {
  mw_cortex *cx;
  char path[1200];
  dev_t dev;
  ino_t ino;
  int behind;                  /* facts may be committed that it has not applied */
  char reason[256];            /* why it is dark */
} tcortex;

static void cortex_drop(tcortex *c, const char *reason) {
  if (c->cx || strcmp(c->reason, reason) != 0) {   /* a line per change, not per wake */
    mw_buf m = {0};
    mw__json_string(&m, reason, strlen(reason));
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"the Cortex is dark\",\"path\":\"%.200s\",\"reason\":%s}\n",
            c->path, m.p ? m.p : "null");
    mw__buf_free(&m);
  }
  mw_cortex_close(c->cx);
  c->cx = NULL;
  c->behind = 1;
  snprintf(c->reason, sizeof c->reason, "%.255s", reason);
}

/* probe: also try the write lock (WAL lets reads through a writer, so only
 * this shows a Cortex locked by another process); a run skips it -- the
 * apply after its commit finds a lock all the same. */
static tcortex *cortex_ensure(mw_engine *e, const char *tenant, int probe) {
  tcortex *c = mw__map_get(&e->cortexes, tenant);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c || mw__map_put(&e->cortexes, tenant, c)) {
      free(c);
      return NULL;
    }
    snprintf(c->path, sizeof c->path, "%s/tenants/%s/cortex.db", e->home, tenant);
    c->behind = 1;
  }
  struct stat st;
  char err[512];
  if (stat(c->path, &st) != 0) {
    cortex_drop(c, "cortex file missing");
  } else {
    if (c->cx && (st.st_ino != c->ino || st.st_dev != c->dev)) cortex_drop(c, "cortex file replaced");
    if (c->cx && access(c->path, R_OK | W_OK) != 0) cortex_drop(c, "cortex file unreadable");
    if (c->cx && mw_cortex_check(c->cx)) cortex_drop(c, mw_cortex_errmsg(c->cx));
    /* WAL lets reads through a writer's lock: probe the write lock itself,
     * since facts must be applicable for the Cortex to count as live. */
    if (c->cx && probe) {
      if (mw_cortex_begin(c->cx)) cortex_drop(c, "cortex is locked");
      else mw_cortex_rollback(c->cx);
    }
    if (!c->cx) {
      if (mw_cortex_open(c->path, 0, 50, &c->cx, err, sizeof err)) {
        cortex_drop(c, err);
      } else {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
        c->reason[0] = '\0';
      }
    }
    if (c->cx && c->behind) {
      if (mw__facts_catch_up_tenant(e->rd, c->cx, tenant, err, sizeof err)) cortex_drop(c, err);
      else c->behind = 0;
    }
  }
  mw_tenant *t = mw__map_get(&e->tenants, tenant);
  if (t) mw__tenant_set_cortex(t, c->cx, c->reason);
  return c;
}

/* After a commit that held facts: the Cortex applies them now, or later. */
static void cortex_apply(mw_engine *e, const char *tenant, int64_t stream, const char *actor, int64_t last) {
  tcortex *c = cortex_ensure(e, tenant, 1);
  char err[512];
  if (c && c->cx && mw__facts_catch_up(e->rd, c->cx, stream, actor, last, err, sizeof err)) cortex_drop(c, err);
}

int mw_engine_cortex_live(mw_engine *e) {
  size_t i = 0;
  const char *name;
  int live = 1;
  while (mw__map_next(&e->cortexes, &i, &name)) {
    char tenant[65];
    snprintf(tenant, sizeof tenant, "%s", name);
    tcortex *c = cortex_ensure(e, tenant, 1);
    if (!c || !c->cx) live = 0;
  }
  return live;
}

/* ---- quotas ------------------------------------------------------------------------ */

typedef struct usage {
  double tokens;               /* the request-rate bucket */
  uint64_t last_ns;
  int64_t log_bytes;
  int bytes_known;
} usage;

static usage *usage_of(mw_engine *e, const char *tenant) {
  usage *u = mw__map_get(&e->usage, tenant);
  if (!u && (u = calloc(1, sizeof *u)) && mw__map_put(&e->usage, tenant, u)) {
    free(u);
    u = NULL;
  }
  return u;
}

static const mw_quotas *quotas_of(mw_engine *e, const char *tenant) {
  mw_tenant *t = mw__map_get(&e->tenants, tenant);
  return t ? mw__tenant_quotas(t) : NULL;
}

static void answer_quota(mw_engine *e, req *r, const char *which, const char *msg) {
  char extra[64];
  snprintf(extra, sizeof extra, ",\"which\":\"%s\"", which);
  e->quota_refusals++;
  answer_error(r, MW_EQUOTA, msg, extra);
}

/* Requests per second, a token bucket per tenant; answers 429 itself. */
static int rate_limited(mw_engine *e, req *r, const mw_call *c) {
  if (!c->tenant) return 0;
  mw_tenant *t;
  char err[256];
  if (get_tenant(e, c->tenant, &t, err, sizeof err)) return 0;   /* the call reports it */
  const mw_quotas *q = mw__tenant_quotas(t);
  if (q->rps <= 0) return 0;
  usage *u = usage_of(e, c->tenant);
  if (!u) return 0;
  uint64_t now = uv_hrtime();
  if (!u->last_ns) u->tokens = (double)q->rps;
  else u->tokens += (double)(now - u->last_ns) / 1e9 * (double)q->rps;
  if (u->tokens > (double)q->rps) u->tokens = (double)q->rps;
  u->last_ns = now;
  if (u->tokens < 1) {
    answer_quota(e, r, "rps", "the tenant's requests per second are spent");
    return 1;
  }
  u->tokens -= 1;
  return 0;
}

static int64_t tenant_log_bytes(mw_engine *e, const char *tenant) {
  usage *u = usage_of(e, tenant);
  if (!u) return 0;
  if (!u->bytes_known) {
    u->log_bytes = mw_store_log_bytes(e->rd, tenant);
    u->bytes_known = 1;
  }
  return u->log_bytes;
}

static void add_log_bytes(mw_engine *e, const char *tenant, const mw_append *items, size_t n) {
  usage *u = mw__map_get(&e->usage, tenant);
  if (!u || !u->bytes_known) return;
  for (size_t i = 0; i < n; i++) u->log_bytes += (int64_t)items[i].body_len;
}

/* 1 (answered 429) when the tenant's log is full. */
static int log_full(mw_engine *e, req *r, const char *tenant) {
  const mw_quotas *q = quotas_of(e, tenant);
  if (!q || q->log_bytes <= 0 || tenant_log_bytes(e, tenant) < q->log_bytes) return 0;
  answer_quota(e, r, "log_bytes", "the tenant's log bytes are spent");
  return 1;
}

/* 1 (answered 429) when a new actor would pass the tenant's actor quota. */
static int actors_full(mw_engine *e, req *r, const char *tenant) {
  const mw_quotas *q = quotas_of(e, tenant);
  if (!q || q->actors <= 0 || mw_store_count_streams(e->rd, tenant) < q->actors) return 0;
  answer_quota(e, r, "actors", "the tenant's actors are spent");
  return 1;
}

/* ---- tenants and sessions -------------------------------------------------------- */

static int get_tenant(mw_engine *e, const char *name, mw_tenant **out, char *err, size_t errlen) {
  mw_tenant *t = mw__map_get(&e->tenants, name);
  if (t) {
    *out = t;
    return 0;
  }
  mw_tenant_conf c = {e->scripts, e->skills, e->home, e->o.tenant_mem_limit, e->o.skill_budget,
                      e->o.skill_time_ms, 0, (const char *const *)e->roots, e->nroots};
  int rc = mw__tenant_new(name, &c, &t, err, errlen);
  if (rc) return rc;
  if (mw__map_put(&e->tenants, name, t)) {
    mw__tenant_free(t);
    snprintf(err, errlen, "out of memory");
    return MW_ENOMEM;
  }
  tenant_loaded(e, name, t);
  *out = t;
  return 0;
}

static void session_free(session *s) {
  if (!s) return;
  mw__buf_free(&s->state);
  free(s);
}

static void session_forget(mw_engine *e, session *s) {
  if (mw__map_get(&e->awake, s->key) == s) mw__map_del(&e->awake, s->key);
  if (mw__map_get(&e->sessions, s->id) == s) mw__map_del(&e->sessions, s->id);
  /* calls queued behind it are answered: the session is closed now */
  req *q = s->waiting;
  while (q) {
    req *next = q->next;
    answer_error(q, MW_ECLOSED, "session is closed", NULL);
    q = next;
  }
  session_free(s);
}

/* The session a call names, in the caller's tenant (another tenant's session
 * is unknown too); answers the error itself and returns NULL when none. */
static session *find_session(mw_engine *e, const char *tenant, const char *body, size_t n, req *r) {
  const char *v;
  size_t vn;
  char id[64];
  if (mw__jfield(body, n, "session_id", &v, &vn) || mw__jstring(v, vn, id, sizeof id) < 0) {
    answer_error(r, MW_EINVAL, "session_id is required and must be a string", NULL);
    return NULL;
  }
  session *s = mw__map_get(&e->sessions, id);
  if (!s || strcmp(s->tenant, tenant) != 0) {
    /* closed sessions leave memory; their record says they slept */
    if (mw__session_closed(e->rd, id, tenant)) answer_error(r, MW_ECLOSED, "session is closed", NULL);
    else answer_error(r, MW_ESESSION, "no such session", NULL);
    return NULL;
  }
  if (s->closed || !s->open) {
    answer_error(r, s->closed ? MW_ECLOSED : MW_ESESSION, s->closed ? "session is closed" : "no such session", NULL);
    return NULL;
  }
  return s;
}

/* ---- request parsing ------------------------------------------------------------- */

/* Canonicalises the body into out; answers bad_request / tenant_in_payload. */
static int parse_body(req *r, const mw_call *c, mw_buf *out) {
  char err[256];
  if (!c->body || c->body_len == 0) {
    answer_error(r, MW_EINVAL, "the body must be a JSON object", NULL);
    return -1;
  }
  if (mw__json_canon(c->body, c->body_len, out, err, sizeof err)) {
    answer_error(r, MW_EJSON, err, NULL);
    return -1;
  }
  if (!mw__jis_object(out->p, out->len)) {
    answer_error(r, MW_EINVAL, "the body must be a JSON object", NULL);
    return -1;
  }
  const char *v;
  size_t vn;
  if (mw__jfield(out->p, out->len, "tenant_id", &v, &vn) == 0) {
    answer_error(r, MW_ETENANT, "the tenant comes from the token, never from the payload", NULL);
    return -1;
  }
  return 0;
}

/* An optional string field: 1 present, 0 absent (or null), -1 wrong type (answered). */
static int opt_string(req *r, const mw_buf *b, const char *key, char *out, size_t cap) {
  const char *v;
  size_t vn;
  if (mw__jfield(b->p, b->len, key, &v, &vn) || (vn == 4 && !memcmp(v, "null", 4))) return 0;
  if (mw__jstring(v, vn, out, cap) < 0) {
    char m[128];
    snprintf(m, sizeof m, "%s must be a string of at most %zu bytes", key, cap - 1);
    answer_error(r, v[0] == '"' ? MW_EINVAL : MW_EINVAL, m, NULL);
    return -1;
  }
  if (strlen(out) != (size_t)mw__jstring(v, vn, out, cap)) {
    char m[128];
    snprintf(m, sizeof m, "%s must not contain NUL", key);
    answer_error(r, MW_EINVAL, m, NULL);
    return -1;
  }
  return 1;
}

/* ---- wake: bootstrap + hydrate + compose ---------------------------------------- */

typedef struct wake_ctx {
  mw_engine *e;
  req *r;
  mw_tenant *t;
  session *s;
  char from[64];
  int has_from;
  char hint[2048];
  int has_hint;
  /* results of hydrate and of the sweep */
  mw_buf state, corpus;
  int64_t swept_from;
  mw_buf prev;                 /* the sweep record read when deciding where to hydrate */
  int64_t prev_from;
  int have_prev;
  char sweep_path[1100];
  mw_hydrated h;
  int rc;
  char err[1024];
  char fold_path[1100];
  uv_work_t work;
  int64_t last;
  int ephemeral;               /* an internal trigger's session: held in memory only */
} wake_ctx;

static void wake_ctx_free(wake_ctx *w) {
  mw__buf_free(&w->state);
  mw__buf_free(&w->corpus);
  mw__buf_free(&w->prev);
  free(w);
}

static void wake_fail(wake_ctx *w, int code, const char *msg, const char *extra) {
  mw_engine *e = w->e;
  if (w->s) session_forget(e, w->s);
  answer_error(w->r, code, msg, extra);
  wake_ctx_free(w);
}

/* The sweep: fold every entry since the sweep cursor into the corpus, up to
 * the cursor the state is at.  Pure: reads only; the session-open job stores
 * the corpus and the cursor together. */
static int sweep(mw_store *s, mw_fold *f, int64_t stream, int64_t to, mw_buf *corpus, int64_t *from,
                 const mw_buf *known, int64_t known_from, char *err, size_t errlen) {
  mw_buf prev = {0};
  int rc = 0;
  if (known) {   /* read already, on this connection, for this fold: not again */
    rc = mw__buf_add(&prev, known->p ? known->p : "", known->len);
    *from = known_from;
  } else if (stream) {
    rc = mw__corpus_get(s, stream, mw_fold_fingerprint(f), from, &prev);
  }
  if (!stream) *from = 0;
  if (rc) {
    snprintf(err, errlen, "%s", mw_store_errmsg(s));
    mw__buf_free(&prev);
    return rc;
  }
  if (*from > to) *from = 0;   /* a log shorter than the record: sweep again */
  rc = mw_fold_replay(f, s, stream, prev.len ? prev.p : NULL, prev.len, prev.len ? *from : 0, to, 0, corpus, NULL,
                      err, errlen);
  if (!prev.len) *from = 0;
  mw__buf_free(&prev);
  return rc;
}

static int apply_open(mw_engine *e, job *j) {
  session *s = j->s;
  int rc = 0;
  for (int i = 0; i < j->n_unsafe && !rc; i++) rc = mw_snapshot_mark_unsafe(e->wr, j->unsafe[i]);
  if (!rc && !s->stream) rc = mw_store_stream(e->wr, s->tenant, s->actor, 1, &j->stream);
  if (!rc && j->ckpt_state.len) {
    j->ckpt.state = j->ckpt_state.p;
    j->ckpt.state_len = j->ckpt_state.len;
    /* best effort: a checkpoint that cannot be saved only costs replay later */
    if (mw_store_savepoint(e->wr) == 0) mw_store_release(e->wr, mw_snapshot_put(e->wr, s->stream, &j->ckpt) == 0);
  }
  if (!rc && j->corpus_cursor) rc = mw__corpus_put(e->wr, s->stream, j->corpus_fp, j->corpus_cursor, j->corpus.p, j->corpus.len);
  if (!rc) rc = mw__session_insert(e->wr, &j->rec);
  if (rc) snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  return rc;
}

static void done_open(mw_engine *e, job *j, int rc) {
  session *s = j->s;
  req *r = j->r;
  if (rc) {
    session_forget(e, s);
    answer_error(r, rc == MW_EUNAVAIL ? MW_EUNAVAIL : rc, j->err, NULL);
    free_job(j);
    return;
  }
  if (!s->stream) s->stream = j->stream;
  s->open = 1;
  e->wakes++;
  /* the boot packet was composed before the commit; latency is now */
  add_latency(&j->aux, r);
  mw__buf_addc(&j->aux, '}');
  answer(r, 200, &j->aux);
  free_job(j);
}

static int apply_unsafe(mw_engine *e, job *j) {
  int rc = 0;
  for (int i = 0; i < j->n_unsafe && !rc; i++) rc = mw_snapshot_mark_unsafe(e->wr, j->unsafe[i]);
  return rc;
}

static void done_unsafe(mw_engine *e, job *j, int rc) {
  (void)e;
  (void)rc;   /* the answer is snapshot_corrupt either way; marking is retried next wake */
  answer_error(j->r, MW_ECORRUPT, j->err, (const char *)j->out.p);
  free_job(j);
}

/* The sweep's record alone (for sessions that keep no record). */
static int apply_corpus(mw_engine *e, job *j) {
  int rc = mw__corpus_put(e->wr, j->stream, j->corpus_fp, j->corpus_cursor, j->corpus.p, j->corpus.len);
  if (rc) snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  return rc;
}

static void done_corpus(mw_engine *e, job *j, int rc) {
  (void)e;
  (void)rc;   /* a lost record only costs the next wake a longer sweep */
  free_job(j);
}

/* Composes the boot packet and submits the session's creation. */
static void wake_compose(wake_ctx *w) {
  mw_engine *e = w->e;
  session *s = w->s;
  mw_hydrated *h = &w->h;
  char err[1024];
  e->snapshot_failures += (uint64_t)h->checkpoints_failed;
  if (w->rc == MW_ECORRUPT) {
    e->snapshot_failures++;
    job *j = new_job(apply_unsafe, done_unsafe, w->r, NULL);
    if (!j) return wake_fail(w, MW_ENOMEM, "out of memory", NULL);
    for (int i = 0; i < h->n_unsafe && i < 5; i++) snprintf(j->unsafe[j->n_unsafe++], 40, "%s", h->unsafe[i]);
    snprintf(j->err, sizeof j->err, "%s", w->err);
    mw__buf_addstr(&j->out, ",\"snapshot_id\":");
    mw__json_string(&j->out, h->bad_id, strlen(h->bad_id));
    mw__buf_addstr(&j->out, ",\"last_safe_snapshot_id\":");
    if (h->last_safe_id[0]) mw__json_string(&j->out, h->last_safe_id, strlen(h->last_safe_id));
    else mw__buf_addstr(&j->out, "null");
    session_forget(e, s);
    wake_ctx_free(w);
    submit(e, j);
    return;
  }
  if (w->rc) return wake_fail(w, w->rc == MW_EFOLD ? MW_EINTERNAL : w->rc, w->err, NULL);
  if (!w->corpus.len) {   /* swept here unless the thread pool did it */
    int rc = sweep(e->rd, mw__tenant_sweep(w->t), s->stream, h->cursor, &w->corpus, &w->swept_from,
                   w->have_prev ? &w->prev : NULL, w->prev_from, w->err, sizeof w->err);
    if (rc) return wake_fail(w, MW_EINTERNAL, w->err, NULL);
  }

  tcortex *cx = cortex_ensure(e, s->tenant, 1);
  if (!cx || !cx->cx) e->cortex_dark++;
  mw_buf briefing = {0};
  mw_compose_in in = {s->actor, s->profile, s->trigger, w->has_hint ? w->hint : NULL, h->cursor,
                      h->head_cursor, w->state.p, w->state.len, w->corpus.p, w->corpus.len};
  int rc = mw__tenant_compose(w->t, &in, &briefing, err, sizeof err);
  if (rc) {
    mw__buf_free(&briefing);
    return wake_fail(w, rc == MW_ETIMEOUT ? MW_ETIMEOUT : MW_EINTERNAL, err, NULL);
  }
  job *j = new_job(apply_open, done_open, w->r, s);
  if (!j) {
    mw__buf_free(&briefing);
    return wake_fail(w, MW_ENOMEM, "out of memory", NULL);
  }
  /* the session record */
  mw_session_rec *rec = &j->rec;
  unsigned char rnd[16], tok[32];
  mw__random(rnd, sizeof rnd);
  mw__random(tok, sizeof tok);   /* the internal wake token: only its hash is kept */
  memcpy(s->id, "ses_", 4);
  mw__hex(rnd, sizeof rnd, s->id + 4);
  snprintf(rec->id, sizeof rec->id, "%s", s->id);
  snprintf(rec->tenant, sizeof rec->tenant, "%s", s->tenant);
  snprintf(rec->actor, sizeof rec->actor, "%s", s->actor);
  snprintf(rec->profile, sizeof rec->profile, "%s", s->profile);
  snprintf(rec->trigger, sizeof rec->trigger, "%s", s->trigger);
  mw__sha256(tok, sizeof tok, rec->wake_token);
  rec->opened_at = rec->last_seen = s->opened_at = s->last_seen = now_ms();
  mw__session_prior(e->rd, s->tenant, s->actor, s->prior);
  snprintf(rec->prior, sizeof rec->prior, "%s", s->prior);
  if (w->has_hint) {
    snprintf(j->hint, sizeof j->hint, "%s", w->hint);
    rec->context_hint = j->hint;
  }
  size_t navn;
  const char *nav = mw__tenant_navigated(w->t, &navn);
  mw__buf_addc(&j->navigated, '[');
  if (navn) mw__buf_add(&j->navigated, nav, navn);
  mw__buf_addc(&j->navigated, ']');
  rec->navigated = j->navigated.p;
  for (int i = 0; i < h->n_unsafe && i < 5; i++) snprintf(j->unsafe[j->n_unsafe++], 40, "%s", h->unsafe[i]);
  if (h->replayed > (e->o.checkpoint_every > 0 ? e->o.checkpoint_every : 100) && s->stream) {
    mw__buf_add(&j->ckpt_state, w->state.p, w->state.len);
    j->ckpt.cursor = h->cursor;
    snprintf(j->ckpt.fold, sizeof j->ckpt.fold, "%s", mw_fold_fingerprint(mw__tenant_fold(w->t)));
  }
  if (s->stream && h->cursor > w->swept_from) {   /* the corpus advances with the session */
    j->corpus_cursor = h->cursor;
    j->corpus = w->corpus;
    w->corpus = (mw_buf){0};
    snprintf(j->corpus_fp, sizeof j->corpus_fp, "%s", mw_fold_fingerprint(mw__tenant_sweep(w->t)));
  }
  if (mw__map_put(&e->sessions, s->id, s)) {
    mw__buf_free(&briefing);
    free_job(j);
    return wake_fail(w, MW_ENOMEM, "out of memory", NULL);
  }
  /* the session's cached state: what the boot packet carries */
  s->cursor = h->cursor;
  s->snap_cursor = h->cursor - h->replayed;
  mw__buf_free(&s->state);
  s->state = w->state;
  w->state = (mw_buf){0};
  s->state_ok = 1;

  /* The answer, composed now, sent after the commit (done_open adds latency). */
  mw_buf *b = &j->aux;
  char head_hash[65] = "";
  if (h->head_cursor > 0) {
    unsigned char hh[32];
    if (mw_log_entry_hash(e->rd, s->stream, h->head_cursor, hh) == 0) mw__hex(hh, 32, head_hash);
  }
  mw__buf_addstr(b, "{\"boot_packet\":{");
  add_str_member(b, "actor_id", s->actor, 1);
  mw__buf_addstr(b, ",\"briefing\":");
  mw__buf_add(b, briefing.p, briefing.len);
  mw__buf_addstr(b, ",\"continuity\":{");
  add_int_member(b, "head_cursor", h->head_cursor, 1);
  add_str_member(b, "head_hash", head_hash, 0);
  add_str_member(b, "prior_session_id", s->prior, 0);
  mw__buf_addc(b, '}');
  add_int_member(b, "cursor", h->cursor, 0);
  add_str_member(b, "fold", mw_fold_fingerprint(mw__tenant_fold(w->t)), 0);
  add_str_member(b, "profile", s->profile, 0);
  mw__buf_addstr(b, h->refolded ? ",\"refolded\":true" : ",\"refolded\":false");
  add_str_member(b, "snapshot_id", h->head_id, 0);
  mw__buf_addstr(b, ",\"state\":");
  mw__buf_add(b, s->state.p, s->state.len);
  add_str_member(b, "trigger", s->trigger, 0);
  mw__buf_addc(b, '}');
  add_int_member(b, "replayed", h->replayed, 0);
  mw__buf_addstr(b, h->head_id[0] ? ",\"resumed_from_prior\":true" : ",\"resumed_from_prior\":false");
  add_str_member(b, "session_id", s->id, 0);
  add_str_member(b, "snapshot_id", h->head_id, 0);
  mw__buf_free(&briefing);
  int ephemeral = w->ephemeral;
  wake_ctx_free(w);
  if (ephemeral) {
    /* Heartbeats and skill entry hold no session a caller could resume: no
     * record is written, so an idle beat costs no disk.  The sweep's record
     * still advances when the log did (only beats that wrote move it). */
    s->ephemeral = 1;
    if (j->corpus_cursor) {
      job *cj = new_job(apply_corpus, done_corpus, NULL, NULL);
      if (cj) {
        cj->stream = s->stream;
        cj->corpus_cursor = j->corpus_cursor;
        cj->corpus = j->corpus;
        j->corpus = (mw_buf){0};
        snprintf(cj->corpus_fp, sizeof cj->corpus_fp, "%s", j->corpus_fp);
        submit(e, cj);
      }
    }
    done_open(e, j, 0);
    return;
  }
  submit(e, j);
}

/* Long replays run on the thread pool with their own read connection and a
 * fold state of their own, so other tenants' calls are not stalled. */
static void wake_work(uv_work_t *wk) {
  wake_ctx *w = wk->data;
  mw_store *s = NULL;
  mw_fold *f = NULL;
  w->rc = mw_store_open(w->e->home, 0, &s, w->err, sizeof w->err);
  if (!w->rc) w->rc = mw_fold_open(w->fold_path, NULL, &f, w->err, sizeof w->err);
  if (!w->rc) {
    mw_hydrate_opts o = {.from_snapshot = w->has_from ? w->from : NULL, .to = -1,
                         .ckpt_every = w->e->o.checkpoint_every, .no_write = 1};
    w->h.state = &w->state;
    w->rc = mw_hydrate(s, f, w->s->stream, &o, &w->h, w->err, sizeof w->err);
  }
  mw_fold *sw = NULL;
  if (!w->rc && !(w->rc = mw_fold_open(w->sweep_path, NULL, &sw, w->err, sizeof w->err)))
    w->rc = sweep(s, sw, w->s->stream, w->h.cursor, &w->corpus, &w->swept_from, NULL, 0, w->err, sizeof w->err);
  mw_fold_close(sw);
  mw_fold_close(f);
  mw_store_close(s);
}

static void wake_work_done(uv_work_t *wk, int status) {
  wake_ctx *w = wk->data;
  (void)status;
  wake_compose(w);
}

static int do_wake_x(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud, const char *trigger, int ephemeral);

static int do_wake(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud, const char *trigger) {
  return do_wake_x(e, c, cb, ud, trigger, 0);
}

static int do_wake_x(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud, const char *trigger, int ephemeral) {
  req *r = new_req(e, c, cb, ud, &e->h_wake);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  mw_buf body = {0};
  if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
  char actor[80] = "", profile[32] = "builder";
  wake_ctx *w = calloc(1, sizeof *w);
  if (!w) {
    mw__buf_free(&body);
    answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return 0;
  }
  w->e = e;
  w->r = r;
  w->ephemeral = ephemeral;
  int got = opt_string(r, &body, "actor_id", actor, sizeof actor);
  if (got == 0 || (got > 0 && !mw_valid_id(actor))) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    got = -1;
  }
  if (got >= 0 && (got = opt_string(r, &body, "profile", profile, sizeof profile)) >= 0 &&
      strcmp(profile, "builder") && strcmp(profile, "companion") && strcmp(profile, "agent")) {
    answer_error(r, MW_EINVAL, "profile must be builder, companion or agent", NULL);
    got = -1;
  }
  if (got >= 0 && (got = opt_string(r, &body, "context_hint", w->hint, 2001)) > 0) w->has_hint = 1;
  if (got >= 0 && (got = opt_string(r, &body, "from_snapshot", w->from, sizeof w->from)) > 0) w->has_from = 1;
  mw__buf_free(&body);
  if (got < 0) {
    free(w);
    return 0;
  }
  char err[1024];
  int rc = get_tenant(e, c->tenant, &w->t, err, sizeof err);
  if (rc) {
    free(w);
    answer_error(r, MW_EINTERNAL, err, NULL);
    return 0;
  }
  /* One open session per (tenant, actor), whoever opened it. */
  char key[140];
  snprintf(key, sizeof key, "%.64s/%.64s", c->tenant, actor);
  if (mw__map_get(&e->awake, key)) {
    free(w);
    answer_error(r, MW_EAWAKE, "the actor has an open session", NULL);
    return 0;
  }
  session *s = calloc(1, sizeof *s);
  if (!s || mw__map_put(&e->awake, key, s)) {
    free(s);
    free(w);
    answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return 0;
  }
  w->s = s;
  s->t = w->t;
  snprintf(s->key, sizeof s->key, "%s", key);
  snprintf(s->tenant, sizeof s->tenant, "%s", c->tenant);
  snprintf(s->actor, sizeof s->actor, "%.64s", actor);
  snprintf(s->profile, sizeof s->profile, "%.15s", profile);
  snprintf(s->trigger, sizeof s->trigger, "%s", trigger);
  s->waiting_tail = &s->waiting;

  /* hydrate */
  rc = mw_store_stream(e->rd, c->tenant, actor, 0, &s->stream);
  if (rc == MW_ENOENT) {
    s->stream = 0;
    if (actors_full(e, r, c->tenant)) {
      w->r = NULL;
      session_forget(e, s);
      wake_ctx_free(w);
      return 0;
    }
    if (w->has_from && strcmp(w->from, "genesis") != 0) {
      wake_fail(w, MW_ENOENT, "no such snapshot", NULL);
      return 0;
    }
    /* a first wake: the fold's initial state at cursor 0 */
    w->h.state = &w->state;
    w->rc = mw_fold_replay(mw__tenant_fold(w->t), e->rd, 0, NULL, 0, 0, 0, 0, &w->state, NULL, w->err,
                           sizeof w->err);
    wake_compose(w);
    return 0;
  }
  if (rc) {
    wake_fail(w, rc, mw_store_errmsg(e->rd), NULL);
    return 0;
  }
  int64_t last, newest, swept = 0;
  mw_log_head(e->rd, s->stream, &last, NULL);
  mw_snapshot_newest(e->rd, s->stream, mw_fold_fingerprint(mw__tenant_fold(w->t)), &newest);
  /* kept: a sweep on the loop (below) starts from this record without reading it again */
  w->have_prev = mw__corpus_get(e->rd, s->stream, mw_fold_fingerprint(mw__tenant_sweep(w->t)), &swept, &w->prev) == 0;
  w->prev_from = swept;
  int64_t k = e->o.checkpoint_every > 0 ? e->o.checkpoint_every : 100;
  if (w->has_from || last - (newest < 0 ? 0 : newest) > k || last - swept > k) {
    e->offloop++;
    snprintf(w->fold_path, sizeof w->fold_path, "%s/fold.lua", e->scripts);
    snprintf(w->sweep_path, sizeof w->sweep_path, "%s/sweep.lua", e->scripts);
    w->work.data = w;
    if (uv_queue_work(e->loop, &w->work, wake_work, wake_work_done) == 0) return 0;
  }
  mw_hydrate_opts o = {.from_snapshot = w->has_from ? w->from : NULL, .to = -1, .ckpt_every = k,
                       .no_write = 1};
  w->h.state = &w->state;
  w->rc = mw_hydrate(e->rd, mw__tenant_fold(w->t), s->stream, &o, &w->h, w->err, sizeof w->err);
  wake_compose(w);
  return 0;
}

int mw_wake(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) { return do_wake(e, c, cb, ud, "wake"); }

int mw_load(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  if (!c->role || strcmp(c->role, "operator") != 0) {
    req *r = new_req(e, c, cb, ud, NULL);
    if (!r) return MW_ENOMEM;
    answer_error(r, MW_EFORBID, "load needs an operator token", NULL);
    return 0;
  }
  return do_wake(e, c, cb, ud, "load");
}

/* ---- busy sessions: one call at a time ----------------------------------------------- */

/* Queues the call behind the one in flight on s; it is re-dispatched when
 * that one is answered.  Returns 0 when queued. */
static int defer(session *s, req *r, mw_call_fn fn, const mw_call *c) {
  r->fn = fn;
  r->call = *c;
  r->body_copy = malloc(c->body_len + 1);
  if (!r->body_copy) return MW_ENOMEM;
  memcpy(r->body_copy, c->body, c->body_len);
  r->body_copy[c->body_len] = '\0';
  snprintf(r->tenant_copy, sizeof r->tenant_copy, "%s", c->tenant);
  snprintf(r->role_copy, sizeof r->role_copy, "%s", c->role ? c->role : "");
  r->call.body = r->body_copy;
  r->call.tenant = r->tenant_copy;
  r->call.role = r->role_copy;
  r->call.t0_ns = r->t0;
  r->next = NULL;
  *s->waiting_tail = r;
  s->waiting_tail = &r->next;
  return 0;
}

static void redispatch(mw_engine *e, session *s) {
  s->busy = 0;
  req *q = s->waiting;
  if (!q) return;
  s->waiting = q->next;
  if (!s->waiting) s->waiting_tail = &s->waiting;
  /* re-enter through the public call with the saved request; the old req
   * wrapper is retired without answering (the new one answers) */
  mw_call c = q->call;
  char *copy = q->body_copy;
  e->inflight--;
  q->fn(e, &c, q->cb, q->ud);
  free(copy);
  free(q);
}

/* Brings the session's cached state up to date (after a restart it is not
 * held in memory); 0 or an error code with err filled. */
static int ensure_state(mw_engine *e, session *s, char *err, size_t errlen) {
  if (s->state_ok) return 0;
  if (!s->stream) {
    int rc = mw_fold_replay(mw__tenant_fold(s->t), e->rd, 0, NULL, 0, 0, 0, 0, &s->state, NULL, err, errlen);
    if (!rc) s->cursor = 0, s->state_ok = 1;
    return rc;
  }
  mw_hydrate_opts o = {.to = -1, .ckpt_every = e->o.checkpoint_every, .no_write = 1};
  mw_hydrated h = {.state = &s->state};
  int rc = mw_hydrate(e->rd, mw__tenant_fold(s->t), s->stream, &o, &h, err, errlen);
  if (rc == MW_ECORRUPT) {   /* the head is bad: rebuild from genesis for this session */
    o.from_snapshot = "genesis";
    rc = mw_hydrate(e->rd, mw__tenant_fold(s->t), s->stream, &o, &h, err, errlen);
  }
  if (!rc) {
    s->cursor = h.cursor;
    s->snap_cursor = h.cursor - h.replayed;
    s->state_ok = 1;
  }
  return rc;
}

/* Advances j->out (a copy of the session's state) over the entries after
 * s->cursor up to `to`, on the write connection (it sees this batch). */
static int advance_state(mw_engine *e, job *j, int64_t to) {
  session *s = j->s;
  return mw_fold_replay(mw__tenant_fold(s->t), e->wr, s->stream, s->state.p, s->state.len, s->cursor, to, 0,
                        &j->out, NULL, j->err, sizeof j->err);
}

/* ---- run: run_with_continuity + commit -------------------------------------------- */

static int apply_run(mw_engine *e, job *j) {
  session *s = j->s;
  int rc = 0;
  if (!s->stream) {
    rc = mw_store_stream(e->wr, s->tenant, s->actor, 1, &j->stream);
    if (rc) goto fail;
    s->stream = j->stream;
  }
  rc = mw_log_append(e->wr, s->stream, j->items, j->nitems, MW_ANY, &j->cursor);
  if (rc) goto fail;
  rc = advance_state(e, j, j->cursor);
  if (rc) return rc;
  int64_t k = e->o.checkpoint_every > 0 ? e->o.checkpoint_every : 100;
  if (j->cursor - s->snap_cursor >= k) {   /* no wake replays more than K */
    mw_snapshot c = {0};
    c.cursor = j->cursor;
    c.state = j->out.p;
    c.state_len = j->out.len;
    snprintf(c.fold, sizeof c.fold, "%s", mw_fold_fingerprint(mw__tenant_fold(s->t)));
    if (mw_snapshot_put(e->wr, s->stream, &c) == 0) j->committed = -1;   /* marks: checkpoint taken */
  }
  rc = mw__session_touch(e->wr, s->id, now_ms(), s->committed + (int64_t)j->nitems);
  if (rc) goto fail;
  return 0;
fail:
  snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  return rc;
}

/* A called skill's outcome has no caller waiting: it goes to the host log. */
static void call_done(void *ud, const mw_reply *r) {
  (void)ud;
  if (r->status != 200)
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"a called skill failed\",\"status\":%d,\"answer\":%.*s}\n",
            r->status, (int)r->body_len, r->body);
}

static void done_run(mw_engine *e, job *j, int rc) {
  session *s = j->s;
  req *r = j->r;
  if (rc) {
    if (s->stream == j->stream && j->stream) s->stream = 0;   /* the stream's creation rolled back */
    answer_error(r, rc == MW_EFOLD ? MW_EINTERNAL : rc, j->err, NULL);
  } else {
    if (j->committed == -1) s->snap_cursor = j->cursor;
    s->committed += (int64_t)j->nitems;
    s->cursor = j->cursor;
    mw_buf old = s->state;
    s->state = j->out;
    j->out = old;
    s->last_seen = now_ms();
    e->runs++;
    e->entries_appended += j->nitems;
    add_log_bytes(e, s->tenant, j->items, j->nitems);
    for (size_t i = 1; i < j->nitems; i++)
      if (!strcmp(j->items[i].kind, "fact")) {
        cortex_apply(e, s->tenant, s->stream, s->actor, j->cursor);
        break;
      }
    /* what the skill asked of other actors runs now that its own run is durable */
    for (size_t i = 0; i < j->ncalls; i++)
      if (entry_start(e, s->tenant, j->calls[i].actor, j->calls[i].skill, "agent", "skill", j->calls[i].input.p,
                      j->calls[i].input.len, call_done, NULL))
        fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot start a called skill\",\"actor\":\"%s\"}\n",
                j->calls[i].actor);
    mw_buf b = {0};
    mw__buf_addstr(&b, "{\"committed\":");
    char num[48];
    snprintf(num, sizeof num, "%zu", j->nitems);
    mw__buf_addstr(&b, num);
    add_int_member(&b, "cursor", j->cursor, 0);
    add_latency(&b, r);
    mw__buf_addstr(&b, ",\"result\":");
    mw__buf_add(&b, j->aux.p, j->aux.len);
    mw__buf_addc(&b, '}');
    answer(r, 200, &b);
    mw__buf_free(&b);
  }
  free_job(j);
  redispatch(e, s);
}

/* The opening every in-session call shares: take the call, check the rate,
 * canonicalise the body, find the session; when the session is busy the call
 * is queued behind (fn re-enters with it later).  Returns the session with
 * *body filled, or NULL when the call was answered or queued (*r set) or could
 * not be taken (*r NULL: out of memory). */
static session *session_call(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud, hist *h, mw_call_fn fn,
                             req **rout, mw_buf *body) {
  req *r = *rout = new_req(e, c, cb, ud, h);
  if (!r) return NULL;
  /* a sleep is never refused for the request rate: refusing it would keep
   * the actor awake (and its next wake already_awake) until the TTL */
  if (fn != mw_sleep && rate_limited(e, r, c)) return NULL;
  if (parse_body(r, c, body)) return mw__buf_free(body), NULL;
  session *s = find_session(e, c->tenant, body->p, body->len, r);
  if (!s) return mw__buf_free(body), NULL;
  if (s->busy) {
    mw__buf_free(body);
    if (defer(s, r, fn, c)) answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return NULL;
  }
  return s;
}

typedef struct run_wait {
  mw_engine *e;
  req *r;
  session *s;
  mw_tenant *t;
  char skill[80];
  int quiet;
  mw_buf body;
  mw_run_in in;
  mw_run_out out;
} run_wait;

static void delta_begin(mw_engine *e, const char *tenant, const char *actor, const char *only,
                        void (*then)(void *ud, int status, const char *body, size_t len), void *ud);

static void run_wait_pull(run_wait *w);
static int run_finish(mw_engine *e, req *r, session *s, const char *skill, const char *input, size_t input_len,
                      mw_run_out *out, int rc, int quiet, mw_buf *body);

/* The delta the skill waited for is here: hand it over and go on. */
static void run_wait_resume(void *ud, int status, const char *json, size_t len) {
  run_wait *w = ud;
  mw_buf answer = {0};
  if (status != 200) {
    /* the skill still gets a delta's shape: the failure as its one error,
     * naming the source it asked for ("*" for every source) */
    const char *err, *v;
    size_t errn, vn;
    const char *src = w->out.pending_source[0] ? w->out.pending_source : "*";
    mw__buf_addstr(&answer, "{\"errors\":[{\"code\":");
    if (!mw__jfield(json, len, "error", &err, &errn) && !mw__jfield(err, errn, "code", &v, &vn)) mw__buf_add(&answer, v, vn);
    else mw__buf_addstr(&answer, "\"internal\"");
    mw__buf_addstr(&answer, ",\"message\":");
    if (!mw__jfield(json, len, "error", &err, &errn) && !mw__jfield(err, errn, "message", &v, &vn))
      mw__buf_add(&answer, v, vn);
    else mw__buf_addstr(&answer, "\"the delta failed\"");
    mw__buf_addstr(&answer, ",\"source\":");
    mw__json_string(&answer, src, strlen(src));
    mw__buf_addstr(&answer, "}],\"items\":[]}");
    json = answer.p;
    len = answer.len;
  }
  int rc = mw__tenant_resume(w->t, &w->in, &w->out, json, len);
  mw__buf_free(&answer);
  if (rc == 0 && w->out.pending) {
    run_wait_pull(w);
    return;
  }
  mw_engine *e = w->e;
  session *s = w->s;
  s->busy = 0;
  int submitted = run_finish(e, w->r, s, w->skill, w->in.input, w->in.input_len, &w->out, rc, w->quiet, &w->body);
  mw__buf_free(&w->body);
  free(w);
  if (!submitted) redispatch(e, s);
}

static void run_wait_pull(run_wait *w) {
  delta_begin(w->e, w->s->tenant, w->s->actor, w->out.pending_source[0] ? w->out.pending_source : NULL,
              run_wait_resume, w);
}

/* The run's second half, once its skill has finished (at once, or after
 * waiting in ctx.delta): the guard, then the commit.  Returns 1 when a
 * commit was submitted (its completion clears the session's busy mark). */
static int run_finish(mw_engine *e, req *r, session *s, const char *skill, const char *input, size_t input_len,
                      mw_run_out *out, int rc, int quiet, mw_buf *body) {
  if (rc == 0 && (!strcmp(s->trigger, "heartbeat") || !strcmp(s->trigger, "skill"))) {
    /* An internal trigger sleeps with the result's handover, which is written
     * to the log: the guard refuses one that carries a secret, before any commit. */
    const char *h;
    size_t hn;
    const char *leaked = !mw__jfield(out->result.p, out->result.len, "handover", &h, &hn)
                             ? mw__tenant_secret_in(s->t, h, hn) : NULL;
    if (leaked) {
      char msg[320];
      snprintf(msg, sizeof msg, "skill %.64s: the handover contains the value of secret '%.64s'; secrets never enter "
               "the log", skill, leaked);
      answer_error(r, MW_ESKILL, msg, ",\"traceback\":\"\"");
      mw__run_out_free(out);
      mw__buf_free(body);
      return 0;
    }
  }
  if (rc == 0 && quiet && out->nstaged == 0 && out->ncalls == 0) {
    /* an idle beat: nothing to commit, nothing written */
    mw_buf b = {0};
    mw__buf_addstr(&b, "{\"committed\":0");
    add_int_member(&b, "cursor", s->cursor, 0);
    add_latency(&b, r);
    mw__buf_addstr(&b, ",\"result\":");
    mw__buf_add(&b, out->result.p, out->result.len);
    mw__buf_addc(&b, '}');
    answer(r, 200, &b);
    mw__buf_free(&b);
    mw__run_out_free(out);
    mw__buf_free(body);
    return 0;
  }
  if (rc) {
    mw__buf_free(body);
    if (rc == MW_ENOENT) {
      answer_error(r, MW_ENOENT, out->message, NULL);
    } else if (rc == MW_ETIMEOUT) {
      answer_error(r, MW_ETIMEOUT, out->message, NULL);
    } else {
      mw_buf extra = {0};
      mw__buf_addstr(&extra, ",\"traceback\":");
      if (out->traceback.len) mw__json_string(&extra, out->traceback.p, out->traceback.len);
      else mw__buf_addstr(&extra, "\"\"");
      answer_error(r, rc == MW_ENOMEM ? MW_ESKILL : MW_ESKILL,
                   rc == MW_ENOMEM ? "the tenant's memory cap was reached" : out->message, extra.p);
      mw__buf_free(&extra);
    }
    mw__run_out_free(out);
    return 0;
  }
  job *j = new_append_job(apply_run, done_run, r, s, 1 + out->nstaged);
  if (!j) {
    mw__run_out_free(out);
    mw__buf_free(body);
    answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return 0;
  }
  /* the run entry: {"input": ..., "skill": ...} -- keys already in order */
  mw__buf_addstr(&j->bodies[0], "{\"input\":");
  mw__buf_add(&j->bodies[0], input, input_len);
  mw__buf_addstr(&j->bodies[0], ",\"skill\":");
  mw__json_string(&j->bodies[0], skill, strlen(skill));
  mw__buf_addc(&j->bodies[0], '}');
  j->items[0] = (mw_append){"run", j->bodies[0].p, j->bodies[0].len, 1};
  for (size_t i = 0; i < out->nstaged; i++) {
    j->bodies[i + 1] = out->staged[i].body;
    out->staged[i].body = (mw_buf){0};
    j->items[i + 1] = (mw_append){out->staged[i].kind, j->bodies[i + 1].p, j->bodies[i + 1].len, 1};
  }
  j->aux = out->result;
  out->result = (mw_buf){0};
  j->calls = out->calls;
  j->ncalls = out->ncalls;
  out->calls = NULL;
  out->ncalls = 0;
  /* the kinds live in out->staged, freed below: the job keeps copies */
  j->owns_kinds = 1;
  for (size_t i = 0; i < out->nstaged; i++) {
    char *k = strdup(out->staged[i].kind);
    if (!k) {
      for (size_t q = i; q < out->nstaged; q++) j->items[q + 1].kind = NULL;
      free_job(j);
      mw__run_out_free(out);
      mw__buf_free(body);
      answer_error(r, MW_ENOMEM, "out of memory", NULL);
      return 0;
    }
    j->items[i + 1].kind = k;
  }
  mw__run_out_free(out);
  mw__buf_free(body);
  s->busy = 1;
  submit(e, j);
  return 1;
}


int mw_run(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r;
  mw_buf body = {0};
  session *s = session_call(e, c, cb, ud, &e->h_run, mw_run, &r, &body);
  if (!s) return r ? 0 : MW_ENOMEM;
  char skill[80] = "";
  const char *input = "null";
  size_t input_len = 4;
  const char *v;
  size_t vn;
  int got = opt_string(r, &body, "skill", skill, sizeof skill);
  if (got < 0) return mw__buf_free(&body), 0;
  if (got == 0 && mw__tenant_profile(s->t, s->profile, skill)) skill[0] = '\0';
  if (!mw_valid_id(skill)) {
    mw__buf_free(&body);
    answer_error(r, got ? MW_EINVAL : MW_ENOENT, got ? "skill must be a skill name" : "the profile has no default skill", NULL);
    return 0;
  }
  if (mw__jfield(body.p, body.len, "input", &v, &vn) == 0) input = v, input_len = vn;
  char err[1024];
  int rc = ensure_state(e, s, err, sizeof err);
  if (rc) {
    mw__buf_free(&body);
    answer_error(r, MW_EINTERNAL, err, NULL);
    return 0;
  }
  if (log_full(e, r, s->tenant)) {
    mw__buf_free(&body);
    return 0;
  }
  s->last_seen = now_ms();
  cortex_ensure(e, s->tenant, 0);
  mw_run_in in = {skill, s->actor, s->id, s->profile, s->cursor, s->state.p, s->state.len, input, input_len};
  mw_run_out out;
  rc = mw__tenant_run(s->t, &in, &out);
  if (rc == 0 && out.pending) {   /* the skill waits in ctx.delta */
    run_wait *w = calloc(1, sizeof *w);
    if (!w) {
      mw__run_out_free(&out);
      mw__buf_free(&body);
      answer_error(r, MW_ENOMEM, "out of memory", NULL);
      return 0;
    }
    w->e = e;
    w->r = r;
    w->s = s;
    w->t = s->t;
    w->quiet = c->quiet;
    snprintf(w->skill, sizeof w->skill, "%s", skill);
    w->body = body;   /* input points into it */
    w->in = in;
    w->in.skill = w->skill;
    w->out = out;
    s->busy = 1;
    run_wait_pull(w);
    return 0;
  }
  run_finish(e, r, s, skill, input, input_len, &out, rc, c->quiet, &body);
  return 0;
}

/* ---- sleep: handover -------------------------------------------------------------- */

static int apply_sleep(mw_engine *e, job *j) {
  session *s = j->s;
  int rc = 0;
  if (j->with_append) {
    if (!s->stream) {
      rc = mw_store_stream(e->wr, s->tenant, s->actor, 1, &j->stream);
      if (rc) goto fail;
      s->stream = j->stream;
    }
    rc = mw_log_append(e->wr, s->stream, j->items, 1, MW_ANY, &j->cursor);
    if (rc) goto fail;
    if ((rc = advance_state(e, j, j->cursor))) return rc;
    mw_snapshot h = {0};
    h.cursor = j->cursor;
    h.state = j->out.p;
    h.state_len = j->out.len;
    h.is_head = 1;
    snprintf(h.fold, sizeof h.fold, "%s", mw_fold_fingerprint(mw__tenant_fold(s->t)));
    if ((rc = mw_snapshot_put(e->wr, s->stream, &h))) goto fail;
    snprintf(j->snap_id, sizeof j->snap_id, "%s", h.id);
  } else if (s->stream) {
    /* nothing to write: the answer is the current head and cursor */
    if ((rc = mw_snapshot_head(e->wr, s->stream, j->snap_id))) goto fail;
    if ((rc = mw_log_head(e->wr, s->stream, &j->cursor, NULL))) goto fail;
  }
  rc = mw__session_close(e->wr, s->id, now_ms(), j->reason);
  if (rc) goto fail;
  return 0;
fail:
  snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  return rc;
}

static void done_sleep(mw_engine *e, job *j, int rc) {
  session *s = j->s;
  req *r = j->r;
  if (rc) {
    if (j->stream && s->stream == j->stream) s->stream = 0;
    if (r) answer_error(r, rc == MW_EFOLD ? MW_EINTERNAL : rc, j->err, NULL);
    else fprintf(stderr, "{\"level\":\"error\",\"msg\":\"expiry failed\",\"session\":\"%s\"}\n", s->id);
    free_job(j);
    redispatch(e, s);
    return;
  }
  s->closed = 1;
  s->open = 0;
  if (j->with_append) {
    e->entries_appended++;
    add_log_bytes(e, s->tenant, j->items, j->nitems);
  }
  if (r) {
    e->sleeps++;
    mw_buf b = {0};
    mw__buf_addstr(&b, "{");
    add_int_member(&b, "cursor", j->cursor, 1);
    add_latency(&b, r);
    add_str_member(&b, "snapshot_id", j->snap_id, 0);
    mw__buf_addc(&b, '}');
    answer(r, 200, &b);
    mw__buf_free(&b);
  } else {
    e->expired++;
  }
  free_job(j);
  session_forget(e, s);
}

static int start_sleep(mw_engine *e, session *s, req *r, const char *handover, size_t hlen, const char *reason) {
  char err[1024];
  int has_handover = handover && !(hlen == 4 && memcmp(handover, "null", 4) == 0);
  /* A session that committed nothing and hands nothing over writes nothing. */
  int with_append = s->committed > 0 || has_handover;
  job *j = with_append ? new_append_job(apply_sleep, done_sleep, r, s, 1) : new_job(apply_sleep, done_sleep, r, s);
  if (!j) return MW_ENOMEM;
  j->reason = reason;
  j->with_append = with_append;
  if (!j->with_append && s->ephemeral) {
    /* and one that keeps no record has nothing to close on disk either */
    if (s->stream && (mw_snapshot_head(e->rd, s->stream, j->snap_id) || mw_log_head(e->rd, s->stream, &j->cursor, NULL)))
      j->snap_id[0] = '\0';
    s->busy = 1;
    done_sleep(e, j, 0);
    return 0;
  }
  if (j->with_append) {
    int rc = ensure_state(e, s, err, sizeof err);
    if (rc) {
      free_job(j);
      if (r) answer_error(r, MW_EINTERNAL, err, NULL);
      return rc;
    }
    mw__buf_addstr(&j->bodies[0], "{\"handover\":");
    if (has_handover) mw__buf_add(&j->bodies[0], handover, hlen);
    else mw__buf_addstr(&j->bodies[0], "null");
    mw__buf_addstr(&j->bodies[0], ",\"reason\":");
    mw__json_string(&j->bodies[0], reason, strlen(reason));
    mw__buf_addc(&j->bodies[0], '}');
    j->items[0] = (mw_append){"handover", j->bodies[0].p, j->bodies[0].len, 1};
  }
  s->busy = 1;
  submit(e, j);
  return 0;
}

int mw_sleep(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r;
  mw_buf body = {0};
  session *s = session_call(e, c, cb, ud, &e->h_sleep, mw_sleep, &r, &body);
  if (!s) return r ? 0 : MW_ENOMEM;
  const char *v = NULL;
  size_t vn = 0;
  mw__jfield(body.p, body.len, "handover", &v, &vn);
  int rc = start_sleep(e, s, r, v, vn, "sleep");
  mw__buf_free(&body);
  if (rc == MW_ENOMEM) answer_error(r, MW_ENOMEM, "out of memory", NULL);
  return 0;
}

/* ---- expiry --------------------------------------------------------------------- */

static void expiry_cb(uv_timer_t *t) {
  mw_engine *e = t->data;
  int64_t now = now_ms(), ttl = e->o.session_ttl_ms;
  size_t i = 0;
  session *s;
  /* collect first: starting a sleep may change the map */
  session *due[64];
  int n = 0;
  while (n < 64 && (s = mw__map_next(&e->sessions, &i, NULL)))
    if (s->open && !s->closed && !s->busy && now - s->last_seen > ttl) due[n++] = s;
  for (int k = 0; k < n; k++) {
    int rc = start_sleep(e, due[k], NULL, NULL, 0, "expired");
    if (rc) fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot expire session\",\"session\":\"%s\"}\n", due[k]->id);
  }
}

/* ---- navigate: the agent's own look into its tenant's Cortex ------------------------ */

int mw_navigate(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  mw_buf body = {0};
  if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
  session *s = find_session(e, c->tenant, body.p, body.len, r);
  if (!s) return mw__buf_free(&body), 0;
  char hint[2001] = "", from[129] = "", to[129] = "";
  int got = opt_string(r, &body, "hint", hint, sizeof hint);
  if (got >= 0) got = opt_string(r, &body, "from", from, sizeof from);
  if (got >= 0) got = opt_string(r, &body, "to", to, sizeof to);
  mw_nav nav = {0};
  nav.hint = hint[0] ? hint : NULL;
  nav.from = from[0] ? from : NULL;
  nav.to = to[0] ? to : NULL;
  nav.depth = 1;
  nav.limit = 20;
  const char *v;
  size_t vn;
  int64_t n;
  if (got >= 0 && mw__jfield(body.p, body.len, "depth", &v, &vn) == 0) {
    if (mw__jint(v, vn, &n) || n < 1 || n > 4) got = -1, answer_error(r, MW_EINVAL, "depth must be an integer 1-4", NULL);
    else nav.depth = (int)n;
  }
  if (got >= 0 && mw__jfield(body.p, body.len, "limit", &v, &vn) == 0) {
    if (mw__jint(v, vn, &n) || n < 1 || n > 500) got = -1, answer_error(r, MW_EINVAL, "limit must be an integer 1-500", NULL);
    else nav.limit = (int)n;
  }
  mw__buf_free(&body);
  if (got < 0) return 0;
  s->last_seen = now_ms();
  e->navigations++;
  tcortex *cx = cortex_ensure(e, s->tenant, 1);
  mw_buf b = {0};
  if (!cx || !cx->cx) {
    mw__buf_addstr(&b, "{\"edges\":[]");
    add_latency(&b, r);
    mw__buf_addstr(&b, ",\"nodes\":[],\"reason\":");
    const char *why = cx ? cx->reason : "out of memory";
    mw__json_string(&b, why, strlen(why));
    mw__buf_addstr(&b, ",\"status\":\"dark\"}");
    answer(r, 200, &b);
    mw__buf_free(&b);
    return 0;
  }
  mw_buf out = {0};
  int rc = mw_cortex_navigate(cx->cx, &nav, &out);
  if (rc) {
    answer_error(r, rc == MW_EUNAVAIL ? MW_EUNAVAIL : MW_EINVAL, mw_cortex_errmsg(cx->cx), NULL);
    if (rc == MW_EUNAVAIL) cortex_drop(cx, mw_cortex_errmsg(cx->cx));
  } else {
    /* {"edges":[...],"latency_ms":..,"nodes":[...],"status":"live"}: keys in order */
    const char *edges = "[]", *nodes = "[]";
    size_t en = 2, nn = 2;
    mw__jfield(out.p, out.len, "edges", &edges, &en);
    mw__jfield(out.p, out.len, "nodes", &nodes, &nn);
    mw__buf_addstr(&b, "{\"edges\":");
    mw__buf_add(&b, edges, en);
    add_latency(&b, r);
    mw__buf_addstr(&b, ",\"nodes\":");
    mw__buf_add(&b, nodes, nn);
    mw__buf_addstr(&b, ",\"status\":\"live\"}");
    answer(r, 200, &b);
  }
  mw__buf_free(&out);
  mw__buf_free(&b);
  return 0;
}

/* ---- the roster ------------------------------------------------------------------- */

static void add_source_json(mw_buf *b, const mw_source *src) {
  mw__buf_addc(b, '{');
  add_str_member(b, "does", src->does, 1);
  add_str_member(b, "id", src->id, 0);
  add_str_member(b, "locator", src->locator, 0);
  mw__buf_addstr(b, ",\"subjects\":[");
  if (src->subjects & MW_MUNDO) mw__buf_addstr(b, (src->subjects & MW_ATIVIDADE) ? "\"mundo\"," : "\"mundo\"");
  if (src->subjects & MW_ATIVIDADE) mw__buf_addstr(b, "\"atividade\"");
  mw__buf_addstr(b, "]}");
}

int mw_sources(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  if (need_operator(r, c)) return 0;
  char err[1024];
  mw_tenant *t;
  if (get_tenant(e, c->tenant, &t, err, sizeof err)) {
    answer_error(r, MW_EINTERNAL, err, NULL);
    return 0;
  }
  size_t n;
  const mw_source *src = mw__tenant_sources(t, &n);
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"sources\":[");
  for (size_t i = 0; i < n; i++) {
    if (i) mw__buf_addc(&b, ',');
    add_source_json(&b, &src[i]);
  }
  mw__buf_addstr(&b, "]}");
  answer(r, 200, &b);
  mw__buf_free(&b);
  return 0;
}

/* ---- the deeper API ---------------------------------------------------------------- */

static int need_operator(req *r, const mw_call *c) {
  if (c->role && strcmp(c->role, "operator") == 0) return 0;
  answer_error(r, MW_EFORBID, "this route needs an operator token", NULL);
  return -1;
}

/* The actor's stream in the caller's tenant; answers 400/404 itself. */
static int actor_stream(mw_engine *e, req *r, const mw_call *c, int64_t *stream) {
  if (!c->actor || !mw_valid_id(c->actor)) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    return -1;
  }
  int rc = mw_store_stream(e->rd, c->tenant, c->actor, 0, stream);
  if (rc == 0) return 0;
  answer_error(r, rc == MW_ENOENT ? MW_ENOENT : rc, rc == MW_ENOENT ? "no such actor" : mw_store_errmsg(e->rd), NULL);
  return -1;
}

static int64_t query_int(const char *q, const char *key, int64_t dflt, int *bad) {
  if (!q) return dflt;
  size_t kn = strlen(key);
  for (const char *p = q; p && *p;) {
    if (!strncmp(p, key, kn) && p[kn] == '=') {
      char *end;
      long long v = strtoll(p + kn + 1, &end, 10);
      if (end == p + kn + 1 || (*end && *end != '&') || v < 0) *bad = 1;
      return v;
    }
    p = strchr(p, '&');
    if (p) p++;
  }
  return dflt;
}

typedef struct { mw_buf *b; int n; } logctx;

static int log_entry_json(void *ud, const mw_entry *en) {
  logctx *x = ud;
  char hex[65];
  mw__buf_addstr(x->b, x->n++ ? ",{" : "{");
  mw__buf_addstr(x->b, "\"body\":");
  mw__buf_add(x->b, en->body, en->body_len);
  add_int_member(x->b, "cursor", en->cursor, 0);
  mw__hex(en->hash, 32, hex);
  add_str_member(x->b, "hash", hex, 0);
  add_str_member(x->b, "kind", en->kind, 0);
  add_int_member(x->b, "ts", en->ts, 0);
  mw__buf_addc(x->b, '}');
  return 0;
}

int mw_actor_log(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  int64_t stream, last;
  if (need_operator(r, c) || actor_stream(e, r, c, &stream)) return 0;
  int bad = 0;
  int64_t from = query_int(c->query, "from", 1, &bad), limit = query_int(c->query, "limit", 100, &bad);
  if (bad) {
    answer_error(r, MW_EINVAL, "from and limit must be integers >= 0", NULL);
    return 0;
  }
  if (limit > 1000) limit = 1000;
  mw_buf b = {0};
  logctx x = {&b, 0};
  mw__buf_addstr(&b, "{\"entries\":[");
  int rc = mw_log_read(e->rd, stream, from, limit, log_entry_json, &x);
  if (!rc) rc = mw_log_head(e->rd, stream, &last, NULL);
  if (rc) {
    mw__buf_free(&b);
    answer_error(r, rc, mw_store_errmsg(e->rd), NULL);
    return 0;
  }
  mw__buf_addstr(&b, "]");
  add_int_member(&b, "head", last, 0);
  mw__buf_addc(&b, '}');
  answer(r, 200, &b);
  mw__buf_free(&b);
  return 0;
}

typedef struct { mw_buf *b; int n; const char *head; } snapctx;

static int snap_json(void *ud, const mw_snapshot *p) {
  snapctx *x = ud;
  char hex[65];
  mw__buf_addstr(x->b, x->n++ ? ",{" : "{");
  add_int_member(x->b, "created_at", p->created_at, 1);
  add_int_member(x->b, "cursor", p->cursor, 0);
  add_str_member(x->b, "fold", p->fold, 0);
  mw__buf_addstr(x->b, strcmp(p->id, x->head) == 0 ? ",\"head\":true" : ",\"head\":false");
  add_str_member(x->b, "kind", p->is_head ? "head" : "checkpoint", 0);
  mw__buf_addstr(x->b, p->safe ? ",\"safe\":true" : ",\"safe\":false");
  add_str_member(x->b, "snapshot_id", p->id, 0);
  mw__hex(p->state_hash, 32, hex);
  add_str_member(x->b, "state_hash", hex, 0);
  mw__buf_addc(x->b, '}');
  return 0;
}

int mw_actor_snapshots(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  int64_t stream;
  if (need_operator(r, c) || actor_stream(e, r, c, &stream)) return 0;
  char head[40];
  mw_buf b = {0};
  int rc = mw_snapshot_head(e->rd, stream, head);
  snapctx x = {&b, 0, head};
  mw__buf_addstr(&b, "{\"snapshots\":[");
  if (!rc) rc = mw_snapshot_list(e->rd, stream, snap_json, &x);
  if (rc) {
    mw__buf_free(&b);
    answer_error(r, rc, mw_store_errmsg(e->rd), NULL);
    return 0;
  }
  mw__buf_addstr(&b, "]}");
  answer(r, 200, &b);
  mw__buf_free(&b);
  return 0;
}

typedef struct replay_ctx {
  mw_engine *e;
  req *r;
  int64_t stream, to;
  char fold_path[1100], fp[65];
  mw_buf state;
  mw_hydrated h;
  int rc;
  char err[1024];
  uv_work_t work;
} replay_ctx;

static void replay_answer(replay_ctx *x) {
  if (x->rc) {
    answer_error(x->r, x->rc == MW_EFOLD ? MW_EINTERNAL : x->rc, x->err, NULL);
  } else {
    unsigned char h[32];
    char hex[65];
    mw__sha256(x->state.p, x->state.len, h);
    mw__hex(h, 32, hex);
    mw_buf b = {0};
    mw__buf_addstr(&b, "{");
    add_int_member(&b, "cursor", x->to, 1);
    add_str_member(&b, "fold", x->fp, 0);
    mw__buf_addstr(&b, ",\"state\":");
    mw__buf_add(&b, x->state.p, x->state.len);
    add_str_member(&b, "state_hash", hex, 0);
    mw__buf_addc(&b, '}');
    answer(x->r, 200, &b);
    mw__buf_free(&b);
  }
  mw__buf_free(&x->state);
  free(x);
}

static void replay_work(uv_work_t *w) {
  replay_ctx *x = w->data;
  mw_store *s = NULL;
  mw_fold *f = NULL;
  x->rc = mw_store_open(x->e->home, 0, &s, x->err, sizeof x->err);
  if (!x->rc) x->rc = mw_fold_open(x->fold_path, NULL, &f, x->err, sizeof x->err);
  if (!x->rc) {
    mw_hydrate_opts o = {.to = x->to, .ckpt_every = -1, .no_write = 1, .replay = 1};
    x->h.state = &x->state;
    x->rc = mw_hydrate(s, f, x->stream, &o, &x->h, x->err, sizeof x->err);
  }
  mw_fold_close(f);
  mw_store_close(s);
}

static void replay_done(uv_work_t *w, int status) {
  (void)status;
  replay_answer(w->data);
}

int mw_actor_replay(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  int64_t stream;
  if (need_operator(r, c)) return 0;
  mw_buf body = {0};
  if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
  const char *v;
  size_t vn;
  int64_t to;
  if (mw__jfield(body.p, body.len, "to", &v, &vn) || mw__jint(v, vn, &to) || to < 0) {
    mw__buf_free(&body);
    answer_error(r, MW_EINVAL, "to must be a cursor (an integer >= 0)", NULL);
    return 0;
  }
  mw__buf_free(&body);
  if (actor_stream(e, r, c, &stream)) return 0;
  char err[1024];
  mw_tenant *t;
  int rc = get_tenant(e, c->tenant, &t, err, sizeof err);
  if (rc) {
    answer_error(r, MW_EINTERNAL, err, NULL);
    return 0;
  }
  int64_t last, newest;
  mw_log_head(e->rd, stream, &last, NULL);
  if (to > last) {
    char m[128];
    snprintf(m, sizeof m, "cursor %" PRId64 " is past the log's last entry (%" PRId64 ")", to, last);
    answer_error(r, MW_EINVAL, m, NULL);
    return 0;
  }
  replay_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return 0;
  }
  x->e = e;
  x->r = r;
  x->stream = stream;
  x->to = to;
  snprintf(x->fp, sizeof x->fp, "%s", mw_fold_fingerprint(mw__tenant_fold(t)));
  mw_snapshot_newest(e->rd, stream, x->fp, &newest);
  int64_t k = e->o.checkpoint_every > 0 ? e->o.checkpoint_every : 100;
  if (newest > to || to - (newest < 0 ? 0 : newest) > k) {   /* long: off the loop */
    snprintf(x->fold_path, sizeof x->fold_path, "%s/fold.lua", e->scripts);
    x->work.data = x;
    e->offloop++;
    if (uv_queue_work(e->loop, &x->work, replay_work, replay_done) == 0) return 0;
  }
  mw_hydrate_opts o = {.to = to, .ckpt_every = -1, .no_write = 1, .replay = 1};
  x->h.state = &x->state;
  x->rc = mw_hydrate(e->rd, mw__tenant_fold(t), stream, &o, &x->h, x->err, sizeof x->err);
  replay_answer(x);
  return 0;
}

static int apply_direction(mw_engine *e, job *j) {
  int rc = mw_store_stream(e->wr, j->tenant, j->actor, 1, &j->stream);
  if (!rc) rc = mw_log_append(e->wr, j->stream, j->items, 1, MW_ANY, &j->cursor);
  if (rc) snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
  return rc;
}

static void done_direction(mw_engine *e, job *j, int rc) {
  if (rc) {
    answer_error(j->r, rc, j->err, NULL);
  } else {
    e->entries_appended++;
    add_log_bytes(e, j->tenant, j->items, j->nitems);
    mw_buf b = {0};
    mw__buf_addstr(&b, "{");
    add_int_member(&b, "cursor", j->cursor, 1);
    mw__buf_addc(&b, '}');
    answer(j->r, 200, &b);
    mw__buf_free(&b);
  }
  free_job(j);
}

int mw_actor_direction(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  if (need_operator(r, c)) return 0;
  if (!c->actor || !mw_valid_id(c->actor)) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    return 0;
  }
  mw_buf body = {0};
  if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
  const char *v;
  size_t vn;
  if (mw__jfield(body.p, body.len, "direction", &v, &vn)) {
    mw__buf_free(&body);
    answer_error(r, MW_EINVAL, "direction is required", NULL);
    return 0;
  }
  int64_t known;
  if ((mw_store_stream(e->rd, c->tenant, c->actor, 0, &known) == MW_ENOENT && actors_full(e, r, c->tenant)) ||
      log_full(e, r, c->tenant)) {
    mw__buf_free(&body);
    return 0;
  }
  job *j = new_append_job(apply_direction, done_direction, r, NULL, 1);
  if (!j) {
    mw__buf_free(&body);
    answer_error(r, MW_ENOMEM, "out of memory", NULL);
    return 0;
  }
  snprintf(j->tenant, sizeof j->tenant, "%s", c->tenant);
  snprintf(j->actor, sizeof j->actor, "%s", c->actor);
  mw__buf_addstr(&j->bodies[0], "{\"by\":\"operator\",\"direction\":");
  mw__buf_add(&j->bodies[0], v, vn);
  mw__buf_addc(&j->bodies[0], '}');
  j->items[0] = (mw_append){"direction", j->bodies[0].p, j->bodies[0].len, 1};
  mw__buf_free(&body);
  submit(e, j);
  return 0;
}

int mw_status(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  if (need_operator(r, c)) return 0;
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"sessions\":[");
  size_t i = 0;
  session *s;
  int n = 0;
  while ((s = mw__map_next(&e->sessions, &i, NULL))) {
    if (strcmp(s->tenant, c->tenant) != 0 || !s->open) continue;
    mw__buf_addstr(&b, n++ ? ",{" : "{");
    add_str_member(&b, "actor_id", s->actor, 1);
    add_int_member(&b, "committed", s->committed, 0);
    add_int_member(&b, "last_seen", s->last_seen, 0);
    add_int_member(&b, "opened_at", s->opened_at, 0);
    add_str_member(&b, "profile", s->profile, 0);
    add_str_member(&b, "session_id", s->id, 0);
    add_str_member(&b, "trigger", s->trigger, 0);
    mw__buf_addc(&b, '}');
  }
  mw__buf_addstr(&b, "],\"tenant\":");
  mw__json_string(&b, c->tenant, strlen(c->tenant));
  char num[160];
  snprintf(num, sizeof num, ",\"session_ttl_ms\":%" PRId64, e->o.session_ttl_ms);
  mw__buf_addstr(&b, num);
  status_extra(e, c->tenant, &b);
  mw__buf_addc(&b, '}');
  answer(r, 200, &b);
  mw__buf_free(&b);
  return 0;
}

/* ---- skill entry: wake -> run -> sleep for an actor that is asleep -------------------
 * The one chain behind every internal trigger: a heartbeat tick, the
 * operator's POST /v1/actors/{id}/skills/{name}, `mw skill run`, and a
 * skill's ctx.call.  It goes through the same public calls as HTTP. */

typedef struct entry {
  mw_engine *e;
  char tenant[65], actor[65], skill[65], profile[16], trigger[16];
  char session[64];
  mw_buf input, result;        /* the skill's input; the run's answer */
  int run_status;
  mw_reply_cb cb;              /* the final answer */
  void *ud;
  uint64_t t0;
} entry;

static void entry_finish(entry *x, int status, const char *body, size_t len) {
  mw_reply rep = {status, body, len};
  if (x->cb) x->cb(x->ud, &rep);
  mw__buf_free(&x->input);
  mw__buf_free(&x->result);
  free(x);
}

static void entry_slept(void *ud, const mw_reply *r) {
  entry *x = ud;
  if (x->run_status != 200) {   /* the run's error is the answer; the sleep wrote nothing */
    entry_finish(x, x->run_status, x->result.p, x->result.len);
    return;
  }
  if (r->status != 200) {
    entry_finish(x, r->status, r->body, r->body_len);
    return;
  }
  /* {"committed","cursor","latency_ms","result"} from run + the sleep's snapshot */
  mw_buf b = {0};
  const char *v;
  size_t vn;
  mw__buf_addstr(&b, "{");
  if (!mw__jfield(x->result.p, x->result.len, "committed", &v, &vn)) {
    mw__buf_addstr(&b, "\"committed\":");
    mw__buf_add(&b, v, vn);
    mw__buf_addc(&b, ',');
  }
  if (!mw__jfield(r->body, r->body_len, "cursor", &v, &vn)) {
    mw__buf_addstr(&b, "\"cursor\":");
    mw__buf_add(&b, v, vn);
  }
  char num[64];
  snprintf(num, sizeof num, ",\"latency_ms\":%.3f", (double)(uv_hrtime() - x->t0) / 1e6);
  mw__buf_addstr(&b, num);
  if (!mw__jfield(x->result.p, x->result.len, "result", &v, &vn)) {
    mw__buf_addstr(&b, ",\"result\":");
    mw__buf_add(&b, v, vn);
  }
  if (!mw__jfield(r->body, r->body_len, "snapshot_id", &v, &vn)) {
    mw__buf_addstr(&b, ",\"snapshot_id\":");
    mw__buf_add(&b, v, vn);
  }
  mw__buf_addc(&b, '}');
  entry_finish(x, 200, b.p, b.len);
  mw__buf_free(&b);
}

static void entry_ran(void *ud, const mw_reply *r) {
  entry *x = ud;
  x->run_status = r->status;
  x->result.len = 0;
  mw__buf_add(&x->result, r->body, r->body_len);
  /* sleep with the skill's handover, if its result carries one */
  mw_buf body = {0};
  const char *res, *h;
  size_t resn, hn;
  mw__buf_addstr(&body, "{");
  if (r->status == 200 && !mw__jfield(r->body, r->body_len, "result", &res, &resn) &&
      !mw__jfield(res, resn, "handover", &h, &hn)) {
    {
      mw__buf_addstr(&body, "\"handover\":");
      mw__buf_add(&body, h, hn);
      mw__buf_addc(&body, ',');
    }
  }
  mw__buf_addstr(&body, "\"session_id\":");
  mw__json_string(&body, x->session, strlen(x->session));
  mw__buf_addc(&body, '}');
  mw_call c = {.tenant = x->tenant, .role = "operator", .body = body.p, .body_len = body.len};
  mw_sleep(x->e, &c, entry_slept, x);
  mw__buf_free(&body);
}

static void entry_woke(void *ud, const mw_reply *r) {
  entry *x = ud;
  const char *v;
  size_t vn;
  if (r->status != 200 || mw__jfield(r->body, r->body_len, "session_id", &v, &vn) ||
      mw__jstring(v, vn, x->session, sizeof x->session) < 0) {
    entry_finish(x, r->status == 200 ? 500 : r->status, r->body, r->body_len);
    return;
  }
  mw_buf body = {0};
  mw__buf_addstr(&body, "{\"input\":");
  mw__buf_add(&body, x->input.len ? x->input.p : "null", x->input.len ? x->input.len : 4);
  mw__buf_addstr(&body, ",\"session_id\":");
  mw__json_string(&body, x->session, strlen(x->session));
  if (x->skill[0]) {
    mw__buf_addstr(&body, ",\"skill\":");
    mw__json_string(&body, x->skill, strlen(x->skill));
  }
  mw__buf_addc(&body, '}');
  mw_call c = {.tenant = x->tenant, .role = "operator", .body = body.p, .body_len = body.len,
               .quiet = !strcmp(x->trigger, "heartbeat")};
  mw_run(x->e, &c, entry_ran, x);
  mw__buf_free(&body);
}

/* Starts the chain; cb gets the final answer (may be NULL). */
static int entry_start(mw_engine *e, const char *tenant, const char *actor, const char *skill, const char *profile,
                       const char *trigger, const char *input, size_t input_len, mw_reply_cb cb, void *ud) {
  entry *x = calloc(1, sizeof *x);
  if (!x) return MW_ENOMEM;
  x->e = e;
  x->cb = cb;
  x->ud = ud;
  x->t0 = uv_hrtime();
  snprintf(x->tenant, sizeof x->tenant, "%.64s", tenant);
  snprintf(x->actor, sizeof x->actor, "%.64s", actor);
  snprintf(x->skill, sizeof x->skill, "%.64s", skill ? skill : "");
  snprintf(x->profile, sizeof x->profile, "%.15s", profile ? profile : "agent");
  snprintf(x->trigger, sizeof x->trigger, "%.15s", trigger);
  if (input && input_len) mw__buf_add(&x->input, input, input_len);
  mw_buf body = {0};
  mw__buf_addstr(&body, "{\"actor_id\":");
  mw__json_string(&body, x->actor, strlen(x->actor));
  mw__buf_addstr(&body, ",\"profile\":");
  mw__json_string(&body, x->profile, strlen(x->profile));
  mw__buf_addc(&body, '}');
  mw_call c = {.tenant = x->tenant, .role = "operator", .body = body.p, .body_len = body.len};
  int rc = do_wake_x(e, &c, entry_woke, x, x->trigger, 1);
  mw__buf_free(&body);
  return rc;
}

static void entry_to_req(void *ud, const mw_reply *rep) {
  req *r = ud;
  mw_buf b = {0};
  mw__buf_add(&b, rep->body, rep->body_len);
  answer(r, rep->status, &b);
  mw__buf_free(&b);
}

int mw_actor_skill(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  if (need_operator(r, c)) return 0;
  if (!c->actor || !mw_valid_id(c->actor)) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    return 0;
  }
  if (!c->skill || !mw_valid_id(c->skill)) {
    answer_error(r, MW_ENOENT, "no such skill", NULL);
    return 0;
  }
  const char *input = NULL;
  size_t input_len = 0;
  mw_buf body = {0};
  char profile[32] = "agent";
  if (c->body && c->body_len) {
    if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
    const char *v;
    size_t vn;
    if (!mw__jfield(body.p, body.len, "input", &v, &vn)) input = v, input_len = vn;
    if (opt_string(r, &body, "profile", profile, sizeof profile) < 0) return mw__buf_free(&body), 0;
  }
  /* r is answered by the chain's final callback */
  int rc = entry_start(e, c->tenant, c->actor, c->skill, profile, "skill", input, input_len, entry_to_req, r);
  mw__buf_free(&body);
  if (rc) answer_error(r, rc, "cannot start the skill", NULL);
  return 0;
}

/* ---- hot reload -------------------------------------------------------------------
 * Every Lua file the host runs belongs to a tenant's state (the shared
 * scripts and skills are loaded into each).  A change rebuilds that state
 * from scratch -- compiled as text, run in a fresh environment under the
 * call budgets, validated -- and swaps it in between calls; if anything
 * fails the old state keeps serving and the error is reported.  Heartbeats
 * belong to the state that declared them and are reconciled on every swap. */

struct reload_status {
  int64_t version, last_ok_ms, last_error_ms, failures;
  char last_error[512];
};

struct watch {
  uv_fs_event_t h;
  mw_engine *e;
  char tenant[65];             /* "" for the shared scripts and skills */
  char path[1100];
  struct watch *next;
};

static void beats_reconcile(mw_engine *e, const char *tenant, mw_tenant *t);
static void watch_tenant(mw_engine *e, const char *tenant);

static void reload_cb(uv_timer_t *h);

static reload_status *status_of(mw_engine *e, const char *tenant) {
  reload_status *st = mw__map_get(&e->reloads, tenant);
  if (!st && (st = calloc(1, sizeof *st)) && mw__map_put(&e->reloads, tenant, st)) {
    free(st);
    st = NULL;
  }
  return st;
}

static void reload_tenant(mw_engine *e, const char *name) {
  mw_tenant *old = mw__map_get(&e->tenants, name), *t;
  if (!old) return;   /* never loaded: it will be built fresh on first use */
  if (mw__tenant_busy(old)) {
    /* a run waits in ctx.delta inside the old state: swap once it is done */
    mw__map_put(&e->reload_due, name, (void *)1);
    uv_timer_start(&e->reload_timer, reload_cb, 50, 0);
    return;
  }
  char err[1024];
  mw_tenant_conf c = {e->scripts, e->skills, e->home, e->o.tenant_mem_limit, e->o.skill_budget,
                      e->o.skill_time_ms, 1, (const char *const *)e->roots, e->nroots};
  reload_status *st = status_of(e, name);
  if (mw__tenant_new(name, &c, &t, err, sizeof err)) {
    e->reload_failed++;
    if (st) {
      st->failures++;
      st->last_error_ms = now_ms();
      snprintf(st->last_error, sizeof st->last_error, "%.500s", err);
    }
    mw_buf m = {0};
    mw__json_string(&m, err, strlen(err));
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"reload failed; the old version keeps serving\",\"tenant\":\"%s\",\"error\":%s}\n",
            name, m.p ? m.p : "null");
    mw__buf_free(&m);
    return;
  }
  mw__map_put(&e->tenants, name, t);
  size_t i = 0;
  session *s;
  while ((s = mw__map_next(&e->sessions, &i, NULL)))
    if (s->t == old) s->t = t;
  i = 0;
  while ((s = mw__map_next(&e->awake, &i, NULL)))
    if (s->t == old) s->t = t;
  mw__tenant_free(old);
  cortex_ensure(e, name, 1);
  e->reload_ok++;
  if (st) {
    st->version++;
    st->last_ok_ms = now_ms();
  }
  beats_reconcile(e, name, t);
}

void mw_engine_reload(mw_engine *e) {
  size_t i = 0;
  const char *name;
  char names[256][65];
  int n = 0;
  while (n < 256 && mw__map_next(&e->tenants, &i, &name)) snprintf(names[n++], 65, "%s", name);
  for (int k = 0; k < n; k++) reload_tenant(e, names[k]);
}

static void reload_cb(uv_timer_t *h) {
  mw_engine *e = h->data;
  if (e->reload_all) {
    e->reload_all = 0;
    mw__map_free(&e->reload_due);
    mw_engine_reload(e);
    return;
  }
  char names[256][65];
  int n = 0;
  size_t i = 0;
  const char *name;
  while (n < 256 && mw__map_next(&e->reload_due, &i, &name)) snprintf(names[n++], 65, "%s", name);
  mw__map_free(&e->reload_due);
  for (int k = 0; k < n; k++) reload_tenant(e, names[k]);
}

static void watch_cb(uv_fs_event_t *h, const char *file, int events, int status) {
  struct watch *w = h->data;
  mw_engine *e = w->e;
  (void)events;
  if (status < 0) return;
  if (file && (file[0] == '.' || strstr(file, ".db"))) return;   /* editors' swap files; the Cortex */
  if (w->tenant[0]) mw__map_put(&e->reload_due, w->tenant, (void *)1);
  else e->reload_all = 1;
  /* debounced: an editor's save is several events; one reload follows */
  uv_timer_start(&e->reload_timer, reload_cb, 25, 0);
}

static void watch_add(mw_engine *e, const char *tenant, const char *path) {
  for (struct watch *w = e->watches; w; w = w->next)
    if (!strcmp(w->path, path)) return;
  struct watch *w = calloc(1, sizeof *w);
  if (!w) return;
  w->e = e;
  snprintf(w->tenant, sizeof w->tenant, "%s", tenant);
  snprintf(w->path, sizeof w->path, "%s", path);
  uv_fs_event_init(e->loop, &w->h);
  w->h.data = w;
  if (uv_fs_event_start(&w->h, watch_cb, path, 0)) {
    uv_close((uv_handle_t *)&w->h, (uv_close_cb)free);
    return;
  }
  uv_unref((uv_handle_t *)&w->h);
  w->next = e->watches;
  e->watches = w;
}

static void watch_tenant(mw_engine *e, const char *tenant) {
  char path[1100];
  snprintf(path, sizeof path, "%s/tenants/%s", e->home, tenant);
  watch_add(e, tenant, path);
  snprintf(path, sizeof path, "%s/tenants/%s/skills", e->home, tenant);
  watch_add(e, tenant, path);
  snprintf(path, sizeof path, "%s/tenants/%s/secrets", e->home, tenant);
  watch_add(e, tenant, path);
}

/* A tenant's state was built for the first time: watch its files, start its heartbeats. */
static void tenant_loaded(mw_engine *e, const char *name, mw_tenant *t) {
  reload_status *st = status_of(e, name);
  if (st) st->version = 1, st->last_ok_ms = now_ms();
  watch_tenant(e, name);
  beats_reconcile(e, name, t);
}

/* ---- heartbeats -------------------------------------------------------------------
 * A timer per actor, owned by C: it keeps firing whatever the Lua side does.
 * Each tick is a Waking with trigger "heartbeat", the beat skill, and a
 * sleep with its handover -- through skill entry.  A tick never overlaps the
 * previous one, and an actor already awake is skipped, never given a second
 * session; both are counted. */

typedef struct beat {
  uv_timer_t h;
  mw_engine *e;
  char tenant[65];
  mw_beat cfg;
  int running, dead;
  uint64_t due_ns;
  uint64_t ticks, ok, failed, consecutive, skipped_overlap, skipped_awake;
  int64_t last_ok_ms, last_error_ms;
  char last_error[256];
  double late_max_ms, late_sum_ms;
} beat;

static void beat_done(void *ud, const mw_reply *r) {
  beat *b = ud;
  mw_engine *e = b->e;
  b->running = 0;
  if (r->status == 200) {
    b->ok++;
    e->beat_ok++;
    b->consecutive = 0;
    b->last_ok_ms = now_ms();
  } else {
    b->failed++;
    e->beat_failed++;
    b->consecutive++;
    b->last_error_ms = now_ms();
    snprintf(b->last_error, sizeof b->last_error, "%d %.*s", r->status, (int)(r->body_len < 240 ? r->body_len : 240),
             r->body);
  }
  if (b->dead) uv_close((uv_handle_t *)&b->h, (uv_close_cb)free);
}

static void beat_tick(uv_timer_t *h) {
  beat *b = h->data;
  mw_engine *e = b->e;
  uint64_t now = uv_hrtime();
  /* lateness against the schedule (due times a whole period apart), not
   * against the previous tick: drift shows */
  double late = now > b->due_ns ? (double)(now - b->due_ns) / 1e6 : 0;
  b->due_ns += (uint64_t)b->cfg.every_ms * 1000000u;
  if (b->due_ns + (uint64_t)b->cfg.every_ms * 1000000u < now) b->due_ns = now;   /* after a long stall */
  b->ticks++;
  e->beat_ticks++;
  b->late_sum_ms += late;
  if (late > b->late_max_ms) b->late_max_ms = late;
  if (b->running) {
    b->skipped_overlap++;
    e->beat_skipped++;
    return;
  }
  char key[140];
  snprintf(key, sizeof key, "%s/%s", b->tenant, b->cfg.actor);
  if (mw__map_get(&e->awake, key)) {
    b->skipped_awake++;
    e->beat_skipped++;
    return;
  }
  b->running = 1;
  if (entry_start(e, b->tenant, b->cfg.actor, b->cfg.skill[0] ? b->cfg.skill : NULL, b->cfg.profile, "heartbeat",
                  NULL, 0, beat_done, b)) {
    b->running = 0;
    b->failed++;
    b->consecutive++;
  }
}

static void beat_stop(mw_engine *e, const char *key) {
  beat *b = mw__map_del(&e->beats, key);
  if (!b) return;
  uv_timer_stop(&b->h);
  b->dead = 1;
  if (!b->running) uv_close((uv_handle_t *)&b->h, (uv_close_cb)free);
}

static void beats_reconcile(mw_engine *e, const char *tenant, mw_tenant *t) {
  size_t n = 0;
  const mw_beat *cfg = t ? mw__tenant_beats(t, &n) : NULL;
  char key[140], prefix[70];
  snprintf(prefix, sizeof prefix, "%s/", tenant);
  /* stop what the new version no longer declares, or declares differently */
  size_t i = 0;
  const char *k;
  char gone[256][140];
  int ngone = 0;
  beat *b;
  while ((b = mw__map_next(&e->beats, &i, &k))) {
    if (strncmp(k, prefix, strlen(prefix)) != 0) continue;
    int keep = 0;
    for (size_t j = 0; j < n; j++)
      if (!strcmp(cfg[j].actor, b->cfg.actor) && cfg[j].every_ms == b->cfg.every_ms &&
          !strcmp(cfg[j].profile, b->cfg.profile) && !strcmp(cfg[j].skill, b->cfg.skill))
        keep = 1;
    if (!keep && ngone < 256) snprintf(gone[ngone++], 140, "%s", k);
  }
  for (int g = 0; g < ngone; g++) beat_stop(e, gone[g]);
  for (size_t j = 0; j < n; j++) {
    snprintf(key, sizeof key, "%s/%s", tenant, cfg[j].actor);
    if (mw__map_get(&e->beats, key)) continue;
    b = calloc(1, sizeof *b);
    if (!b) continue;
    b->e = e;
    snprintf(b->tenant, sizeof b->tenant, "%s", tenant);
    b->cfg = cfg[j];
    uv_timer_init(e->loop, &b->h);
    b->h.data = b;
    /* phases spread over the period: 1,000 beats due in one millisecond
     * would run one after another and the last would be late by all of them */
    uint64_t offset = n > 1 ? (uint64_t)b->cfg.every_ms * j / n : 0;
    b->due_ns = uv_hrtime() + ((uint64_t)b->cfg.every_ms + offset) * 1000000u;
    uv_timer_start(&b->h, beat_tick, (uint64_t)b->cfg.every_ms + offset, (uint64_t)b->cfg.every_ms);
    if (mw__map_put(&e->beats, key, b)) {
      uv_close((uv_handle_t *)&b->h, (uv_close_cb)free);
    }
  }
}

/* ,"reloads":{...},"timers":[...] for one tenant's status */
static void status_extra(mw_engine *e, const char *tenant, mw_buf *b) {
  reload_status *st = mw__map_get(&e->reloads, tenant);
  mw__buf_addstr(b, ",\"reloads\":{");
  add_int_member(b, "failures", st ? st->failures : 0, 1);
  add_str_member(b, "last_error", st ? st->last_error : "", 0);
  add_int_member(b, "last_error_at", st ? st->last_error_ms : 0, 0);
  add_int_member(b, "last_ok_at", st ? st->last_ok_ms : 0, 0);
  add_int_member(b, "version", st ? st->version : 0, 0);
  mw__buf_addstr(b, "},\"timers\":[");
  char prefix[70];
  snprintf(prefix, sizeof prefix, "%s/", tenant);
  size_t i = 0;
  const char *k;
  beat *bt;
  int n = 0;
  while ((bt = mw__map_next(&e->beats, &i, &k))) {
    if (strncmp(k, prefix, strlen(prefix)) != 0) continue;
    mw__buf_addstr(b, n++ ? ",{" : "{");
    add_str_member(b, "actor_id", bt->cfg.actor, 1);
    add_int_member(b, "consecutive_failures", (int64_t)bt->consecutive, 0);
    add_int_member(b, "every_ms", bt->cfg.every_ms, 0);
    add_int_member(b, "failed", (int64_t)bt->failed, 0);
    add_str_member(b, "last_error", bt->last_error, 0);
    add_int_member(b, "last_error_at", bt->last_error_ms, 0);
    add_int_member(b, "last_ok_at", bt->last_ok_ms, 0);
    char late[96];
    snprintf(late, sizeof late, ",\"late_max_ms\":%.3f,\"late_mean_ms\":%.3f", bt->late_max_ms,
             bt->ticks ? bt->late_sum_ms / (double)bt->ticks : 0.0);
    mw__buf_addstr(b, late);
    add_int_member(b, "ok", (int64_t)bt->ok, 0);
    add_str_member(b, "profile", bt->cfg.profile, 0);
    add_int_member(b, "skipped_awake", (int64_t)bt->skipped_awake, 0);
    add_int_member(b, "skipped_overlap", (int64_t)bt->skipped_overlap, 0);
    add_str_member(b, "skill", bt->cfg.skill, 0);
    add_int_member(b, "ticks", (int64_t)bt->ticks, 0);
    mw__buf_addc(b, '}');
  }
  mw__buf_addc(b, ']');
}

/* ---- delta: what the sources have new since the actor's consolidation point ----------
 * Every source is pulled at once, off the loop, each with its own deadline;
 * one that fails or is slow is an entry in `errors` and delays nothing else.
 * Raw items go through the source's policy (Lua) as they come back.  The new
 * horizons are recorded, durably, before the answer: the next delta starts
 * from them. */

typedef struct pull {
  mw_source src;               /* a copy: a reload may replace the tenant meanwhile */
  struct delta_ctx *d;
  int rc;
  char error[600];
  mw_buf items, horizon, prev;
} pull;

typedef struct delta_ctx {
  mw_engine *e;
  void (*then)(void *ud, int status, const char *body, size_t len);   /* the answer goes here */
  void *ud;
  char tenant[65], actor[65];
  pull *pulls;
  int n, pending;
} delta_ctx;

static void delta_free(delta_ctx *d) {
  for (int i = 0; i < d->n; i++) {
    mw__buf_free(&d->pulls[i].items);
    mw__buf_free(&d->pulls[i].horizon);
    mw__buf_free(&d->pulls[i].prev);
  }
  free(d->pulls);
  free(d);
}

static int apply_consolidate(mw_engine *e, job *j) {
  delta_ctx *d = (delta_ctx *)j->s;
  int64_t now = now_ms();
  for (int i = 0; i < d->n; i++) {
    pull *p = &d->pulls[i];
    if (p->rc || !p->horizon.len) continue;
    int rc = mw__consolidation_put(e->wr, d->tenant, d->actor, p->src.id, p->horizon.p, p->horizon.len, now);
    if (rc) {
      snprintf(j->err, sizeof j->err, "%s", mw_store_errmsg(e->wr));
      return rc;
    }
  }
  return 0;
}

/* Answers the delta's continuation with the contract's error shape. */
static void delta_fail(delta_ctx *d, int code, const char *msg) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"error\":{\"code\":");
  mw__json_string(&b, mw_err_code(code), strlen(mw_err_code(code)));
  mw__buf_addstr(&b, ",\"message\":");
  mw__json_string(&b, msg, strlen(msg));
  mw__buf_addstr(&b, "}}");
  d->then(d->ud, mw_err_http(code), b.p, b.len);
  mw__buf_free(&b);
}

static void done_consolidate(mw_engine *e, job *j, int rc) {
  delta_ctx *d = (delta_ctx *)j->s;
  (void)e;
  if (rc) {
    delta_fail(d, rc, j->err);
  } else {
    mw_buf b = {0};
    mw__buf_addstr(&b, "{\"errors\":[");
    int ne = 0;
    for (int i = 0; i < d->n; i++) {
      pull *p = &d->pulls[i];
      if (!p->rc) continue;
      mw__buf_addstr(&b, ne++ ? ",{" : "{");
      add_str_member(&b, "code", mw_err_code(p->rc), 1);
      add_str_member(&b, "message", p->error, 0);
      add_str_member(&b, "source", p->src.id, 0);
      mw__buf_addc(&b, '}');
    }
    mw__buf_addstr(&b, "],\"items\":[");
    int ni = 0;
    for (int i = 0; i < d->n; i++) {
      pull *p = &d->pulls[i];
      if (p->rc || p->items.len <= 2) continue;   /* "[]" */
      if (ni++) mw__buf_addc(&b, ',');
      mw__buf_add(&b, p->items.p + 1, p->items.len - 2);
    }
    mw__buf_addstr(&b, "]}");
    d->then(d->ud, 200, b.p, b.len);
    mw__buf_free(&b);
  }
  j->s = NULL;
  free_job(j);
  delta_free(d);
}

static void delta_finish(delta_ctx *d) {
  job *j = new_job(apply_consolidate, done_consolidate, NULL, (session *)d);
  if (!j) {
    delta_fail(d, MW_ENOMEM, "out of memory");
    delta_free(d);
    return;
  }
  submit(d->e, j);
}

static void pulled(void *ud, mw_pull_res *res) {
  pull *p = ud;
  delta_ctx *d = p->d;
  mw_engine *e = d->e;
  /* a source past its deadline is unavailable now, not a skill's timeout */
  p->rc = res->rc == MW_ETIMEOUT ? MW_EUNAVAIL : res->rc;
  if (res->rc) {
    snprintf(p->error, sizeof p->error, "%s", res->error);
  } else {
    mw_tenant *t = mw__map_get(&e->tenants, d->tenant);
    char err[600];
    int rc = t ? mw__tenant_policy(t, &p->src, res->items.p, res->items.len, &p->items, err, sizeof err) : MW_EINTERNAL;
    if (rc) {
      p->rc = rc == MW_ETIMEOUT ? MW_ETIMEOUT : MW_ESKILL;
      snprintf(p->error, sizeof p->error, "%s", t ? err : "the tenant is gone");
    } else {
      mw__buf_add(&p->horizon, res->horizon.p, res->horizon.len);
    }
  }
  if (--d->pending == 0) delta_finish(d);
}

/* The delta of (tenant, actor) over one named source, or every source; the
 * answer (status and JSON body) goes to then(ud, ...), exactly once. */
static void delta_begin(mw_engine *e, const char *tenant, const char *actor, const char *only,
                        void (*then)(void *ud, int status, const char *body, size_t len), void *ud) {
  char err[1024];
  delta_ctx *d = calloc(1, sizeof *d);
  if (!d) {
    static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
    then(ud, 500, oom, sizeof oom - 1);
    return;
  }
  d->e = e;
  d->then = then;
  d->ud = ud;
  snprintf(d->tenant, sizeof d->tenant, "%s", tenant);
  snprintf(d->actor, sizeof d->actor, "%s", actor);
  mw_tenant *t;
  if (get_tenant(e, tenant, &t, err, sizeof err)) {
    delta_fail(d, MW_EINTERNAL, err);
    delta_free(d);
    return;
  }
  size_t n;
  const mw_source *srcs = mw__tenant_sources(t, &n);
  if (only && !mw__tenant_source(t, only)) {
    delta_fail(d, MW_ENOENT, "no such source in the tenant's roster");
    delta_free(d);
    return;
  }
  d->pulls = calloc(n + 1, sizeof *d->pulls);
  if (!d->pulls) {
    delta_fail(d, MW_ENOMEM, "out of memory");
    delta_free(d);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (only && strcmp(srcs[i].id, only)) continue;
    pull *p = &d->pulls[d->n++];
    p->src = srcs[i];
    p->d = d;
  }
  if (d->n == 0) {   /* no roster: nothing to pull */
    delta_finish(d);
    return;
  }
  d->pending = d->n;
  /* start them all; a pull that cannot start is an error entry at once */
  int count = d->n;
  for (int i = 0; i < count; i++) {
    pull *p = &d->pulls[i];
    mw__consolidation_get(e->rd, tenant, actor, p->src.id, &p->prev);
    mw_pull_req q = {.home = e->home, .tenant = tenant, .source_id = p->src.id, .locator = p->src.locator,
                     .horizon = p->prev.len ? p->prev.p : NULL, .deadline_ms = (uint64_t)p->src.deadline_ms,
                     .roots = (const char *const *)e->roots, .nroots = e->nroots};
    int rc = mw__pull_start(e->loop, &q, pulled, p);
    if (rc) {
      mw_pull_res res = {.rc = rc};
      snprintf(res.error, sizeof res.error, "source %s: the pull could not start (%s)", p->src.id, mw_strerror(rc));
      pulled(p, &res);
    }
  }
}

static void delta_to_req(void *ud, int status, const char *body, size_t len) {
  req *r = ud;
  mw_buf b = {0};
  mw__buf_add(&b, body, len);
  answer(r, status, &b);
  mw__buf_free(&b);
}

static void delta_start(mw_engine *e, req *r, const char *tenant, const char *actor, const char *only) {
  delta_begin(e, tenant, actor, only, delta_to_req, r);
}

int mw_delta(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  mw_buf body = {0};
  if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
  session *s = find_session(e, c->tenant, body.p, body.len, r);
  if (!s) return mw__buf_free(&body), 0;
  char source[80] = "";
  int got = opt_string(r, &body, "source", source, sizeof source);
  mw__buf_free(&body);
  if (got < 0) return 0;
  s->last_seen = now_ms();
  delta_start(e, r, s->tenant, s->actor, got ? source : NULL);
  return 0;
}

int mw_actor_delta(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  req *r = new_req(e, c, cb, ud, NULL);
  if (!r) return MW_ENOMEM;
  if (rate_limited(e, r, c)) return 0;
  if (need_operator(r, c)) return 0;
  if (!c->actor || !mw_valid_id(c->actor)) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    return 0;
  }
  char source[80] = "";
  int got = 0;
  if (c->body && c->body_len) {
    mw_buf body = {0};
    if (parse_body(r, c, &body)) return mw__buf_free(&body), 0;
    got = opt_string(r, &body, "source", source, sizeof source);
    mw__buf_free(&body);
    if (got < 0) return 0;
  }
  delta_start(e, r, c->tenant, c->actor, got ? source : NULL);
  return 0;
}

/* ---- metrics ------------------------------------------------------------------------ */

static void metric(mw_buf *b, const char *name, const char *type, const char *help, uint64_t v) {
  char line[512];
  snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, v);
  mw__buf_addstr(b, line);
}

static void histogram(mw_buf *b, const char *name, const char *help, const hist *h) {
  char line[256];
  snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  mw__buf_addstr(b, line);
  for (int i = 0; i < NBUCKETS; i++) {
    snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, BUCKETS_MS[i] / 1000.0, h->b[i]);
    mw__buf_addstr(b, line);
  }
  snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name,
           h->n, name, h->sum / 1000.0, name, h->n);
  mw__buf_addstr(b, line);
}

int mw_engine_metrics(mw_engine *e, mw_buf *b) {
  size_t i = 0, open = 0;
  session *s;
  while ((s = mw__map_next(&e->sessions, &i, NULL)))
    if (s->open) open++;
  metric(b, "mw_sessions_open", "gauge", "Open sessions.", open);
  metric(b, "mw_wakes_total", "counter", "Wakes answered 200.", e->wakes);
  metric(b, "mw_runs_total", "counter", "Runs committed.", e->runs);
  metric(b, "mw_sleeps_total", "counter", "Sleeps answered 200.", e->sleeps);
  metric(b, "mw_sessions_expired_total", "counter", "Sessions slept by expiry.", e->expired);
  metric(b, "mw_commits_total", "counter", "Group commits that succeeded.", e->commits);
  metric(b, "mw_fsyncs_total", "counter", "Group commits attempted (one WAL fsync each).", e->fsyncs);
  metric(b, "mw_commit_failures_total", "counter", "Group commits that failed.", e->commit_failures);
  metric(b, "mw_entries_appended_total", "counter", "Log entries appended.", e->entries_appended);
  metric(b, "mw_snapshot_verification_failures_total", "counter",
         "Snapshots (heads or checkpoints) that failed verification.", e->snapshot_failures);
  metric(b, "mw_offloop_jobs_total", "counter", "Long replays run on the thread pool.", e->offloop);
  metric(b, "mw_cortex_dark_total", "counter", "Wakes whose facts leg was dark (Cortex down).", e->cortex_dark);
  metric(b, "mw_navigations_total", "counter", "Cortex navigations through /v1/navigate.", e->navigations);
  metric(b, "mw_quota_refusals_total", "counter", "Calls refused with 429 quota_exceeded.", e->quota_refusals);
  metric(b, "mw_reloads_total", "counter", "Script reloads that went live.", e->reload_ok);
  metric(b, "mw_reload_failures_total", "counter", "Script reloads refused (the old version kept serving).", e->reload_failed);
  metric(b, "mw_heartbeats", "gauge", "Heartbeat timers running.", e->beats.len);
  metric(b, "mw_heartbeat_ticks_total", "counter", "Heartbeat ticks.", e->beat_ticks);
  metric(b, "mw_heartbeat_ok_total", "counter", "Beats that slept cleanly.", e->beat_ok);
  metric(b, "mw_heartbeat_failures_total", "counter", "Beats that failed.", e->beat_failed);
  metric(b, "mw_heartbeat_skipped_total", "counter", "Ticks skipped (previous beat running, or actor awake).", e->beat_skipped);
  histogram(b, "mw_wake_seconds", "Wake latency.", &e->h_wake);
  histogram(b, "mw_run_seconds", "Run latency.", &e->h_run);
  histogram(b, "mw_sleep_seconds", "Sleep latency.", &e->h_sleep);
  return 0;
}

/* ---- open / close ------------------------------------------------------------------ */

static int restore_session(void *ud, const mw_session_rec *rec) {
  mw_engine *e = ud;
  char err[1024];
  mw_tenant *t;
  if (get_tenant(e, rec->tenant, &t, err, sizeof err)) {
    fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot restore session\",\"session\":\"%s\"}\n", rec->id);
    return 0;
  }
  session *s = calloc(1, sizeof *s);
  if (!s) return 1;
  s->t = t;
  snprintf(s->id, sizeof s->id, "%s", rec->id);
  snprintf(s->tenant, sizeof s->tenant, "%s", rec->tenant);
  snprintf(s->actor, sizeof s->actor, "%s", rec->actor);
  snprintf(s->profile, sizeof s->profile, "%s", rec->profile);
  snprintf(s->trigger, sizeof s->trigger, "%s", rec->trigger);
  snprintf(s->prior, sizeof s->prior, "%s", rec->prior);
  snprintf(s->key, sizeof s->key, "%s/%s", rec->tenant, rec->actor);
  s->committed = rec->committed;
  s->opened_at = rec->opened_at;
  s->last_seen = rec->last_seen;
  s->open = 1;
  s->waiting_tail = &s->waiting;
  if (mw_store_stream(e->rd, rec->tenant, rec->actor, 0, &s->stream)) s->stream = 0;
  if (mw__map_put(&e->sessions, s->id, s) || mw__map_put(&e->awake, s->key, s)) {
    mw__map_del(&e->sessions, s->id);
    session_free(s);
    return 1;
  }
  return 0;
}

/* Tenants that declare heartbeats are loaded at start, so their timers run
 * without waiting for a first request. */
static void start_heartbeat_tenants(mw_engine *e) {
  char dir[1100], path[1400], err[1024];
  snprintf(dir, sizeof dir, "%s/tenants", e->home);
  struct dirent **names;
  int n = scandir(dir, &names, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    struct stat st;
    snprintf(path, sizeof path, "%s/%.255s/heartbeat.lua", dir, names[i]->d_name);
    mw_tenant *t;
    if (mw_valid_id(names[i]->d_name) && stat(path, &st) == 0 && get_tenant(e, names[i]->d_name, &t, err, sizeof err))
      fprintf(stderr, "{\"level\":\"error\",\"msg\":\"tenant with heartbeats failed to load\",\"tenant\":\"%.64s\"}\n",
              names[i]->d_name);
    free(names[i]);
  }
  if (n >= 0) free(names);
}

int mw_engine_open(const mw_engine_opts *o, mw_engine **out, char *err, size_t errlen) {
  *out = NULL;
  mw_engine *e = calloc(1, sizeof *e);
  if (!e) return MW_ENOMEM;
  e->o = *o;
  if (e->o.session_ttl_ms <= 0) e->o.session_ttl_ms = 30 * 60 * 1000;
  if (e->o.checkpoint_every == 0) e->o.checkpoint_every = 100;
  snprintf(e->home, sizeof e->home, "%s", o->home);
  snprintf(e->scripts, sizeof e->scripts, "%s", o->scripts_dir ? o->scripts_dir : MW_SCRIPTS_DIR);
  snprintf(e->skills, sizeof e->skills, "%s", o->skills_dir ? o->skills_dir : MW_SKILLS_DIR);
  e->pending_tail = &e->pending;
  e->batch_tail = &e->batch;
  for (int i = 0; i < o->nroots && e->nroots < 16; i++)
    if (o->roots[i] && (e->roots[e->nroots] = strdup(o->roots[i]))) e->nroots++;
  int rc = mw_store_open(e->home, 0, &e->rd, err, errlen);
  if (!rc) rc = mw_store_open(e->home, 0, &e->wr, err, errlen);
  if (rc) goto fail;
  /* The loop thread must never wait long on a lock held by another process. */
  mw_store_busy_timeout(e->wr, 200);
  if (o->loop) {
    e->loop = o->loop;
  } else {
    if (uv_loop_init(&e->own_loop)) {
      snprintf(err, errlen, "cannot create an event loop");
      rc = MW_EINTERNAL;
      goto fail;
    }
    e->loop = &e->own_loop;
    e->owns_loop = 1;
  }
  uv_check_init(e->loop, &e->kick);
  e->kick.data = e;
  uv_idle_init(e->loop, &e->kick_now);
  e->kick_now.data = e;
  uv_timer_init(e->loop, &e->expiry);
  e->expiry.data = e;
  uint64_t every = (uint64_t)(e->o.session_ttl_ms < 2000 ? e->o.session_ttl_ms / 2 + 1 : 1000);
  uv_timer_start(&e->expiry, expiry_cb, every, every);
  uv_unref((uv_handle_t *)&e->expiry);
  uv_timer_init(e->loop, &e->reload_timer);
  e->reload_timer.data = e;
  watch_add(e, "", e->scripts);
  watch_add(e, "", e->skills);
  rc = mw__session_each_open(e->rd, restore_session, e);
  if (rc) {
    snprintf(err, errlen, "%s", mw_store_errmsg(e->rd));
    goto fail;
  }
  start_heartbeat_tenants(e);
  *out = e;
  return 0;
fail:
  mw_engine_close(e);
  return rc;
}

int mw_engine_idle(const mw_engine *e) {
  return e->inflight == 0 && !e->committing && !e->pending && !e->batch;
}

void mw_engine_stop(mw_engine *e) {
  if (!e || e->stopped) return;
  e->stopped = 1;
  uv_timer_stop(&e->expiry);
  uv_check_stop(&e->kick);
  uv_close((uv_handle_t *)&e->expiry, NULL);
  uv_close((uv_handle_t *)&e->kick, NULL);
  uv_idle_stop(&e->kick_now);
  uv_close((uv_handle_t *)&e->kick_now, NULL);
  uv_close((uv_handle_t *)&e->reload_timer, NULL);
  for (struct watch *w = e->watches, *next; w; w = next) {
    next = w->next;
    uv_close((uv_handle_t *)&w->h, (uv_close_cb)free);
  }
  e->watches = NULL;
  char keys[1024][140];
  int n = 0;
  size_t i = 0;
  const char *k;
  while (n < 1024 && mw__map_next(&e->beats, &i, &k)) snprintf(keys[n++], 140, "%s", k);
  for (int j = 0; j < n; j++) beat_stop(e, keys[j]);
}

void mw_engine_close(mw_engine *e) {
  if (!e) return;
  if (e->loop) {
    mw_engine_stop(e);
    if (e->owns_loop) {
      uv_run(e->loop, UV_RUN_DEFAULT);
      uv_loop_close(e->loop);
    }
  }
  if (e->in_tx) mw_store_rollback(e->wr);
  size_t i = 0;
  session *s;
  /* reserved by a wake that never finished: in `awake` only */
  while ((s = mw__map_next(&e->awake, &i, NULL)))
    if (!s->id[0] || mw__map_get(&e->sessions, s->id) != s) session_free(s);
  i = 0;
  while ((s = mw__map_next(&e->sessions, &i, NULL))) session_free(s);
  mw_tenant *t;
  i = 0;
  while ((t = mw__map_next(&e->tenants, &i, NULL))) mw__tenant_free(t);
  mw__map_free(&e->sessions);
  mw__map_free(&e->awake);
  mw__map_free(&e->tenants);
  tcortex *c;
  i = 0;
  while ((c = mw__map_next(&e->cortexes, &i, NULL))) {
    mw_cortex_close(c->cx);
    free(c);
  }
  mw__map_free(&e->cortexes);
  usage *u;
  i = 0;
  while ((u = mw__map_next(&e->usage, &i, NULL))) free(u);
  mw__map_free(&e->usage);
  reload_status *rs;
  i = 0;
  while ((rs = mw__map_next(&e->reloads, &i, NULL))) free(rs);
  mw__map_free(&e->reloads);
  mw__map_free(&e->reload_due);
  mw__map_free(&e->beats);
  mw_store_close(e->rd);
  mw_store_close(e->wr);
  for (int r = 0; r < e->nroots; r++) free(e->roots[r]);
  free(e);
}

/* ---- the blocking convenience ---------------------------------------------------------- */

typedef struct { int done, status; char *body; size_t len; } sync_box;

static void sync_cb(void *ud, const mw_reply *r) {
  sync_box *b = ud;
  b->status = r->status;
  b->body = malloc(r->body_len + 1);
  if (b->body) {
    memcpy(b->body, r->body, r->body_len);
    b->body[r->body_len] = '\0';
    b->len = r->body_len;
  }
  b->done = 1;
}

int mw_call_sync(mw_engine *e, mw_call_fn fn, const mw_call *c, int *status, char **body, size_t *len) {
  sync_box b = {0};
  int rc = fn(e, c, sync_cb, &b);
  if (rc) return rc;
  /* The call was made outside the loop: one non-blocking turn lets the
   * check phase seal its commit before the loop blocks waiting for it. */
  if (!b.done) uv_run(e->loop, UV_RUN_NOWAIT);
  while (!b.done) uv_run(e->loop, UV_RUN_ONCE);
  *status = b.status;
  *body = b.body;
  *len = b.len;
  return b.body ? 0 : MW_ENOMEM;
}
