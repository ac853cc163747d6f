/* server.c -- `mw serve`: the HTTP routes of the contract over the engine.
 * Authenticates (the tenant comes from the token, never the payload), routes,
 * logs one JSON line per request, drains on SIGTERM.  It calls exactly the
 * engine's public functions (include/mw.h); it holds no state of its own. */
#include "mw.h"
#include "buf.h"
#include "cli.h"
#include "http.h"
#include "json.h"

#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <uv.h>

typedef struct server {
  uv_loop_t loop;
  mw_engine *engine;
  mw_store *auth;              /* token lookups: sees revocations at once */
  mw_http *http;
  uv_signal_t sigterm, sigint, sighup;
  int draining;
  uint64_t by_status[6];       /* 1xx..5xx */
  uint64_t unauthorized;
} server;

typedef struct pending {
  server *srv;
  mw_http_req *req;
  const char *route;
  char tenant[65], role[16], actor[80], skill[80];
} pending;

static void log_line(const mw_http_req *req, const char *route, int status) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double ms = (double)(uv_hrtime() - req->t0_ns) / 1e6;
  fprintf(stderr,
          "{\"ts\":%lld,\"req\":%" PRIu64 ",\"method\":\"%s\",\"route\":\"%s\",\"status\":%d,\"ms\":%.3f}\n",
          (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000, req->id, req->method, route, status, ms);
}

static void count(server *s, int status) {
  int k = status / 100 - 1;
  if (k >= 0 && k < 6) s->by_status[k]++;
}

static void respond(server *s, mw_http_req *req, const char *route, int status, const char *body, size_t len) {
  count(s, status);
  log_line(req, route, status);
  mw__http_respond(req, status, "application/json", body, len);
}

static void respond_error(server *s, mw_http_req *req, const char *route, int code, const char *msg) {
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"error\":{\"code\":\"");
  mw__buf_addstr(&b, mw_err_code(code));
  mw__buf_addstr(&b, "\",\"message\":");
  mw__json_string(&b, msg, strlen(msg));
  mw__buf_addstr(&b, "}}");
  respond(s, req, route, mw_err_http(code), b.p, b.len);
  mw__buf_free(&b);
}

static void on_reply(void *ud, const mw_reply *r) {
  pending *p = ud;
  respond(p->srv, p->req, p->route, r->status, r->body, r->body_len);
  free(p);
}

/* Percent-decodes one path segment into out; -1 if malformed or too long. */
static int segment(const char *p, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '%') {
      /* exactly two hex digits: sscanf's %x would also take a sign or a space */
      static const char hex[] = "0123456789abcdef0123456789ABCDEF";
      const char *hi = i + 2 < n ? memchr(hex, p[i + 1], 32) : NULL, *lo = hi ? memchr(hex, p[i + 2], 32) : NULL;
      if (!hi || !lo || !p[i + 1] || !p[i + 2]) return -1;
      c = (char)(((hi - hex) % 16) << 4 | ((lo - hex) % 16));
      i += 2;
    }
    if (o + 1 >= cap) return -1;
    out[o++] = c;
  }
  out[o] = '\0';
  return (int)o;
}

