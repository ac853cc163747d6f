/* http_fuzz.c -- libFuzzer target for the HTTP request path up to the engine:
 * runtime/http.c (http_parser framing, limits, pipelining, keep-alive and
 * close), runtime/server.c's routing (handle(): method and path routing,
 * percent-decoding of ids, Authorization parsing and the token lookup), and
 * what the engine does with a body before any real work: mw__json_canon and
 * the field reads of engine.c's parse_body / opt_string / find_session
 * (mw__jfield, mw__jstring, mw__jint).  Built and run by fuzz/run.sh.
 *
 * server.c is compiled into this file (#include below) so that the routing
 * exercised is the real handle(), not a copy; the engine's public calls it
 * makes (mw_wake, mw_run, ...) are replaced here by "fronts" that mirror the
 * engine's request parsing and then answer, instead of waking anything.
 *
 * One server runs on one loop for the whole process, on 127.0.0.1, with
 * small limits so that 413 / 431 / pipeline back-pressure are reachable with
 * small inputs.  Per input a client connection on the same loop writes the
 * input, then half-closes (or closes, or resets), reads whatever comes back,
 * and the loop runs until the client has seen the end and the server holds no
 * connection and no unanswered request.  ASan/LSan catch memory errors and
 * leaks; a watchdog aborts if the server neither answers nor closes; every
 * application/json answer must be valid JSON; every value span mw__jfield
 * returns must be canonical JSON by itself; and when the input holds a
 * complete request or a syntax error (by an independent http_parser pass),
 * a half-closing client must get a final answer before the close.
 *
 * Input: the bytes sent, except that a first byte 0x00-0x07 is a mode and is
 * not sent: bit 0 answers from a later loop iteration (the engine's normal
 * way) instead of at once, bit 1 closes the client after writing instead of
 * half-closing, bit 2 resets it (RST) instead.
 *
 * Tokens: "Bearer mw_fuzz_agent" and "Bearer mw_fuzz_operator" are valid.
 * MW_FUZZ_VERBOSE=1 prints what the client received for each input. */
#include <stdio.h>

/* server.c logs one line per request to stderr: send those to /dev/null
 * (sanitizer and libFuzzer reports do not go through stdio's stderr). */
static FILE *fuzz_log_sink;
/* Every answer server.c writes goes through a check first (below). */
#define mw__http_respond fuzz_http_respond
#undef stderr
#define stderr fuzz_log_sink
#include "../runtime/server.c"
#undef stderr
#undef mw__http_respond

#include "chain.h"
#include "jfield.h"
#include "store_int.h"

#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void mw__http_respond(mw_http_req *req, int status, const char *ctype, const char *body, size_t len);

static void fatal(const char *why, const char *detail) {
  fprintf(stdout, "\nhttp_fuzz: %s%s%s\n", why, detail ? ": " : "", detail ? detail : "");
  fflush(stdout);
  abort();
}

static void show_and_abort(const char *why, const char *p, size_t n) {
  fprintf(stdout, "\nhttp_fuzz: %s (%zu bytes): ", why, n);
  for (size_t i = 0; i < n && i < 600; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') fputc(c, stdout);
    else fprintf(stdout, "\\x%02x", c);
  }
  fputc('\n', stdout);
  fflush(stdout);
  abort();
}

/* Canonical JSON is its own canonical form; anything else here is a bug. */
static void must_be_canonical(const char *what, const char *v, size_t vn) {
  mw_buf b = {0};
  char err[256];
  if (mw__json_canon(v, vn, &b, err, sizeof err) || b.len != vn || memcmp(b.p, v, vn)) {
    fprintf(stdout, "\nhttp_fuzz: %s is not canonical JSON (%s)\n", what, err);
    show_and_abort("span", v, vn);
  }
  mw__buf_free(&b);
}

void fuzz_http_respond(mw_http_req *req, int status, const char *ctype, const char *body, size_t len) {
  if (!ctype || !strcmp(ctype, "application/json")) {
    mw_buf b = {0};
    char err[256];
    if (mw__json_canon(body ? body : "", body ? len : 0, &b, err, sizeof err)) {
      fprintf(stdout, "\nhttp_fuzz: status %d answer is not JSON: %s\n", status, err);
      show_and_abort("answer", body ? body : "", body ? len : 0);
    }
    mw__buf_free(&b);
  }
  mw__http_respond(req, status, ctype, body, len);
}

