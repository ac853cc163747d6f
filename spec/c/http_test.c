/* http_test.c -- checks the HTTP/1.1 layer (runtime/http.c) from the outside:
 * a server in its own uv loop on the main thread, a client with plain
 * blocking sockets on a second thread.  Prints TAP-style lines; exits 0 only
 * if every case passes.  Every case also checks that the server is left with
 * no connection open but the one asking. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the server side (loop thread) --------------------------------------- */

static uv_loop_t loop;
static mw_http *srv, *lim_srv; /* NULL once drained */
static int port, lim_port;
static int srv_done, lim_done, answers;
static int drain_answered, drain_answered_before_done;
static uv_async_t stop_async;

typedef struct sb {
  char *p;
  size_t len, cap;
} sb;

static void sb_add(sb *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_str(sb *b, const char *s) {
  sb_add(b, s, strlen(s));
}

static void sb_json(sb *b, const char *s, size_t n) {
  char esc[8];
  size_t i;
  sb_add(b, "\"", 1);
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') {
      esc[0] = '\\';
      esc[1] = (char)ch;
      sb_add(b, esc, 2);
    } else if (ch < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", ch);
      sb_add(b, esc, 6);
    } else {
      sb_add(b, s + i, 1);
    }
  }
  sb_add(b, "\"", 1);
}

static void echo(mw_http_req *req) {
  sb b = {0};
  char num[64];
  sb_str(&b, "{\"method\":");
  sb_json(&b, req->method, strlen(req->method));
  sb_str(&b, ",\"path\":");
  sb_json(&b, req->path, strlen(req->path));
  sb_str(&b, ",\"query\":");
  sb_json(&b, req->query, strlen(req->query));
  sb_str(&b, ",\"authorization\":");
  if (req->authorization) sb_json(&b, req->authorization, strlen(req->authorization));
  else sb_str(&b, "null");
  sb_str(&b, ",\"body\":");
  sb_json(&b, req->body, req->body_len);
  snprintf(num, sizeof num, ",\"n\":%d,\"id\":%llu}", ++answers, (unsigned long long)req->id);
  sb_str(&b, num);
  mw__http_respond(req, 200, "application/json", b.p, b.len);
  free(b.p);
}

typedef struct slow {
  uv_timer_t t;
  mw_http_req *req;
  int drain;
} slow;

static void slow_closed(uv_handle_t *h) {
  free(h->data);
}

static void slow_fire(uv_timer_t *t) {
  slow *w = t->data;
  if (w->drain) drain_answered = 1;
  echo(w->req);
  uv_close((uv_handle_t *)&w->t, slow_closed);
}

static void on_drained(void *ud) {
  mw_http **sp = ud;
  if (sp == &srv) {
    srv_done++;
    drain_answered_before_done = drain_answered;
  } else {
    lim_done++;
  }
  *sp = NULL;
}

/* "/stats" answers the server's figures; "/slow" answers after 50 ms (and
 * with ?drain=1 starts a drain first); anything else is echoed at once. */
static void handler(void *ud, mw_http_req *req) {
  mw_http **sp = ud;
  if (!strcmp(req->path, "/stats")) {
    mw_http_stats st;
    char body[256];
    int n;
    mw__http_stats(*sp, &st);
    n = snprintf(body, sizeof body,
                 "{\"open\":%llu,\"accepted\":%llu,\"rejected\":%llu,\"requests\":%llu,"
                 "\"parse_errors\":%llu,\"timeouts\":%llu}",
                 (unsigned long long)st.open, (unsigned long long)st.accepted, (unsigned long long)st.rejected,
                 (unsigned long long)st.requests, (unsigned long long)st.parse_errors,
                 (unsigned long long)st.timeouts);
    mw__http_respond(req, 200, "application/json", body, (size_t)n);
  } else if (!strcmp(req->path, "/slow")) {
    slow *w = calloc(1, sizeof *w);
    if (!w) abort();
    w->req = req;
    w->drain = strstr(req->query, "drain=1") != NULL;
    w->t.data = w;
    uv_timer_init(&loop, &w->t);
    uv_timer_start(&w->t, slow_fire, 50, 0);
    if (w->drain) mw__http_drain(*sp, on_drained, sp);
  } else if (!strcmp(req->path, "/big")) {
    size_t n = strtoul(req->query, NULL, 10);
    char *b = malloc(n + 1);
    if (!b) abort();
    memset(b, 'z', n);
    mw__http_respond(req, 200, "text/plain", b, n);
    free(b);
  } else if (!strcmp(req->path, "/nocontent")) {
    mw__http_respond(req, 204, NULL, "ignored", 7);
  } else {
    echo(req);
  }
}