static void handle(void *ud, mw_http_req *req) {
  server *s = ud;
  const char *path = req->path, *m = req->method;
  int get = !strcmp(m, "GET"), post = !strcmp(m, "POST");

  if (!strcmp(path, "/healthz") && get) {
    static const char live[] = "{\"cortex\":\"live\",\"status\":\"ok\"}";
    static const char dark[] = "{\"cortex\":\"dark\",\"status\":\"ok\"}";
    if (mw_engine_cortex_live(s->engine)) respond(s, req, "/healthz", 200, live, sizeof live - 1);
    else respond(s, req, "/healthz", 200, dark, sizeof dark - 1);
    return;
  }
  if (!strcmp(path, "/metrics") && get) {
    mw_buf b = {0};
    mw_engine_metrics(s->engine, &b);
    mw_http_stats st;
    mw__http_stats(s->http, &st);
    char line[1024];
    snprintf(line, sizeof line,
             "# HELP mw_http_connections_open Open HTTP connections.\n# TYPE mw_http_connections_open gauge\n"
             "mw_http_connections_open %" PRIu64 "\n"
             "# HELP mw_http_connections_rejected_total Connections refused past the limit.\n"
             "# TYPE mw_http_connections_rejected_total counter\nmw_http_connections_rejected_total %" PRIu64 "\n"
             "# HELP mw_http_parse_errors_total Requests refused as malformed HTTP.\n"
             "# TYPE mw_http_parse_errors_total counter\nmw_http_parse_errors_total %" PRIu64 "\n"
             "# HELP mw_http_timeouts_total Connections closed by a timeout.\n"
             "# TYPE mw_http_timeouts_total counter\nmw_http_timeouts_total %" PRIu64 "\n"
             "# HELP mw_http_responses_total Responses by status class.\n# TYPE mw_http_responses_total counter\n",
             st.open, st.rejected, st.parse_errors, st.timeouts);
    mw__buf_addstr(&b, line);
    for (int k = 0; k < 5; k++) {
      snprintf(line, sizeof line, "mw_http_responses_total{class=\"%dxx\"} %" PRIu64 "\n", k + 1, s->by_status[k]);
      mw__buf_addstr(&b, line);
    }
    count(s, 200);
    log_line(req, "/metrics", 200);
    mw__http_respond(req, 200, "text/plain; version=0.0.4", b.p, b.len);
    mw__buf_free(&b);
    return;
  }
  if (strncmp(path, "/v1/", 4) != 0) {
    respond_error(s, req, "(none)", MW_ENOENT, "no such route");
    return;
  }

  /* Route first (so the log names it), then authenticate. */
  mw_call_fn fn = NULL;
  const char *route = "(none)";
  char actor[80] = "", skill[80] = "";
  if (post && !strcmp(path, "/v1/wake")) fn = mw_wake, route = "/v1/wake";
  else if (post && !strcmp(path, "/v1/run")) fn = mw_run, route = "/v1/run";
  else if (post && !strcmp(path, "/v1/sleep")) fn = mw_sleep, route = "/v1/sleep";
  else if (post && !strcmp(path, "/v1/load")) fn = mw_load, route = "/v1/load";
  else if (get && !strcmp(path, "/v1/status")) fn = mw_status, route = "/v1/status";
  else if (post && !strcmp(path, "/v1/navigate")) fn = mw_navigate, route = "/v1/navigate";
  else if (get && !strcmp(path, "/v1/sources")) fn = mw_sources, route = "/v1/sources";
  else if (post && !strcmp(path, "/v1/delta")) fn = mw_delta, route = "/v1/delta";
  else if (!strncmp(path, "/v1/actors/", 11)) {
    const char *a = path + 11, *slash = strchr(a, '/');
    if (slash) {
      /* A segment that does not decode, or decodes to a NUL, is no actor id:
       * the engine answers 400 for it as for any malformed id. */
      int n = segment(a, (size_t)(slash - a), actor, sizeof actor);
      if (n < 0 || (size_t)n != strlen(actor)) snprintf(actor, sizeof actor, "%s", "\x01");
      const char *rest = slash + 1;
      if (get && !strcmp(rest, "log")) fn = mw_actor_log, route = "/v1/actors/:id/log";
      else if (get && !strcmp(rest, "snapshots")) fn = mw_actor_snapshots, route = "/v1/actors/:id/snapshots";
      else if (post && !strcmp(rest, "replay")) fn = mw_actor_replay, route = "/v1/actors/:id/replay";
      else if (post && !strcmp(rest, "direction")) fn = mw_actor_direction, route = "/v1/actors/:id/direction";
      else if (post && !strcmp(rest, "delta")) fn = mw_actor_delta, route = "/v1/actors/:id/delta";
      else if (post && !strncmp(rest, "skills/", 7) && !strchr(rest + 7, '/')) {
        int n = segment(rest + 7, strlen(rest + 7), skill, sizeof skill);
        if (n < 0 || (size_t)n != strlen(skill)) snprintf(skill, sizeof skill, "%s", "\x01");
        fn = mw_actor_skill, route = "/v1/actors/:id/skills/:name";
      }
    }
  }

  const char *auth = req->authorization;
  char tenant[65], role[16];
  if (!auth || strncasecmp(auth, "Bearer ", 7) != 0 ||
      mw_token_lookup(s->auth, auth + 7 + strspn(auth + 7, " "), tenant, role) != 0) {
    s->unauthorized++;
    respond_error(s, req, route, MW_EAUTH, auth ? "unknown or revoked token" : "no bearer token");
    return;
  }
  if (!fn) {
    respond_error(s, req, route, MW_ENOENT, "no such route");
    return;
  }
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    respond_error(s, req, route, MW_ENOMEM, "out of memory");
    return;
  }
  p->srv = s;
  p->req = req;
  p->route = route;
  snprintf(p->tenant, sizeof p->tenant, "%s", tenant);
  snprintf(p->role, sizeof p->role, "%s", role);
  snprintf(p->actor, sizeof p->actor, "%s", actor);
  snprintf(p->skill, sizeof p->skill, "%s", skill);
  mw_call c = {.tenant = p->tenant, .role = p->role,
               .actor = actor[0] || !strncmp(path, "/v1/actors/", 11) ? p->actor : NULL,
               .body = req->body, .body_len = req->body_len, .query = req->query, .t0_ns = req->t0_ns,
               .skill = skill[0] ? p->skill : NULL};
  int rc = fn(s->engine, &c, on_reply, p);
  if (rc) {   /* not taken: nothing will call back */
    free(p);
    respond_error(s, req, route, rc, mw_strerror(rc));
  }
}