/* ---- the engine's side, up to the engine call ---------------------------- */

static int deferred;  /* answer from a later loop iteration (mode bit 0) */
static uv_idle_t idler;

typedef struct answer_q {
  struct answer_q *next;
  mw_reply_cb cb;
  void *ud;
  int status;
  mw_buf body;
} answer_q;
static answer_q *q_head, **q_tail = &q_head;

typedef struct ereq { /* engine.c's req, the part that matters here */
  mw_reply_cb cb;
  void *ud;
} ereq;

static void deliver(answer_q *a) {
  mw_reply rep = {a->status, a->body.p ? a->body.p : "{}", a->body.p ? a->body.len : 2};
  a->cb(a->ud, &rep);
  mw__buf_free(&a->body);
  free(a);
}

static void on_idle(uv_idle_t *h) {
  answer_q *a = q_head; /* one per loop iteration, so answers interleave with I/O */
  if (a) {
    q_head = a->next;
    if (!q_head) q_tail = &q_head;
    deliver(a);
  }
  if (!q_head) uv_idle_stop(h);
}

/* As engine.c's answer(): takes the body. */
static void answer(ereq *r, int status, mw_buf *body) {
  answer_q *a = calloc(1, sizeof *a);
  if (!a) fatal("out of memory", NULL);
  a->cb = r->cb, a->ud = r->ud, a->status = status, a->body = *body;
  memset(body, 0, sizeof *body);
  if (!deferred) {
    deliver(a);
    return;
  }
  *q_tail = a;
  q_tail = &a->next;
  uv_idle_start(&idler, on_idle);
}

/* engine.c's answer_error, as it is. */
static void answer_error(ereq *r, int code, const char *message, const char *extra) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"error\":{\"code\":");
  mw__json_string(&b, mw_err_code(code), strlen(mw_err_code(code)));
  mw__buf_addstr(&b, ",\"message\":");
  const char *m = message && *message ? message : mw_strerror(code);
  if (mw__json_string(&b, m, strlen(m))) mw__buf_addstr(&b, "\"(message is not UTF-8)\"");
  if (extra) mw__buf_addstr(&b, extra);
  mw__buf_addstr(&b, "}}");
  answer(r, mw_err_http(code), &b);
}

/* mw__jfield with its span checked. */
static int jfield(const char *s, size_t n, const char *key, const char **v, size_t *vn) {
  int rc = mw__jfield(s, n, key, v, vn);
  if (rc == 0) must_be_canonical(key, *v, *vn);
  return rc;
}

/* engine.c's parse_body, as it is. */
static int parse_body(ereq *r, const mw_call *c, mw_buf *out) {
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
  if (jfield(out->p, out->len, "tenant_id", &v, &vn) == 0) {
    answer_error(r, MW_ETENANT, "the tenant comes from the token, never from the payload", NULL);
    return -1;
  }
  return 0;
}