/* The client's last word: whatever happened, drain both servers so the loop
 * ends. */
static void on_stop(uv_async_t *a) {
  if (srv) mw__http_drain(srv, on_drained, &srv);
  if (lim_srv) mw__http_drain(lim_srv, on_drained, &lim_srv);
  uv_close((uv_handle_t *)a, NULL);
}

/* ---- the client side (second thread) ------------------------------------- */

static int passed, failed;

static void report(int ok, const char *name, const char *got) {
  printf("%sok %d - %s\n", ok ? "" : "not ", passed + failed + 1, name);
  if (!ok && got && *got) printf("#   got: %s\n", got);
  fflush(stdout);
  if (ok) passed++;
  else failed++;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

typedef struct cl {
  int fd;
  char buf[1 << 17];
  size_t len;
} cl;

typedef struct resp {
  int status, close;
  char ctype[128];
  char *body;
  size_t body_len;
} resp;

static int cl_open(cl *c, int p) {
  struct sockaddr_in a;
  struct timeval tv = {5, 0};
  int one = 1;
  c->len = 0;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) return -1;
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)p);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a)) {
    close(c->fd);
    c->fd = -1;
    return -1;
  }
  return 0;
}

static void cl_close(cl *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static int cl_sendn(cl *c, const char *s, size_t n) {
  while (n) {
    ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

static int cl_send(cl *c, const char *s) {
  return cl_sendn(c, s, strlen(s));
}

/* > 0 bytes added, 0 on EOF, -1 on error or timeout. */
static int cl_fill(cl *c) {
  ssize_t n;
  if (c->len == sizeof c->buf) return -1;
  n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
  if (n < 0) return -1;
  c->len += (size_t)n;
  return (int)n;
}

static const char *find_hdr(const char *head, size_t hlen, const char *name, size_t *vlen) {
  const char *p = memchr(head, '\n', hlen), *end = head + hlen;
  size_t nl = strlen(name);
  while (p && ++p < end) {
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    if (!eol) break;
    if ((size_t)(eol - p) > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
      const char *v = p + nl + 1;
      while (*v == ' ') v++;
      *vlen = (size_t)(eol - v);
      return v;
    }
    p = memchr(p, '\n', (size_t)(end - p));
  }
  return NULL;
}

static char *find_crlf2(char *p, size_t n) {
  size_t i;
  for (i = 0; i + 4 <= n; i++)
    if (!memcmp(p + i, "\r\n\r\n", 4)) return p + i;
  return NULL;
}

/* Reads one response; for a HEAD the body is announced but not sent. */
static int cl_read_x(cl *c, resp *r, int head) {
  char *e;
  const char *v;
  size_t hlen, vlen, clen = 0;
  memset(r, 0, sizeof *r);
  for (;;) {
    e = find_crlf2(c->buf, c->len);
    if (e) break;
    if (cl_fill(c) <= 0) return -1;
  }
  hlen = (size_t)(e - c->buf) + 4;
  if (sscanf(c->buf, "HTTP/1.1 %d", &r->status) != 1) return -1;
  if ((v = find_hdr(c->buf, hlen, "Content-Length", &vlen))) clen = strtoul(v, NULL, 10);
  if ((v = find_hdr(c->buf, hlen, "Connection", &vlen))) r->close = vlen == 5 && !strncasecmp(v, "close", 5);
  if ((v = find_hdr(c->buf, hlen, "Content-Type", &vlen)) && vlen < sizeof r->ctype) memcpy(r->ctype, v, vlen);
  if (head) clen = 0;
  while (c->len < hlen + clen)
    if (cl_fill(c) <= 0) return -1;
  r->body = malloc(clen + 1);
  if (!r->body) return -1;
  memcpy(r->body, c->buf + hlen, clen);
  r->body[clen] = '\0';
  r->body_len = clen;
  memmove(c->buf, c->buf + hlen + clen, c->len - hlen - clen);
  c->len -= hlen + clen;
  return 0;
}

static int cl_read(cl *c, resp *r) {
  return cl_read_x(c, r, 0);
}

static void resp_free(resp *r) {
  free(r->body);
  r->body = NULL;
}

/* 1 if the server closed the connection (EOF or reset) with nothing more to say. */
static int cl_eof(cl *c) {
  char b[64];
  ssize_t n;
  if (c->len) return 0;
  n = recv(c->fd, b, sizeof b, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

static int has(const char *body, const char *s) {
  return body && strstr(body, s) != NULL;
}

static long long jnum(const char *body, const char *key) {
  char k[64];
  const char *p;
  snprintf(k, sizeof k, "\"%s\":", key);
  p = body ? strstr(body, k) : NULL;
  return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* The server's figures, asked on a connection of their own. */
static int get_stats(int p, char *out, size_t n) {
  static cl c;
  resp r;
  int rc = -1;
  if (cl_open(&c, p)) return -1;
  if (!cl_send(&c, "GET /stats HTTP/1.1\r\nConnection: close\r\n\r\n") && !cl_read(&c, &r)) {
    snprintf(out, n, "%s", r.body);
    rc = r.status == 200 ? 0 : -1;
    resp_free(&r);
  }
  cl_close(&c);
  return rc;
}

/* Side condition: the server ends up with only the asking connection open. */
static char why[512];

static int quiet_on(int p) {
  char st[256] = "";
  int i;
  for (i = 0; i < 300; i++) {
    if (!get_stats(p, st, sizeof st) && jnum(st, "open") == 1) return 1;
    sleep_ms(10);
  }
  snprintf(why, sizeof why, "connections left open: %s", st);
  return 0;
}

static int quiet(void) {
  return quiet_on(port);
}

static cl A, B, C, D;
static char got[512];

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (ok && !(cond)) {                               \
      ok = 0;                                          \
      snprintf(got, sizeof got, __VA_ARGS__);          \
    }                                                  \
  } while (0)

static void t_simple(void) {
  resp r = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /hello?x=1&y=2 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer abc\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r), "no response");
  CHECK(r.status == 200 && !r.close && !strcmp(r.ctype, "application/json"), "status %d close %d ctype %s",
        r.status, r.close, r.ctype);
  CHECK(has(r.body, "\"method\":\"GET\"") && has(r.body, "\"path\":\"/hello\"") &&
            has(r.body, "\"query\":\"x=1&y=2\"") && has(r.body, "\"authorization\":\"Bearer abc\"") &&
            has(r.body, "\"body\":\"\""),
        "%s", r.body);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "simple GET: method, path, query, authorization", got);
}

static void t_post(void) {
  resp r = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "POST /items HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     "Content-Length: 12\r\n\r\n{\"a\":\"b c\"}\n"),
        "send");
  CHECK(!cl_read(&A, &r), "no response");
  CHECK(r.status == 200 && has(r.body, "\"method\":\"POST\"") && has(r.body, "\"path\":\"/items\"") &&
            has(r.body, "\"query\":\"\"") && has(r.body, "\"authorization\":null") &&
            has(r.body, "\"body\":\"{\\\"a\\\":\\\"b c\\\"}\\u000a\""),
        "%d %s", r.status, r.body);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "POST with a body", got);
}