/* ---- drain and exit ----------------------------------------------------------- */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void drained(void *ud) {
  server *s = ud;
  s->http = NULL;
  mw_engine_stop(s->engine);
  uv_signal_stop(&s->sigterm);
  uv_signal_stop(&s->sigint);
  uv_signal_stop(&s->sighup);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sighup, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  server *s = h->data;
  (void)signum;
  if (s->draining) return;
  s->draining = 1;
  fprintf(stderr, "{\"level\":\"info\",\"msg\":\"draining\"}\n");
  mw__http_drain(s->http, drained, s);
}

/* SIGHUP reloads every script the way a file change does. */
static void on_hup(uv_signal_t *h, int signum) {
  server *s = h->data;
  (void)signum;
  fprintf(stderr, "{\"level\":\"info\",\"msg\":\"reloading on SIGHUP\"}\n");
  mw_engine_reload(s->engine);
}

/* ---- mw serve ------------------------------------------------------------------ */

static const char SERVE_HELP[] =
  "usage: mw serve --home DIR [--listen HOST:PORT] [options]\n"
  "Runs the host: the HTTP API of the contract on one event loop. Prints\n"
  "`listening on http://HOST:PORT` once it accepts connections; SIGTERM drains\n"
  "in-flight requests and exits 0.\n\n"
  "options (defaults in brackets):\n"
  "  --listen HOST:PORT        [127.0.0.1:7070]; port 0 picks a free one\n"
  "  --session-ttl MS          idle sessions are slept after this [1800000]\n"
  "  --checkpoint-every K      entries between checkpoints [100]\n"
  "  --max-body BYTES          request body limit, 413 past it [1048576]\n"
  "  --max-header BYTES        request line + headers limit, 431 past it [16384]\n"
  "  --idle-timeout MS         keep-alive idle close [60000]\n"
  "  --request-timeout MS      whole-request deadline (slow clients) [10000]\n"
  "  --max-connections N       past it new connections get 503 [1024]\n"
  "  --skill-time MS           wall-clock budget per skill call [2000]\n"
  "  --skill-budget N          instruction budget per skill call [50000000]\n"
  "  --tenant-memory BYTES     memory cap of each tenant's Lua state [67108864]\n"
  "  --scripts DIR --skills DIR  where the shipped Lua lives\n"
  "  --root DIR                a folder the tenants' sources may name (repeatable;\n"
  "                            also MW_ROOTS=DIR:DIR); none: no path sources allowed\n";

static int num_opt(const char *v, int64_t *out) {
  char *end;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || x < 0) return -1;
  *out = x;
  return 0;
}