/* engine.c's opt_string, as it is. */
static int opt_string(ereq *r, const mw_buf *b, const char *key, char *out, size_t cap) {
  const char *v;
  size_t vn;
  if (jfield(b->p, b->len, key, &v, &vn) || (vn == 4 && !memcmp(v, "null", 4))) return 0;
  if (mw__jstring(v, vn, out, cap) < 0) {
    char m[128];
    snprintf(m, sizeof m, "%s must be a string of at most %zu bytes", key, cap - 1);
    answer_error(r, MW_EINVAL, m, NULL);
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

/* engine.c's find_session up to the session table: "s_fuzz" is open. */
static int find_session(ereq *r, const char *body, size_t n) {
  const char *v;
  size_t vn;
  char id[64];
  if (jfield(body, n, "session_id", &v, &vn) || mw__jstring(v, vn, id, sizeof id) < 0) {
    answer_error(r, MW_EINVAL, "session_id is required and must be a string", NULL);
    return -1;
  }
  if (strcmp(id, "s_fuzz") != 0) {
    answer_error(r, MW_ESESSION, "no such session", NULL);
    return -1;
  }
  return 0;
}

static int need_operator(ereq *r, const mw_call *c) {
  if (c->role && strcmp(c->role, "operator") == 0) return 0;
  answer_error(r, MW_EFORBID, "this route needs an operator token", NULL);
  return -1;
}

static int valid_actor(ereq *r, const mw_call *c) {
  if (c->actor && mw_valid_id(c->actor)) return 0;
  answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
  return -1;
}

/* engine.c's query_int, as it is. */
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

/* The log entry bodies the engine assembles from request spans and appends
 * with mw_append.canonical = 1 (no second canonicalisation): they must be
 * canonical as built.  Mirrors engine.c's run / handover entries. */
static void check_run_entry(const char *input, size_t input_len, const char *skill) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"input\":");
  mw__buf_add(&b, input, input_len);
  mw__buf_addstr(&b, ",\"skill\":");
  mw__json_string(&b, skill, strlen(skill));
  mw__buf_addc(&b, '}');
  must_be_canonical("run entry", b.p, b.len);
  mw__buf_free(&b);
}

static void check_handover_entry(const char *handover, size_t hlen) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"handover\":");
  if (handover) mw__buf_add(&b, handover, hlen);
  else mw__buf_addstr(&b, "null");
  mw__buf_addstr(&b, ",\"reason\":");
  mw__json_string(&b, "sleep", 5);
  mw__buf_addc(&b, '}');
  must_be_canonical("handover entry", b.p, b.len);
  mw__buf_free(&b);
}

/* The answer of a call that got through: what was read, as JSON. */
static void ok_with(ereq *r, const char *key, const char *raw, size_t rawn, const char *s1, const char *s2) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"");
  mw__buf_addstr(&b, key);
  mw__buf_addstr(&b, "\":");
  if (raw) mw__buf_add(&b, raw, rawn);
  else mw__buf_addstr(&b, "null");
  mw__buf_addstr(&b, ",\"s1\":");
  if (!s1 || mw__json_string(&b, s1, strlen(s1))) mw__buf_addstr(&b, "null");
  mw__buf_addstr(&b, ",\"s2\":");
  if (!s2 || mw__json_string(&b, s2, strlen(s2))) mw__buf_addstr(&b, "null");
  mw__buf_addc(&b, '}');
  answer(r, 200, &b);
}

/* A call the engine would not take (handle() answers it itself). */
static int not_taken(const mw_call *c) {
  return c->query && strstr(c->query, "fuzz_not_taken") ? MW_EUNAVAIL : 0;
}

#define FRONT(name) int name(mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud)
#define BEGIN                         \
  (void)e;                            \
  if (not_taken(c)) return MW_EUNAVAIL; \
  ereq rq = {cb, ud}, *r = &rq;       \
  mw_buf body = {0};                  \
  (void)body

static int wake_like(ereq *r, const mw_call *c, mw_buf *body) {
  char actor[80] = "", profile[32] = "builder", hint[2048], from[64];
  if (parse_body(r, c, body)) return 0;
  int got = opt_string(r, body, "actor_id", actor, sizeof actor);
  if (got == 0 || (got > 0 && !mw_valid_id(actor))) {
    answer_error(r, MW_EINVAL, "actor_id must be 1-64 of A-Z a-z 0-9 _ . - (not . or ..)", NULL);
    got = -1;
  }
  if (got >= 0 && (got = opt_string(r, body, "profile", profile, sizeof profile)) >= 0 &&
      strcmp(profile, "builder") && strcmp(profile, "companion") && strcmp(profile, "agent")) {
    answer_error(r, MW_EINVAL, "profile must be builder, companion or agent", NULL);
    got = -1;
  }
  if (got >= 0) got = opt_string(r, body, "context_hint", hint, 2001);
  if (got >= 0) got = opt_string(r, body, "from_snapshot", from, sizeof from);
  if (got >= 0) ok_with(r, "session_id", "\"s_fuzz\"", 8, actor, profile);
  return 0;
}