static void t_keepalive(void) {
  resp r1 = {0}, r2 = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /one HTTP/1.1\r\nHost: t\r\n\r\n") && !cl_read(&A, &r1), "first");
  CHECK(!cl_send(&A, "GET /two HTTP/1.1\r\nhost: t\r\nauthorization: Bearer low\r\n\r\n") && !cl_read(&A, &r2),
        "second");
  CHECK(r1.status == 200 && !r1.close && has(r1.body, "\"path\":\"/one\""), "%s", r1.body);
  CHECK(r2.status == 200 && !r2.close && has(r2.body, "\"path\":\"/two\"") &&
            has(r2.body, "\"authorization\":\"Bearer low\"") && jnum(r2.body, "id") > jnum(r1.body, "id"),
        "%s", r2.body);
  resp_free(&r1);
  resp_free(&r2);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "keep-alive: two requests on one connection; header names case-insensitive", got);
}

static void t_pipeline(void) {
  resp r[3] = {{0}};
  int ok = 1, i;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"
                     "GET /a HTTP/1.1\r\nHost: t\r\n\r\n"
                     "GET /b?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"),
        "send");
  for (i = 0; i < 3; i++) CHECK(!cl_read(&A, &r[i]), "response %d missing", i);
  CHECK(has(r[0].body, "\"path\":\"/slow\"") && has(r[1].body, "\"path\":\"/a\"") &&
            has(r[2].body, "\"path\":\"/b\"") && has(r[2].body, "\"query\":\"q=1\""),
        "order: %s | %s | %s", r[0].body, r[1].body, r[2].body);
  /* /a was answered before /slow, yet written after it. */
  CHECK(jnum(r[0].body, "n") > jnum(r[1].body, "n"), "answered in order? %s | %s", r[0].body, r[1].body);
  for (i = 0; i < 3; i++) resp_free(&r[i]);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "pipelining: /slow, /a, /b in one write come back in request order", got);
}