int mw__serve_main(int argc, char **argv) {
  const char *home = getenv("MW_HOME"), *listen = "127.0.0.1:7070";
  mw_engine_opts eo = {0};
  mw_http_limits lim = {0};
  const char *scripts = getenv("MW_SCRIPTS"), *skills = getenv("MW_SKILLS");
  const char *roots[16];
  int nroots = 0;
  char envroots[4096] = "";
  if (getenv("MW_ROOTS")) {   /* colon-separated, like PATH */
    snprintf(envroots, sizeof envroots, "%s", getenv("MW_ROOTS"));
    for (char *save = NULL, *r = strtok_r(envroots, ":", &save); r && nroots < 16; r = strtok_r(NULL, ":", &save))
      roots[nroots++] = r;
  }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(SERVE_HELP, stdout), 0;
    if (i + 1 >= argc) {
      fprintf(stderr, "mw serve: %s needs a value (see mw serve --help)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    int64_t n = 0;
    int bad = 0;
    if (!strcmp(a, "--home")) home = v;
    else if (!strcmp(a, "--listen")) listen = v;
    else if (!strcmp(a, "--scripts")) scripts = v;
    else if (!strcmp(a, "--skills")) skills = v;
    else if (!strcmp(a, "--root")) {
      if (nroots >= 16) {
        fprintf(stderr, "mw serve: at most 16 roots\n");
        return 2;
      }
      roots[nroots++] = v;
    }
    else if ((bad = num_opt(v, &n)) == 0) {
      if (!strcmp(a, "--session-ttl")) eo.session_ttl_ms = n;
      else if (!strcmp(a, "--checkpoint-every")) eo.checkpoint_every = n;
      else if (!strcmp(a, "--skill-time")) eo.skill_time_ms = n;
      else if (!strcmp(a, "--skill-budget")) eo.skill_budget = n;
      else if (!strcmp(a, "--tenant-memory")) eo.tenant_mem_limit = (size_t)n;
      else if (!strcmp(a, "--max-body")) lim.max_body_bytes = (size_t)n;
      else if (!strcmp(a, "--max-header")) lim.max_header_bytes = (size_t)n;
      else if (!strcmp(a, "--idle-timeout")) lim.idle_timeout_ms = (uint64_t)n;
      else if (!strcmp(a, "--request-timeout")) lim.request_timeout_ms = (uint64_t)n;
      else if (!strcmp(a, "--max-connections")) lim.max_connections = (int)n;
      else bad = 2;
    }
    if (bad) {
      fprintf(stderr, bad == 2 ? "mw serve: unknown option %s (see mw serve --help)\n"
                               : "mw serve: %s needs a number >= 0\n", a);
      return 2;
    }
  }
  if (!home || !*home) {
    fprintf(stderr, "mw serve: no home: pass --home DIR or set MW_HOME\n");
    return 2;
  }
  char host[256];
  const char *colon = strrchr(listen, ':');
  int64_t port;
  if (!colon || (size_t)(colon - listen) >= sizeof host || num_opt(colon + 1, &port) || port > 65535) {
    fprintf(stderr, "mw serve: --listen wants HOST:PORT\n");
    return 2;
  }
  memcpy(host, listen, (size_t)(colon - listen));
  host[colon - listen] = '\0';

  int lock = mw__cli_lock_home(home, "serve");
  if (lock < 0) return 1;
  signal(SIGPIPE, SIG_IGN);
  /* Handing freed memory back to the kernel after every request (and the TLB
   * shootdowns it causes) cost a quarter of the host's CPU: keep it. */
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  static server s;
  memset(&s, 0, sizeof s);
  char err[1024];
  if (uv_loop_init(&s.loop)) {
    fprintf(stderr, "mw serve: cannot create the event loop\n");
    return 1;
  }
  if (mw_store_open(home, 0, &s.auth, err, sizeof err)) {
    fprintf(stderr, "mw serve: %s\n", err);
    uv_loop_close(&s.loop);
    return 1;
  }
  eo.home = home;
  eo.loop = &s.loop;
  eo.scripts_dir = scripts && *scripts ? scripts : NULL;
  eo.skills_dir = skills && *skills ? skills : NULL;
  eo.roots = roots;
  eo.nroots = nroots;
  if (mw_engine_open(&eo, &s.engine, err, sizeof err)) {
    fprintf(stderr, "mw serve: %s\n", err);
    mw_store_close(s.auth);
    uv_run(&s.loop, UV_RUN_NOWAIT);
    uv_loop_close(&s.loop);
    return 1;
  }
  s.http = mw__http_start(&s.loop, host, (int)port, &lim, handle, &s, err, sizeof err);
  if (!s.http) {
    fprintf(stderr, "mw serve: %s\n", err);
    mw_engine_stop(s.engine);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    mw_engine_close(s.engine);
    mw_store_close(s.auth);
    uv_loop_close(&s.loop);
    return 1;
  }
  uv_signal_init(&s.loop, &s.sigterm);
  uv_signal_init(&s.loop, &s.sigint);
  s.sigterm.data = s.sigint.data = &s;
  uv_signal_start(&s.sigterm, on_signal, SIGTERM);
  uv_signal_start(&s.sigint, on_signal, SIGINT);
  uv_signal_init(&s.loop, &s.sighup);
  s.sighup.data = &s;
  uv_signal_start(&s.sighup, on_hup, SIGHUP);
  printf("listening on http://%s:%d\n", host, mw__http_port(s.http));
  fflush(stdout);

  uv_run(&s.loop, UV_RUN_DEFAULT);
  /* Anything still open (there should be nothing) is closed before exit. */
  uv_walk(&s.loop, close_walk, NULL);
  uv_run(&s.loop, UV_RUN_DEFAULT);
  mw_engine_close(s.engine);
  mw_store_close(s.auth);
  uv_loop_close(&s.loop);
  fprintf(stderr, "{\"level\":\"info\",\"msg\":\"stopped\"}\n");
  return 0;
}