FRONT(mw_wake) {
  BEGIN;
  wake_like(r, c, &body);
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_load) {
  BEGIN;
  if (!c->role || strcmp(c->role, "operator") != 0) answer_error(r, MW_EFORBID, "load needs an operator token", NULL);
  else wake_like(r, c, &body);
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_run) {
  BEGIN;
  char skill[80] = "";
  const char *v, *input = "null";
  size_t vn, input_len = 4;
  if (parse_body(r, c, &body) || find_session(r, body.p, body.len)) goto out;
  int got = opt_string(r, &body, "skill", skill, sizeof skill);
  if (got < 0) goto out;
  if (got == 0) snprintf(skill, sizeof skill, "main");
  if (!mw_valid_id(skill)) {
    answer_error(r, MW_EINVAL, "skill must be a skill name", NULL);
    goto out;
  }
  if (jfield(body.p, body.len, "input", &v, &vn) == 0) input = v, input_len = vn;
  check_run_entry(input, input_len, skill);
  ok_with(r, "result", input, input_len, skill, NULL);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_sleep) {
  BEGIN;
  const char *v = NULL;
  size_t vn = 0;
  if (parse_body(r, c, &body) || find_session(r, body.p, body.len)) goto out;
  jfield(body.p, body.len, "handover", &v, &vn);
  check_handover_entry(v, vn);
  ok_with(r, "handover", v, vn, NULL, NULL);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_navigate) {
  BEGIN;
  char hint[2001] = "", from[129] = "", to[129] = "";
  const char *v;
  size_t vn;
  int64_t n;
  if (parse_body(r, c, &body) || find_session(r, body.p, body.len)) goto out;
  int got = opt_string(r, &body, "hint", hint, sizeof hint);
  if (got >= 0) got = opt_string(r, &body, "from", from, sizeof from);
  if (got >= 0) got = opt_string(r, &body, "to", to, sizeof to);
  if (got >= 0 && jfield(body.p, body.len, "depth", &v, &vn) == 0 && (mw__jint(v, vn, &n) || n < 1 || n > 4))
    got = -1, answer_error(r, MW_EINVAL, "depth must be an integer 1-4", NULL);
  if (got >= 0 && jfield(body.p, body.len, "limit", &v, &vn) == 0 && (mw__jint(v, vn, &n) || n < 1 || n > 500))
    got = -1, answer_error(r, MW_EINVAL, "limit must be an integer 1-500", NULL);
  if (got >= 0) ok_with(r, "edges", "[]", 2, from, to);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_status) {
  BEGIN;
  if (!need_operator(r, c)) ok_with(r, "sessions", "[]", 2, c->tenant, NULL);
  return 0;
}

FRONT(mw_sources) {
  BEGIN;
  if (!need_operator(r, c)) ok_with(r, "sources", "[]", 2, c->tenant, NULL);
  return 0;
}

FRONT(mw_actor_log) {
  BEGIN;
  int bad = 0;
  if (need_operator(r, c) || valid_actor(r, c)) return 0;
  int64_t from = query_int(c->query, "from", 1, &bad), limit = query_int(c->query, "limit", 100, &bad);
  if (bad) answer_error(r, MW_EINVAL, "from and limit must be integers >= 0", NULL);
  else if (from > 1000000 || limit > 1000) answer_error(r, MW_ENOENT, "no such actor", NULL);
  else ok_with(r, "entries", "[]", 2, c->actor, NULL);
  return 0;
}

FRONT(mw_actor_snapshots) {
  BEGIN;
  if (need_operator(r, c) || valid_actor(r, c)) return 0;
  ok_with(r, "snapshots", "[]", 2, c->actor, NULL);
  return 0;
}