static void t_pipeline_cap(void) {
  char req[64], all[2048] = "";
  resp r = {0};
  int ok = 1, i;
  got[0] = '\0';
  for (i = 0; i < 10; i++) {
    snprintf(req, sizeof req, "GET /p%d HTTP/1.1\r\n\r\n", i);
    strcat(all, req);
  }
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, all), "send");
  for (i = 0; i < 10 && ok; i++) {
    char want[32];
    snprintf(want, sizeof want, "\"path\":\"/p%d\"", i);
    CHECK(!cl_read(&A, &r), "response %d missing", i);
    CHECK(r.status == 200 && has(r.body, want), "response %d: %s", i, r.body);
    resp_free(&r);
  }
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "pipelining past max_pipeline (2): ten requests answered in order", got);
}

static void t_bytewise(void) {
  const char *s = "POST /bytes?b=2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
  resp r = {0};
  int ok = 1;
  size_t i;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  for (i = 0; ok && s[i]; i++) {
    CHECK(!cl_sendn(&A, s + i, 1), "send");
    sleep_ms(1);
  }
  CHECK(!cl_read(&A, &r), "no response");
  CHECK(r.status == 200 && has(r.body, "\"path\":\"/bytes\"") && has(r.body, "\"query\":\"b=2\"") &&
            has(r.body, "\"body\":\"abc\""),
        "%s", r.body);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "a request written one byte at a time", got);
}

static void t_chunked(void) {
  resp r = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\nAuthorization: trailer\r\n\r\n"),
        "send");
  CHECK(!cl_read(&A, &r), "no response");
  CHECK(r.status == 200 && has(r.body, "\"body\":\"hello world\"") && has(r.body, "\"authorization\":null"),
        "%s", r.body);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "chunked body (a trailer is not taken for a header)", got);
}

static void t_head(void) {
  resp r1 = {0}, r2 = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "HEAD /h HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n"), "send");
  CHECK(!cl_read_x(&A, &r1, 1) && !cl_read(&A, &r2), "responses");
  CHECK(r1.status == 200 && r2.status == 200 && has(r2.body, "\"path\":\"/g\""), "%d %d %s", r1.status,
        r2.status, r2.body);
  resp_free(&r1);
  resp_free(&r2);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "HEAD answers carry no body bytes", got);
}

static void t_expect(void) {
  resp r1 = {0}, r2 = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r1) && r1.status == 100, "no 100 Continue (%d)", r1.status);
  CHECK(!cl_send(&A, "12345") && !cl_read(&A, &r2), "no answer");
  CHECK(r2.status == 200 && has(r2.body, "\"body\":\"12345\""), "%s", r2.body);
  resp_free(&r1);
  resp_free(&r2);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "Expect: 100-continue gets an interim answer", got);
}