FRONT(mw_actor_replay) {
  BEGIN;
  const char *v;
  size_t vn;
  int64_t to;
  if (need_operator(r, c) || parse_body(r, c, &body)) goto out;
  if (jfield(body.p, body.len, "to", &v, &vn) || mw__jint(v, vn, &to) || to < 0)
    answer_error(r, MW_EINVAL, "to must be a cursor (an integer >= 0)", NULL);
  else if (!valid_actor(r, c))
    ok_with(r, "state", "{}", 2, c->actor, NULL);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_actor_direction) {
  BEGIN;
  const char *v;
  size_t vn;
  if (need_operator(r, c) || valid_actor(r, c) || parse_body(r, c, &body)) goto out;
  if (jfield(body.p, body.len, "direction", &v, &vn)) {
    answer_error(r, MW_EINVAL, "direction is required", NULL);
    goto out;
  }
  /* the entry body the engine appends (canonical = 1) */
  mw_buf entry = {0};
  mw__buf_addstr(&entry, "{\"by\":\"operator\",\"direction\":");
  mw__buf_add(&entry, v, vn);
  mw__buf_addc(&entry, '}');
  must_be_canonical("direction entry", entry.p, entry.len);
  mw__buf_free(&entry);
  ok_with(r, "cursor", "1", 1, c->actor, NULL);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_actor_skill) {
  BEGIN;
  char profile[32] = "agent";
  const char *v, *input = NULL;
  size_t vn, input_len = 0;
  if (need_operator(r, c) || valid_actor(r, c)) return 0;
  if (!c->skill || !mw_valid_id(c->skill)) {
    answer_error(r, MW_ENOENT, "no such skill", NULL);
    return 0;
  }
  if (c->body && c->body_len) {
    if (parse_body(r, c, &body)) goto out;
    if (!jfield(body.p, body.len, "input", &v, &vn)) input = v, input_len = vn;
    if (opt_string(r, &body, "profile", profile, sizeof profile) < 0) goto out;
  }
  ok_with(r, "result", input, input_len, c->skill, profile);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_delta) {
  BEGIN;
  char source[80] = "";
  if (parse_body(r, c, &body) || find_session(r, body.p, body.len)) goto out;
  int got = opt_string(r, &body, "source", source, sizeof source);
  if (got >= 0) ok_with(r, "sources", "[]", 2, got ? source : NULL, NULL);
out:
  mw__buf_free(&body);
  return 0;
}

FRONT(mw_actor_delta) {
  BEGIN;
  char source[80] = "";
  int got = 0;
  if (need_operator(r, c) || valid_actor(r, c)) return 0;
  if (c->body && c->body_len) {
    if (parse_body(r, c, &body)) goto out;
    if ((got = opt_string(r, &body, "source", source, sizeof source)) < 0) goto out;
  }
  ok_with(r, "sources", "[]", 2, got ? source : NULL, c->actor);
out:
  mw__buf_free(&body);
  return 0;
}

/* For an engine call server.c routes to that has no front above yet: run.sh
 * generates a weak definition of every mw_call_fn-shaped function declared in
 * include/mw.h (build/fuzz/engine_fronts.c) that lands here, so that a new
 * route does not break the fuzz build.  It does what every body-taking call
 * does first: parse_body (when there is a body). */
int fuzz_generic_front(const char *name, mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud);
int fuzz_generic_front(const char *name, mw_engine *e, const mw_call *c, mw_reply_cb cb, void *ud) {
  BEGIN;
  if (c->body && c->body_len && parse_body(r, c, &body)) goto out;
  ok_with(r, "call", "null", 4, name, c->tenant);
out:
  mw__buf_free(&body);
  return 0;
}

/* The rest of the engine's API that server.c names: not reached here. */
int mw_engine_cortex_live(mw_engine *e) { return e == NULL; }
int mw_engine_metrics(mw_engine *e, struct mw_buf *out) {
  (void)e;
  return mw__buf_addstr(out, "# engine metrics\n");
}
int mw_engine_open(const mw_engine_opts *o, mw_engine **out, char *err, size_t errlen) {
  (void)o;
  *out = NULL;
  snprintf(err, errlen, "no engine in the fuzzer");
  return MW_EINTERNAL;
}
void mw_engine_close(mw_engine *e) { (void)e; }
void mw_engine_stop(mw_engine *e) { (void)e; }
void mw_engine_reload(mw_engine *e) { (void)e; }
int mw__cli_lock_home(const char *home, const char *cmd) {
  (void)home, (void)cmd;
  return -1;
}

/* ---- the process-wide server and the per-input client --------------------- */

static server srv; /* server.c's own struct: handle() takes it as ud */
static struct sockaddr_in addr;
static char home[512];
static uv_timer_t watchdog;
static int verbose;