/* Sends what, expects one error answer with Connection: close, then EOF. */
static void expect_error(const char *name, const char *what, size_t n, int status, const char *code,
                         const char *msg) {
  resp r = {0};
  int ok = 1;
  char want[128];
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_sendn(&A, what, n), "send");
  CHECK(!cl_read(&A, &r), "no response");
  snprintf(want, sizeof want, "{\"error\":{\"code\":\"%s\",\"message\":\"", code);
  CHECK(r.status == status && r.close && has(r.body, want) && (!msg || has(r.body, msg)), "%d close=%d %s",
        r.status, r.close, r.body);
  CHECK(cl_eof(&A), "connection not closed after the error");
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, name, got);
}

static void t_errors(void) {
  char big[3000], *body;
  size_t n;
  snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX-Big: %02000d\r\n\r\n", 0);
  expect_error("oversize headers -> 431 and close", big, strlen(big), 431, "bad_request",
               "request header fields too large");
  /* The refused body is partly sent: the answer must still arrive intact. */
  body = malloc(20000);
  if (!body) abort();
  n = (size_t)snprintf(body, 20000, "POST /u HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
  memset(body + n, 'x', 8000);
  expect_error("Content-Length over the limit -> 413 and close, body unread", body, n + 8000, 413,
               "payload_too_large", NULL);
  n = (size_t)snprintf(body, 20000, "POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; i++) {
    n += (size_t)snprintf(body + n, 20000 - n, "7d0\r\n");
    memset(body + n, 'y', 2000);
    n += 2000;
    n += (size_t)snprintf(body + n, 20000 - n, "\r\n");
  }
  n += (size_t)snprintf(body + n, 20000 - n, "0\r\n\r\n");
  expect_error("chunked body over the limit -> 413 and close", body, n, 413, "payload_too_large", NULL);
  free(body);
  expect_error("garbage -> 400 and close", "HELLO THERE\x01\r\n\r\n", 15, 400, "bad_request", NULL);
  const char *dup = "GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n";
  expect_error("two Authorization headers -> 400", dup, strlen(dup), 400, "bad_request", "Authorization");
}

static void t_error_order(void) {
  resp r1 = {0}, r2 = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /slow HTTP/1.1\r\n\r\n\x01garbage\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r1) && !cl_read(&A, &r2), "responses");
  CHECK(r1.status == 200 && !r1.close && has(r1.body, "\"path\":\"/slow\""), "first %d %s", r1.status, r1.body);
  CHECK(r2.status == 400 && r2.close, "second %d", r2.status);
  CHECK(cl_eof(&A), "not closed");
  resp_free(&r1);
  resp_free(&r2);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "a 400 after a pipelined /slow waits for its answer", got);
}

static void t_close(void) {
  resp r = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /c HTTP/1.1\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r) && r.status == 200 && r.close && has(r.body, "/c"), "%d close=%d", r.status, r.close);
  CHECK(cl_eof(&A), "not closed");
  resp_free(&r);
  cl_close(&A);
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /old HTTP/1.0\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r) && r.status == 200 && r.close, "1.0: %d close=%d", r.status, r.close);
  CHECK(cl_eof(&A), "1.0 not closed");
  resp_free(&r);
  cl_close(&A);
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), "send");
  CHECK(!cl_read(&A, &r) && r.status == 200 && !r.close, "1.0 keep-alive: %d close=%d", r.status, r.close);
  resp_free(&r);
  CHECK(!cl_send(&A, "GET /again HTTP/1.1\r\n\r\n") && !cl_read(&A, &r) && r.status == 200, "reuse");
  resp_free(&r);
  cl_close(&A);
  /* An Upgrade is answered as a plain request, and then the connection ends. */
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /up HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello"),
        "send");
  CHECK(!cl_read(&A, &r) && r.status == 200 && r.close && has(r.body, "/up"), "upgrade: %d close=%d", r.status,
        r.close);
  CHECK(cl_eof(&A), "upgrade not closed");
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "Connection: close, HTTP/1.0 and Upgrade close after the answer; 1.0 keep-alive stays", got);
}

static void t_limit(void) {
  resp r = {0};
  int ok = 1, i, served = 0;
  char st[256] = "";
  got[0] = '\0';
  CHECK(!cl_open(&A, lim_port) && !cl_send(&A, "GET /1 HTTP/1.1\r\n\r\n") && !cl_read(&A, &r) && r.status == 200,
        "first");
  resp_free(&r);
  CHECK(!cl_open(&B, lim_port) && !cl_send(&B, "GET /2 HTTP/1.1\r\n\r\n") && !cl_read(&B, &r) && r.status == 200,
        "second");
  resp_free(&r);
  CHECK(!cl_open(&C, lim_port) && !cl_read(&C, &r), "third: no answer");
  CHECK(r.status == 503 && r.close && has(r.body, "\"code\":\"unavailable\""), "third: %d %s", r.status, r.body);
  CHECK(cl_eof(&C), "third not closed");
  resp_free(&r);
  cl_close(&C);
  cl_close(&A);
  /* Once one closes, a newcomer is served (the close is seen asynchronously). */
  for (i = 0; ok && i < 200 && !served; i++) {
    CHECK(!cl_open(&D, lim_port) && !cl_send(&D, "GET /4 HTTP/1.1\r\n\r\n") && !cl_read(&D, &r), "fourth");
    served = r.status == 200;
    resp_free(&r);
    cl_close(&D);
    if (!served) sleep_ms(10);
  }
  CHECK(served, "never served after a slot freed");
  cl_close(&B);
  CHECK(quiet_on(lim_port), "%s", why);
  CHECK(!get_stats(lim_port, st, sizeof st) && jnum(st, "rejected") >= 1 && jnum(st, "accepted") >= 3, "%s", st);
  report(ok, "connection limit -> 503 unavailable and close; a freed slot serves again", got);
}

static void t_slow_client(void) {
  const char *s = "GET /dribble HTTP/1.1\r\nHost: t\r\nX-A: b\r\n\r\n";
  struct pollfd pfd;
  uint64_t t0 = 0, dt = 0;
  int ok = 1, closed = 0;
  size_t i;
  resp r = {0};
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  for (i = 0; ok && s[i] && !closed; i++) {
    if (!t0) t0 = now_ms();
    if (cl_sendn(&A, s + i, 1)) break; /* reset: closed */
    pfd.fd = A.fd;
    pfd.events = POLLIN;
    closed = poll(&pfd, 1, 100) > 0;
  }
  dt = now_ms() - t0;
  CHECK(closed && dt >= 250 && dt < 2500, "closed=%d after %llu ms", closed, (unsigned long long)dt);
  /* The answer is a 408 if it could be read, else a bare close. */
  if (ok && !cl_read(&A, &r)) CHECK(r.status == 408 && r.close && has(r.body, "request timeout"), "%d", r.status);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "a client dribbling a byte per 100 ms is closed at the 300 ms request timeout", got);
}

static void t_idle(void) {
  resp r = {0};
  struct pollfd pfd;
  uint64_t t0, dt;
  int ok = 1, i, closed = 0;
  got[0] = '\0';
  CHECK(!cl_open(&A, port) && !cl_send(&A, "GET /i HTTP/1.1\r\n\r\n") && !cl_read(&A, &r) && r.status == 200,
        "request");
  resp_free(&r);
  t0 = now_ms();
  pfd.fd = A.fd;
  pfd.events = POLLIN;
  CHECK(poll(&pfd, 1, 5000) == 1 && cl_eof(&A), "not closed");
  dt = now_ms() - t0;
  CHECK(dt >= 1000 && dt < 4000, "closed after %llu ms", (unsigned long long)dt);
  cl_close(&A);
  /* Bare CRLFs start no request and must not keep the connection alive. */
  CHECK(!cl_open(&A, port), "connect");
  t0 = now_ms();
  for (i = 0; ok && i < 40 && !closed; i++) {
    if (cl_send(&A, "\r\n")) break;
    closed = poll(&pfd, 1, 150) == 1;
  }
  closed = closed || cl_eof(&A);
  dt = now_ms() - t0;
  CHECK(closed && dt >= 1000 && dt < 4000, "CRLF dribble: closed=%d after %llu ms", closed,
        (unsigned long long)dt);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "an idle keep-alive connection closes after idle_timeout_ms, silently, CRLFs or not", got);
}