static struct client {
  uv_tcp_t tcp;
  uv_connect_t cr;
  uv_write_t wr;
  uv_shutdown_t sd;
  uv_buf_t buf;
  int mode, written, ended, closed;
  size_t got;
  char first[64];
  char rbuf[65536];
} cl;

static void cleanup(void) {
  char p[700];
  static const char *const sfx[] = {"/mw.db", "/mw.db-wal", "/mw.db-shm"};
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    snprintf(p, sizeof p, "%s%s", home, sfx[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/tenants/t", home);
  rmdir(p);
  snprintf(p, sizeof p, "%s/tenants", home);
  rmdir(p);
  rmdir(home);
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  mw_http_stats st;
  mw__http_stats(srv.http, &st);
  fprintf(stdout,
          "\nhttp_fuzz: the server neither answered nor closed within 5 s"
          " (client: written %d ended %d closed %d got %zu; server open %llu)\n",
          cl.written, cl.ended, cl.closed, cl.got, (unsigned long long)st.open);
  fflush(stdout);
  abort();
}

static void c_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  (void)h, (void)sz;
  *b = uv_buf_init(cl.rbuf, sizeof cl.rbuf);
}

static void c_closed(uv_handle_t *h) {
  (void)h;
  cl.closed = 1;
}

static void c_close(void) {
  if (!uv_is_closing((uv_handle_t *)&cl.tcp)) uv_close((uv_handle_t *)&cl.tcp, c_closed);
}

static void c_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  (void)s;
  if (n > 0) {
    if (verbose) fwrite(b->base, 1, (size_t)n, stdout);
    if (cl.got < sizeof cl.first) {
      size_t k = sizeof cl.first - cl.got;
      if (k > (size_t)n) k = (size_t)n;
      memcpy(cl.first + cl.got, b->base, k);
    }
    cl.got += (size_t)n;
    return;
  }
  if (n < 0) c_close(); /* the server's end (EOF) or a reset */
}

static void c_written(uv_write_t *w, int status) {
  (void)w, (void)status; /* a failed write: the server closed early, fine */
  cl.written = 1;
}

static void c_connected(uv_connect_t *cr, int status) {
  (void)cr;
  if (status < 0) fatal("cannot connect to the server", uv_strerror(status));
  if (uv_read_start((uv_stream_t *)&cl.tcp, c_alloc, c_read)) fatal("uv_read_start", NULL);
  if (!cl.buf.len) {
    cl.written = 1;
    return;
  }
  if (uv_write(&cl.wr, (uv_stream_t *)&cl.tcp, &cl.buf, 1, c_written)) cl.written = 1;
}

static void c_shut(uv_shutdown_t *sd, int status) {
  (void)sd, (void)status;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char err[512];
  const char *tmp = getenv("MW_FUZZ_TMP");
  struct stat st;
  verbose = getenv("MW_FUZZ_VERBOSE") && *getenv("MW_FUZZ_VERBOSE") == '1';
  fuzz_log_sink = fopen("/dev/null", "w");
  if (!fuzz_log_sink) fatal("cannot open /dev/null", NULL);
  if (!tmp || !*tmp) tmp = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(home, sizeof home, "%s/mw-http-fuzz-XXXXXX", tmp);
  if (!mkdtemp(home)) fatal("mkdtemp", strerror(errno));
  atexit(cleanup);
  if (uv_loop_init(&srv.loop)) fatal("uv_loop_init", NULL);
  if (mw_store_open(home, MW_STORE_CREATE, &srv.auth, err, sizeof err)) fatal("mw_store_open", err);
  /* Two known tokens, stored as the store stores them (SHA-256 of the text). */
  static const char *const tokens[2][2] = {{"mw_fuzz_agent", "agent"}, {"mw_fuzz_operator", "operator"}};
  for (int i = 0; i < 2; i++) {
    unsigned char h[32];
    sqlite3_stmt *q;
    mw__sha256(tokens[i][0], strlen(tokens[i][0]), h);
    if (mw_store_tenant(srv.auth, "t", 1)) fatal("mw_store_tenant", mw_store_errmsg(srv.auth));
    if (sqlite3_prepare_v2(mw__store_db(srv.auth),
                           "INSERT INTO tokens(hash, tenant, role, created_at) VALUES(?1, 't', ?2, 0)", -1, &q, NULL))
      fatal("prepare", NULL);
    sqlite3_bind_blob(q, 1, h, 32, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, tokens[i][1], -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) fatal("insert token", NULL);
    sqlite3_finalize(q);
  }
  mw_http_limits lim = {
      .max_header_bytes = 2048,
      .max_body_bytes = 4096,
      .idle_timeout_ms = 2000,
      .request_timeout_ms = 2000,
      .max_connections = 8,
      .max_pipeline = 4,
  };
  srv.http = mw__http_start(&srv.loop, "127.0.0.1", 0, &lim, handle, &srv, err, sizeof err);
  if (!srv.http) fatal("mw__http_start", err);
  uv_ip4_addr("127.0.0.1", mw__http_port(srv.http), &addr);
  uv_idle_init(&srv.loop, &idler);
  uv_timer_init(&srv.loop, &watchdog);
  return 0;
}