static void t_half_close(void) {
  resp r1 = {0}, r2 = {0};
  int ok = 1;
  got[0] = '\0';
  /* EOF seen while /slow is with the handler: its answer is the last, with close. */
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /slow HTTP/1.1\r\n\r\nGET /part"), "send");
  shutdown(A.fd, SHUT_WR);
  CHECK(!cl_read(&A, &r1), "answer lost after the client's EOF");
  CHECK(r1.status == 200 && r1.close && has(r1.body, "/slow"), "%d close=%d %s", r1.status, r1.close, r1.body);
  CHECK(cl_eof(&A), "not closed");
  resp_free(&r1);
  cl_close(&A);
  /* EOF behind a full pipeline: seen only once both are answered. */
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /slow HTTP/1.1\r\n\r\nGET /h2 HTTP/1.1\r\n\r\nGET /part"), "send");
  shutdown(A.fd, SHUT_WR);
  CHECK(!cl_read(&A, &r1) && !cl_read(&A, &r2), "answers lost after the client's EOF");
  CHECK(r1.status == 200 && has(r1.body, "/slow") && r2.status == 200 && has(r2.body, "/h2"), "%s | %s", r1.body,
        r2.body);
  CHECK(cl_eof(&A), "not closed");
  resp_free(&r1);
  resp_free(&r2);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "after the client's EOF, owed answers are written, then the connection closes", got);
}

static void t_misc(void) {
  resp r = {0};
  int ok = 1;
  got[0] = '\0';
  CHECK(!cl_open(&A, port), "connect failed");
  CHECK(!cl_send(&A, "GET /big?100000 HTTP/1.1\r\n\r\n") && !cl_read(&A, &r), "big");
  CHECK(r.status == 200 && r.body_len == 100000 && r.body[0] == 'z' && r.body[99999] == 'z' &&
            !strcmp(r.ctype, "text/plain"),
        "big: %d %zu", r.status, r.body_len);
  resp_free(&r);
  CHECK(!cl_send(&A, "GET http://example.org:8080/abs/p?x=1 HTTP/1.1\r\n\r\n") && !cl_read(&A, &r), "abs");
  CHECK(r.status == 200 && has(r.body, "\"path\":\"/abs/p\"") && has(r.body, "\"query\":\"x=1\""), "abs: %s",
        r.body);
  resp_free(&r);
  CHECK(!cl_send(&A, "GET /nocontent HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n") && !cl_read(&A, &r),
        "204");
  CHECK(r.status == 204 && r.body_len == 0, "204: %d %zu", r.status, r.body_len);
  resp_free(&r);
  CHECK(!cl_read(&A, &r) && r.status == 200 && has(r.body, "/after"), "after 204: %d %s", r.status, r.body);
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "a 100 kB answer, an absolute-form target, a 204 without body", got);
}

static void t_disconnect(void) {
  resp r = {0};
  struct linger lg = {1, 0};
  int ok = 1;
  got[0] = '\0';
  /* Mid-request: the body never comes. */
  CHECK(!cl_open(&A, port) && !cl_send(&A, "POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"), "partial");
  cl_close(&A);
  /* Mid-request with a reset. */
  CHECK(!cl_open(&A, port) && !cl_send(&A, "POST /p HTTP/1.1\r\nContent-Le"), "partial");
  setsockopt(A.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  cl_close(&A);
  /* Mid-response: the handler still holds /slow when the client leaves. */
  CHECK(!cl_open(&A, port) && !cl_send(&A, "GET /slow HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n"), "slow");
  sleep_ms(10);
  setsockopt(A.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  cl_close(&A);
  sleep_ms(100);
  CHECK(!cl_open(&A, port) && !cl_send(&A, "GET /still HTTP/1.1\r\n\r\n") && !cl_read(&A, &r) && r.status == 200,
        "not serving after disconnects");
  resp_free(&r);
  cl_close(&A);
  CHECK(quiet(), "%s", why);
  report(ok, "clients leaving mid-request and mid-response leave the server serving", got);
}

static void t_stats(void) {
  char st[256] = "";
  int ok = 1;
  got[0] = '\0';
  CHECK(!get_stats(port, st, sizeof st), "no stats");
  CHECK(jnum(st, "open") == 1 && jnum(st, "accepted") >= 20 && jnum(st, "rejected") == 0 &&
            jnum(st, "requests") >= 30 && jnum(st, "parse_errors") == 6 && jnum(st, "timeouts") == 1,
        "%s", st);
  report(ok, "stats count connections, requests, parse errors and timeouts", got);
}

static void t_drain(void) {
  resp r = {0};
  int ok = 1;
  struct pollfd pfd;
  got[0] = '\0';
  CHECK(!cl_open(&C, port) && !cl_send(&C, "GET /idle HTTP/1.1\r\n\r\n") && !cl_read(&C, &r) && r.status == 200,
        "idle conn");
  resp_free(&r);
  CHECK(!cl_open(&A, port) && !cl_send(&A, "GET /slow?drain=1 HTTP/1.1\r\n\r\n"), "send");
  /* The idle connection closes at once, before /slow is answered. */
  pfd.fd = C.fd;
  pfd.events = POLLIN;
  CHECK(poll(&pfd, 1, 5000) == 1 && cl_eof(&C), "idle connection not closed");
  CHECK(!cl_read(&A, &r), "no answer to the in-flight request");
  CHECK(r.status == 200 && r.close && has(r.body, "\"path\":\"/slow\""), "%d close=%d %s", r.status, r.close,
        r.body);
  CHECK(cl_eof(&A), "not closed after the answer");
  resp_free(&r);
  cl_close(&A);
  cl_close(&C);
  CHECK(cl_open(&B, port) && errno == ECONNREFUSED, "still accepting");
  cl_close(&B);
  report(ok, "drain: idle connections close, the in-flight /slow is answered with close, no more accepts",
         got);
}

static void *client(void *arg) {
  (void)arg;
  A.fd = B.fd = C.fd = D.fd = -1;
  t_simple();
  t_post();
  t_keepalive();
  t_pipeline();
  t_pipeline_cap();
  t_bytewise();
  t_chunked();
  t_head();
  t_expect();
  t_errors();
  t_error_order();
  t_close();
  t_limit();
  t_slow_client();
  t_idle();
  t_half_close();
  t_misc();
  t_disconnect();
  t_stats();
  t_drain();
  uv_async_send(&stop_async);
  return NULL;
}

int main(void) {
  mw_http_limits l = {0}, ll = {0};
  char err[256];
  pthread_t th;
  int rc;
  alarm(120); /* a hang is a failure */
  setvbuf(stdout, NULL, _IOLBF, 0);
  uv_loop_init(&loop);
  l.max_header_bytes = 1024;
  l.max_body_bytes = 4096;
  l.idle_timeout_ms = 1500;
  l.request_timeout_ms = 300;
  l.max_connections = 64;
  l.max_pipeline = 2;
  srv = mw__http_start(&loop, "127.0.0.1", 0, &l, handler, &srv, err, sizeof err);
  ll.max_connections = 2;
  ll.idle_timeout_ms = 1500;
  lim_srv = mw__http_start(&loop, "127.0.0.1", 0, &ll, handler, &lim_srv, err, sizeof err);
  report(srv && lim_srv, "servers start on 127.0.0.1, port 0", err);
  if (!srv || !lim_srv) return 1;
  port = mw__http_port(srv);
  lim_port = mw__http_port(lim_srv);
  report(port > 0 && lim_port > 0 && port != lim_port, "mw__http_port tells the picked ports", NULL);
  {
    mw_http *bad = mw__http_start(&loop, "127.0.0.1", port, &l, handler, NULL, err, sizeof err);
    report(!bad && strstr(err, "in use"), "a busy port fails at once with a message", err);
  }
  uv_async_init(&loop, &stop_async, on_stop);
  if (pthread_create(&th, NULL, client, NULL)) return 1;
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  report(srv_done == 1 && lim_done == 1, "drain calls done once per server and the loop ends", NULL);
  report(drain_answered_before_done, "done comes only after the in-flight request was answered", NULL);
  rc = uv_loop_close(&loop);
  report(rc == 0, "no handle left open on the loop", rc ? uv_strerror(rc) : NULL);
  printf("1..%d\n", passed + failed);
  return failed ? 1 : 0;
}