static int count_complete(http_parser *p) {
  (*(int *)p->data)++;
  return 0;
}

/* 1 when a server must answer s[0..n): a request in it is complete, or it
 * breaks the syntax before one is (an error answer is owed then). */
static int owes_answer(const char *s, size_t n) {
  static const http_parser_settings hs = {.on_message_complete = count_complete};
  http_parser hp;
  int complete = 0;
  if (!n) return 0;
  http_parser_init(&hp, HTTP_REQUEST);
  hp.data = &complete;
  http_parser_execute(&hp, &hs, s, n);
  return complete > 0 || HTTP_PARSER_ERRNO(&hp) != HPE_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mw_http_stats st0, st;
  memset(&cl, 0, sizeof cl);
  if (size && data[0] < 0x08) {
    cl.mode = data[0];
    data++, size--;
  }
  deferred = cl.mode & 1;
  cl.buf = uv_buf_init((char *)data, (unsigned)size);
  mw__http_stats(srv.http, &st0);
  if (uv_tcp_init(&srv.loop, &cl.tcp)) fatal("uv_tcp_init", NULL);
  if (uv_tcp_connect(&cl.cr, &cl.tcp, (const struct sockaddr *)&addr, c_connected)) fatal("uv_tcp_connect", NULL);
  uv_timer_start(&watchdog, on_watchdog, 5000, 0);
  for (;;) {
    mw__http_stats(srv.http, &st);
    int accepted = st.accepted + st.rejected > st0.accepted + st0.rejected;
    if (cl.written && !cl.ended) {
      if (!(cl.mode & 6)) { /* half-close: no more requests, answers still wanted */
        if (uv_shutdown(&cl.sd, (uv_stream_t *)&cl.tcp, c_shut)) c_close();
        cl.ended = 1;
      } else if (accepted) { /* close or reset, once the server has the connection */
        if (cl.mode & 4) {
          if (uv_tcp_close_reset(&cl.tcp, c_closed)) c_close();
        } else {
          c_close();
        }
        cl.ended = 1;
      }
    }
    if (cl.closed && accepted && st.open == 0 && !q_head) break;
    uv_run(&srv.loop, UV_RUN_ONCE);
  }
  uv_timer_stop(&watchdog);
  if (verbose) printf("\n-- %zu bytes received, mode %d\n", cl.got, cl.mode);
  if (cl.got && memcmp(cl.first, "HTTP/1.1 ", cl.got < 9 ? cl.got : 9))
    show_and_abort("the answer does not start with a status line", cl.first, cl.got < 16 ? cl.got : 16);
  /* A half-closing client still wants its answers: one is owed when the
   * input holds a complete request or a syntax error.  A 100 Continue alone
   * is not an answer. */
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  size_t interim = cl.got >= sizeof cont - 1 && !memcmp(cl.first, cont, sizeof cont - 1) ? sizeof cont - 1 : 0;
  if (!(cl.mode & 6) && cl.got <= interim && owes_answer((const char *)data, size))
    show_and_abort("the server closed without answering", (const char *)data, size);
  return 0;
}
