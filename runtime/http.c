/* http.c -- the host's HTTP/1.1 server: accepts on libuv, parses with
 * http_parser, hands complete requests to one handler and writes its answers
 * back in request order.  It never exits, and never lets a client hold memory
 * or a socket beyond the configured limits. */

/* Lifecycle.  A connection is OPEN while it reads and parses; ENDING once no
 * further request will be parsed (the client asked to close, sent EOF, broke
 * the protocol, timed out, or the server drains) and it waits for the answers
 * it owes; LINGER after the last answer is written, the write side shut and
 * unread input discarded so that closing cannot reset the answer away;
 * CLOSING once uv_close is called.  The conn is freed when both of its
 * handles have closed.  A request belongs to its connection until it is
 * handed to the handler; from then on the handler holds it until
 * mw__http_respond, even if the connection dies first (it is then detached:
 * r->c is NULL and responding only frees it).  The server counts handed,
 * unanswered requests, and a drain completes only when that count, the
 * connection list and the listener are all gone. */
#include "http.h"
#include "mw.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Reads land in one buffer per server: a read callback consumes its bytes
 * before the loop reads from anyone else, and only what a paused parser left
 * over is copied into the connection (pend). */
#define RBUF_SIZE 65536
/* How long a closing connection keeps discarding input after its last answer. */
#define LINGER_MS 2000
/* Room kept for the Connection line, decided only when the answer is written. */
#define CONN_LINE_MAX 26 /* strlen("Connection: keep-alive\r\n\r\n") */
#define CTYPE_MAX 200

enum { OPEN, ENDING, LINGER, CLOSING };
enum { HK_OTHER, HK_AUTH, HK_EXPECT };
enum { HS_NONE, HS_FIELD, HS_VALUE };

typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

typedef struct conn conn;

typedef struct req {
  mw_http_req pub; /* first: the handler's pointer is this struct's */
  mw_http *s;
  conn *c;         /* NULL once detached: the client went away */
  struct req *next;
  sbuf url, auth, body;
  char hname[16];  /* only short names matter: authorization, expect */
  size_t hname_len;
  char expect[16];
  size_t expect_len;
  int hstate, hkind;
  unsigned handed : 1, answered : 1, writing : 1, is_error : 1, keep_alive : 1, head : 1,
      has_auth : 1, dup_auth : 1, headers_done : 1;
  char *out;       /* [status line and headers][gap for Connection][body] */
  size_t out_pre, out_body;
  uv_write_t wr;
} req;

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  http_parser parser;
  mw_http *s;
  conn *prev, *next;
  req *cur;            /* being parsed */
  req *head, *tail;    /* the FIFO: parsed, waiting for or holding answers */
  req *unhanded;       /* first FIFO entry not yet given to the handler */
  int nq, inflight, writes, handles, state;
  unsigned reading : 1, eof : 1, counted : 1, stop : 1, cont_busy : 1;
  size_t hdr_bytes;
  int err_status, err_code; /* set by a parser callback that refuses the request */
  const char *err_msg;
  char *pend;          /* input left unparsed while the FIFO is full */
  size_t pend_len;
  uint64_t t_start, quiet_since;
  uv_write_t cont;
  uv_shutdown_t sd;
};

struct mw_http {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_timer_t finish;   /* closed last, so done() always runs from the loop */
  mw_http_limits lim;
  mw_http_handler h;
  void *ud;
  conn *conns;
  int open, port;
  uint64_t next_id, outstanding;
  mw_http_stats st;
  unsigned draining : 1, listener_closed : 1, finishing : 1;
  void (*done)(void *);
  void *done_ud;
  char rbuf[RBUF_SIZE];
};

static char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void conn_close(conn *c);
static void process(conn *c, const char *data, size_t len);
static void on_timer(uv_timer_t *t);

/* ---- small helpers ------------------------------------------------------ */

static int sbuf_reserve(sbuf *b, size_t extra) {
  size_t need, cap;
  char *p;
  if (extra > SIZE_MAX - b->len - 1) return -1;
  need = b->len + extra + 1;
  if (need > b->cap) {
    cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  b->p[b->len] = '\0';
  return 0;
}

static int sbuf_add(sbuf *b, const char *d, size_t n) {
  if (sbuf_reserve(b, n)) return -1;
  memcpy(b->p + b->len, d, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

static void free_req(req *r) {
  if (!r) return;
  free(r->url.p);
  free(r->auth.p);
  free(r->body.p);
  free(r->out);
  free(r);
}

static const char *reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
  }
  return "Unknown";
}

/* The contract's error code, from the one table in mw.h. */
static const char *error_code(int err) {
  switch (err) {
#define XX(name, val, http, code, msg) \
  case MW_##name: return code;
    MW_ERRNO_MAP(XX)
#undef XX
  }
  return "internal";
}

/* Lays out r->out so that flush only has to drop in the Connection line:
 * whether it says close depends on what follows the answer in the FIFO, which
 * is known only when the answer reaches the wire. */
static int frame(req *r, int status, const char *ctype, const char *body, size_t len) {
  char pre[128 + CTYPE_MAX];
  size_t blen, total;
  int n;
  if (status < 100 || status > 599) status = 500;
  if (!ctype || !*ctype) ctype = "application/json";
  else if (strlen(ctype) > CTYPE_MAX || strpbrk(ctype, "\r\n")) ctype = "application/octet-stream";
  if (!body) len = 0;
  if (status == 204) /* a 204 has neither body nor Content-Length (RFC 9110 8.6) */
    n = snprintf(pre, sizeof pre, "HTTP/1.1 204 %s\r\n", reason(status));
  else
    n = snprintf(pre, sizeof pre, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n", status,
                 reason(status), ctype, len);
  if (n < 0 || (size_t)n >= sizeof pre) return -1;
  /* HEAD: the length is announced, the bytes are not sent. */
  blen = r->head || status == 204 ? 0 : len;
  if (blen > UINT_MAX - (size_t)n - CONN_LINE_MAX) return -1; /* uv_buf_t lengths are unsigned */
  total = (size_t)n + CONN_LINE_MAX + blen;
  r->out = malloc(total);
  if (!r->out) return -1;
  memcpy(r->out, pre, (size_t)n);
  if (blen) memcpy(r->out + n + CONN_LINE_MAX, body, blen);
  r->out_pre = (size_t)n;
  r->out_body = blen;
  return 0;
}

static void push(conn *c, req *r) {
  r->next = NULL;
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  c->nq++;
  if (!r->is_error && !c->unhanded) c->unhanded = r;
}

static void maybe_done(mw_http *s);

/* ---- connection state --------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  (void)suggested;
  buf->base = c->s->rbuf;
  buf->len = RBUF_SIZE;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

static int start_reading(conn *c) {
  if (c->reading) return 0;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) return -1;
  c->reading = 1;
  return 0;
}

static void stop_reading(conn *c) {
  if (!c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

/* No further request will be parsed on c; what is in the FIFO is still owed. */
static void end_input(conn *c) {
  if (c->state != OPEN) return;
  c->state = ENDING;
  stop_reading(c);
  free_req(c->cur);
  c->cur = NULL;
  free(c->pend);
  c->pend = NULL;
  c->pend_len = 0;
}

/* One timer per connection, re-aimed after every event: nothing closes a
 * connection whose requests are with the handler; a started request has
 * request_timeout_ms from its first byte (or from when the handler last gave
 * everything back, whichever is later); answers owed after input ended must
 * make progress within the same bound; otherwise the idle limit runs from
 * the last progress (quiet_since), so bytes that start no request (bare
 * CRLFs) do not keep a connection alive. */
static void arm(conn *c) {
  const mw_http_limits *l = &c->s->lim;
  uint64_t now = uv_now(c->s->loop), from, end;
  if (c->state == LINGER || c->state == CLOSING) return;
  if (c->inflight) {
    uv_timer_stop(&c->timer);
    return;
  }
  if (c->state == OPEN && c->cur) {
    from = c->t_start > c->quiet_since ? c->t_start : c->quiet_since;
    end = from + l->request_timeout_ms;
  } else if (c->state == ENDING) {
    end = now + l->request_timeout_ms;
  } else {
    end = c->quiet_since + l->idle_timeout_ms;
  }
  uv_timer_start(&c->timer, on_timer, end > now ? end - now : 0, 0);
}

static void on_shutdown(uv_shutdown_t *sd, int status) {
  conn *c = sd->data;
  if (status < 0 && c->state != CLOSING) conn_close(c);
}

/* Every answer is out.  If the client already sent EOF nothing unread can
 * make close() send a reset, so close now; otherwise send FIN and discard
 * input for a while, so that bytes we never read (a refused body, more
 * pipelined requests) do not turn our last answer into a connection reset. */
static void finish(conn *c) {
  if (c->eof) {
    conn_close(c);
    return;
  }
  c->state = LINGER;
  c->sd.data = c;
  if (uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) || start_reading(c)) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
}

static void on_written(uv_write_t *wr, int status);

/* Writes every answered request at the head of the FIFO, in order. */
static void flush(conn *c) {
  req *r;
  for (r = c->head; r && c->state != CLOSING; r = r->next) {
    const char *line;
    size_t l, shift;
    uv_buf_t b;
    if (r->writing) continue;
    if (!r->answered) break;
    line = c->state == ENDING && !r->next ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
    l = strlen(line);
    shift = CONN_LINE_MAX - l;
    memmove(r->out + shift, r->out, r->out_pre);
    memcpy(r->out + shift + r->out_pre, line, l);
    b = uv_buf_init(r->out + shift, (unsigned)(r->out_pre + l + r->out_body));
    r->wr.data = r;
    if (uv_write(&r->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
      conn_close(c);
      return;
    }
    r->writing = 1;
    c->writes++;
  }
}

/* After progress (an answer written): resume parsing what a full FIFO held
 * back, finish an ending connection, re-aim the timer. */
static void settle(conn *c) {
  if (c->state == OPEN && !c->reading && c->nq < c->s->lim.max_pipeline) {
    if (c->pend) {
      char *p = c->pend;
      size_t n = c->pend_len;
      c->pend = NULL;
      c->pend_len = 0;
      process(c, p, n);
      free(p);
    }
    if (c->state == OPEN && !c->pend && !c->reading && c->nq < c->s->lim.max_pipeline && start_reading(c)) {
      conn_close(c);
      return;
    }
  }
  if (c->state == ENDING && !c->nq && !c->writes) {
    finish(c);
    return;
  }
  arm(c);
}

static void on_written(uv_write_t *wr, int status) {
  req *r = wr->data;
  conn *c = r->c;
  assert(c && c->head == r);
  c->head = r->next;
  if (!c->head) c->tail = NULL;
  c->nq--;
  c->writes--;
  free_req(r);
  if (c->state == CLOSING) return;
  c->quiet_since = uv_now(c->s->loop);
  if (status < 0) {
    conn_close(c);
    return;
  }
  settle(c);
}

static void on_cont_written(uv_write_t *wr, int status) {
  conn *c = wr->data;
  c->cont_busy = 0;
  c->writes--;
  if (c->state == CLOSING) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  settle(c);
}

/* Queues an answer of this layer's own after whatever c already owes, and
 * ends the connection's input: the connection closes once it is written. */
static void fail(conn *c, int status, int err, const char *msg) {
  char body[256];
  req *r;
  int n;
  end_input(c);
  r = calloc(1, sizeof *r);
  if (!r) {
    conn_close(c);
    return;
  }
  r->s = c->s;
  r->c = c;
  r->is_error = 1;
  r->answered = 1;
  /* msg comes from this file or http_errno_description: no quotes or
   * backslashes to escape. */
  n = snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}", error_code(err), msg);
  if (n < 0 || (size_t)n >= sizeof body || frame(r, status, "application/json", body, (size_t)n)) {
    free_req(r);
    conn_close(c);
    return;
  }
  push(c, r);
  flush(c);
  if (c->state != CLOSING) arm(c);
}

/* Hands every parsed, not yet handed request to the handler, in order.  The
 * handler may respond, drain, or (through a failed write) close c under us:
 * c->unhanded is advanced before the call and cleared by conn_close. */
static void handoff(conn *c) {
  mw_http *s = c->s;
  req *r;
  while (c->state != CLOSING && (r = c->unhanded)) {
    if (r->is_error) {
      c->unhanded = NULL;
      break;
    }
    c->unhanded = r->next;
    r->handed = 1;
    c->inflight++;
    s->outstanding++;
    s->st.requests++;
    s->h(s->ud, &r->pub);
  }
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  mw_http *s = c->s;
  if (--c->handles) return;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->counted) s->open--;
  free(c->pend);
  free(c);
  maybe_done(s);
}

/* Closes at once.  Requests being written are freed by their (cancelled)
 * write callbacks, which libuv runs before the close callbacks; requests with
 * the handler are detached; the rest are freed here. */
static void conn_close(conn *c) {
  req **pp, *r, *last = NULL;
  if (c->state == CLOSING) return;
  c->state = CLOSING;
  stop_reading(c);
  free_req(c->cur);
  c->cur = NULL;
  free(c->pend);
  c->pend = NULL;
  c->pend_len = 0;
  c->unhanded = NULL;
  pp = &c->head;
  while ((r = *pp)) {
    if (r->writing) {
      last = r;
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    c->nq--;
    r->next = NULL;
    if (r->handed && !r->answered) r->c = NULL;
    else free_req(r);
  }
  c->tail = last;
  c->inflight = 0;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timer(uv_timer_t *t) {
  conn *c = t->data;
  if (c->state == CLOSING) return;
  if (c->state == LINGER) {
    conn_close(c);
    return;
  }
  if (c->inflight) return;
  if (c->state == OPEN && c->cur) {
    /* A request that started and did not finish in time: a slow client. */
    c->s->st.timeouts++;
    fail(c, 408, MW_EINVAL, "request timeout");
    return;
  }
  if (c->state == OPEN && !c->nq && !c->writes) {
    conn_close(c); /* keep-alive idle: an ordinary end, not counted */
    return;
  }
  c->s->st.timeouts++; /* owed answers the client does not take */
  conn_close(c);
}

/* ---- parsing ------------------------------------------------------------ */

static int refuse(conn *c, int status, int err, const char *msg) {
  c->err_status = status;
  c->err_code = err;
  c->err_msg = msg;
  return -1; /* for on_headers_complete, anything but 0, 1 or 2 is an error */
}

static int count_header(conn *c, size_t n) {
  c->hdr_bytes += n;
  if (c->hdr_bytes > c->s->lim.max_header_bytes) return refuse(c, 431, MW_EINVAL, "request header fields too large");
  return 0;
}

static int on_begin(http_parser *p) {
  conn *c = p->data;
  req *r = calloc(1, sizeof *r);
  if (!r) return refuse(c, 500, MW_ENOMEM, "out of memory");
  r->s = c->s;
  r->c = c;
  free_req(c->cur);
  c->cur = r;
  c->hdr_bytes = 0;
  c->t_start = uv_now(c->s->loop);
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  if (count_header(c, n)) return -1;
  if (sbuf_add(&c->cur->url, at, n)) return refuse(c, 500, MW_ENOMEM, "out of memory");
  return 0;
}

/* The header name is whole once its value starts. */
static void begin_value(req *r) {
  r->hkind = HK_OTHER;
  if (r->hname_len == 13 && !strncasecmp(r->hname, "authorization", 13)) {
    if (r->has_auth) r->dup_auth = 1;
    else {
      r->has_auth = 1;
      r->hkind = HK_AUTH;
    }
  } else if (r->hname_len == 6 && !strncasecmp(r->hname, "expect", 6)) {
    r->hkind = HK_EXPECT;
    r->expect_len = 0;
  }
}

static int on_hfield(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  req *r = c->cur;
  if (count_header(c, n)) return -1;
  if (r->headers_done) return 0; /* chunked trailers: counted, not used */
  if (r->hstate != HS_FIELD) r->hname_len = 0;
  r->hstate = HS_FIELD;
  if (r->hname_len + n <= sizeof r->hname) memcpy(r->hname + r->hname_len, at, n);
  r->hname_len += n; /* a longer name never matches one we look for */
  return 0;
}

static int on_hvalue(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  req *r = c->cur;
  if (count_header(c, n)) return -1;
  if (r->headers_done) return 0;
  if (r->hstate == HS_FIELD) begin_value(r);
  r->hstate = HS_VALUE;
  if (r->hkind == HK_AUTH && sbuf_add(&r->auth, at, n)) return refuse(c, 500, MW_ENOMEM, "out of memory");
  if (r->hkind == HK_EXPECT) {
    if (r->expect_len + n <= sizeof r->expect) memcpy(r->expect + r->expect_len, at, n);
    r->expect_len += n;
  }
  return 0;
}

/* Splits the request target into path and query in place.  The
 * absolute-form (a proxy's "http://host/p?q") keeps only path and query. */
static int split_url(req *r) {
  char *u = r->url.p, *q;
  if (!u || !*u) return -1;
  if (u[0] != '/') {
    struct http_parser_url pu;
    http_parser_url_init(&pu);
    if (!http_parser_parse_url(u, r->url.len, 0, &pu) && (pu.field_set & (1 << UF_HOST))) {
      sbuf n = {0};
      if (pu.field_set & (1 << UF_PATH)) {
        if (sbuf_add(&n, u + pu.field_data[UF_PATH].off, pu.field_data[UF_PATH].len)) goto oom;
      } else if (sbuf_add(&n, "/", 1)) goto oom;
      if (pu.field_set & (1 << UF_QUERY)) {
        if (sbuf_add(&n, "?", 1) || sbuf_add(&n, u + pu.field_data[UF_QUERY].off, pu.field_data[UF_QUERY].len))
          goto oom;
      }
      free(r->url.p);
      r->url = n;
      u = n.p;
      goto split;
    oom:
      free(n.p);
      return -1;
    }
    /* "*" (OPTIONS) or an authority (CONNECT): passed on as the path. */
    r->pub.path = u;
    r->pub.query = "";
    return 0;
  }
split:
  if ((q = strchr(u, '#'))) *q = '\0'; /* a fragment is not the server's */
  r->pub.path = u;
  r->pub.query = "";
  if ((q = strchr(u, '?'))) {
    *q = '\0';
    r->pub.query = q + 1;
  }
  return 0;
}

static void send_continue(conn *c) {
  uv_buf_t b;
  /* Only when nothing is owed before it: an interim answer must not overtake
   * earlier answers.  Otherwise the client sends its body after its own
   * wait, as curl does after a second. */
  if (c->cont_busy || c->nq || c->writes || c->state != OPEN) return;
  b = uv_buf_init(continue_line, sizeof continue_line - 1);
  c->cont.data = c;
  if (uv_write(&c->cont, (uv_stream_t *)&c->tcp, &b, 1, on_cont_written) == 0) {
    c->cont_busy = 1;
    c->writes++;
  }
}

static int on_headers(http_parser *p) {
  conn *c = p->data;
  req *r = c->cur;
  const mw_http_limits *l = &c->s->lim;
  if (r->hstate == HS_FIELD) begin_value(r); /* last header had no value bytes */
  r->headers_done = 1;
  if (r->dup_auth) return refuse(c, 400, MW_EINVAL, "more than one Authorization header");
  if (split_url(r)) return refuse(c, 400, MW_EINVAL, "bad request target");
  r->pub.method = http_method_str((enum http_method)p->method);
  r->head = p->method == HTTP_HEAD;
  if ((p->flags & F_CONTENTLENGTH) && !(p->flags & F_CHUNKED)) {
    if (p->content_length > l->max_body_bytes) return refuse(c, 413, MW_ETOOBIG, "payload too large");
    if (sbuf_reserve(&r->body, (size_t)p->content_length)) return refuse(c, 500, MW_ENOMEM, "out of memory");
  }
  if (r->expect_len == 12 && !strncasecmp(r->expect, "100-continue", 12) &&
      ((p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0)))
    send_continue(c);
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  req *r = c->cur;
  if (n > c->s->lim.max_body_bytes - r->body.len) return refuse(c, 413, MW_ETOOBIG, "payload too large");
  if (sbuf_add(&r->body, at, n)) return refuse(c, 500, MW_ENOMEM, "out of memory");
  return 0;
}

static int on_complete(http_parser *p) {
  conn *c = p->data;
  req *r = c->cur;
  mw_http *s = c->s;
  r->keep_alive = http_should_keep_alive(p) && !p->upgrade;
  r->pub.id = ++s->next_id;
  r->pub.body = r->body.p ? r->body.p : "";
  r->pub.body_len = r->body.len;
  if (r->has_auth) {
    /* http_parser strips leading blanks, not trailing ones. */
    while (r->auth.len && (r->auth.p[r->auth.len - 1] == ' ' || r->auth.p[r->auth.len - 1] == '\t'))
      r->auth.p[--r->auth.len] = '\0';
    r->pub.authorization = r->auth.p ? r->auth.p : "";
  }
  r->pub.t0_ns = uv_hrtime();
  c->cur = NULL;
  push(c, r);
  /* Pausing returns from http_parser_execute right after this message; the
   * rest of the input waits in c->pend (FIFO full) or is dropped (the
   * connection ends with this request: Connection: close, HTTP/1.0, or an
   * Upgrade we do not speak). */
  if (!r->keep_alive) {
    c->stop = 1;
    http_parser_pause(p, 1);
  } else if (c->nq >= s->lim.max_pipeline) {
    http_parser_pause(p, 1);
  }
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_begin,
    .on_url = on_url,
    .on_header_field = on_hfield,
    .on_header_value = on_hvalue,
    .on_headers_complete = on_headers,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

static void process(conn *c, const char *data, size_t len) {
  size_t n = http_parser_execute(&c->parser, &settings, data, len);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
  if (e == HPE_PAUSED) {
    http_parser_pause(&c->parser, 0);
    if (c->stop) {
      end_input(c);
    } else {
      stop_reading(c);
      if (n < len) {
        c->pend = malloc(len - n);
        if (!c->pend) {
          conn_close(c);
          return;
        }
        memcpy(c->pend, data + n, len - n);
        c->pend_len = len - n;
      }
    }
  } else if (e != HPE_OK || n != len) {
    int status = c->err_status ? c->err_status : e == HPE_HEADER_OVERFLOW ? 431 : 400;
    const char *msg = c->err_msg ? c->err_msg
                      : status == 431 ? "request header fields too large"
                                      : http_errno_description(e);
    if (status != 500) c->s->st.parse_errors++;
    fail(c, status, c->err_status ? c->err_code : MW_EINVAL, msg);
  }
  handoff(c);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  conn *c = st->data;
  if (n == 0 || c->state == CLOSING) return;
  if (n < 0) {
    if (n == UV_EOF && c->state == OPEN) {
      /* A half-close: a partial request is dropped, answers owed are still
       * written, then the connection closes. */
      c->eof = 1;
      end_input(c);
      settle(c);
    } else {
      conn_close(c);
    }
    return;
  }
  if (c->state != OPEN) return; /* lingering: discard */
  process(c, b->base, (size_t)n);
  if (c->state != CLOSING) settle(c);
}

/* ---- the server --------------------------------------------------------- */

static void on_finished(uv_handle_t *h) {
  mw_http *s = h->data;
  void (*done)(void *) = s->done;
  void *ud = s->done_ud;
  free(s);
  if (done) done(ud);
}

static void maybe_done(mw_http *s) {
  if (!s->draining || !s->listener_closed || s->conns || s->outstanding || s->finishing) return;
  s->finishing = 1;
  uv_close((uv_handle_t *)&s->finish, on_finished);
}

static void on_listener_closed(uv_handle_t *h) {
  mw_http *s = h->data;
  s->listener_closed = 1;
  maybe_done(s);
}

static void on_connection(uv_stream_t *ls, int status) {
  mw_http *s = ls->data;
  conn *c;
  if (status < 0) {
    /* out of file descriptors (libuv drops the pending connection): one
     * line a second at most, not a flood */
    static uint64_t last_ns;
    uint64_t now = uv_hrtime();
    if (now - last_ns > 1000000000u) {
      last_ns = now;
      fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot accept a connection\",\"error\":\"%s\"}\n",
              uv_strerror(status));
    }
    return;
  }
  if (s->draining) return;
  c = calloc(1, sizeof *c);
  if (!c) return;
  c->s = s;
  c->tcp.data = c;
  c->timer.data = c;
  if (uv_tcp_init(s->loop, &c->tcp)) {
    free(c);
    return;
  }
  c->handles = 1;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  int arc = uv_accept(ls, (uv_stream_t *)&c->tcp);
  uv_os_fd_t fd;
  if (!arc && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
    /* libuv closes connections it cannot accept without telling us, so say
     * it before: a line (a second at most) when descriptors run low */
    static struct rlimit lim;
    static uint64_t warned_ns;
    if (!lim.rlim_cur) getrlimit(RLIMIT_NOFILE, &lim);
    uint64_t now = uv_hrtime();
    if (lim.rlim_cur != RLIM_INFINITY && (rlim_t)fd + 8 >= lim.rlim_cur && now - warned_ns > 1000000000u) {
      warned_ns = now;
      fprintf(stderr, "{\"level\":\"warn\",\"msg\":\"file descriptors nearly exhausted\",\"fd\":%d,\"limit\":%llu}\n",
              (int)fd, (unsigned long long)lim.rlim_cur);
    }
  }
  if (arc) {
    /* out of file descriptors, say: one line a second at most, not a flood */
    static uint64_t last_ns;
    uint64_t now = uv_hrtime();
    if (now - last_ns > 1000000000u) {
      last_ns = now;
      fprintf(stderr, "{\"level\":\"error\",\"msg\":\"cannot accept a connection\",\"error\":\"%s\"}\n",
              uv_strerror(arc));
    }
    c->state = CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  uv_timer_init(s->loop, &c->timer);
  c->handles = 2;
  uv_tcp_nodelay(&c->tcp, 1);
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->quiet_since = uv_now(s->loop);
  if (s->open >= s->lim.max_connections) {
    s->st.rejected++;
    fail(c, 503, MW_EUNAVAIL, "too many connections");
    return;
  }
  c->counted = 1;
  s->open++;
  s->st.accepted++;
  if (start_reading(c)) {
    conn_close(c);
    return;
  }
  arm(c);
}

void mw__http_defaults(mw_http_limits *l) {
  if (!l) return;
  if (!l->max_header_bytes) l->max_header_bytes = 16 * 1024;
  if (!l->max_body_bytes) l->max_body_bytes = 1024 * 1024;
  if (!l->idle_timeout_ms) l->idle_timeout_ms = 60000;
  if (!l->request_timeout_ms) l->request_timeout_ms = 10000;
  if (l->max_connections <= 0) l->max_connections = 1024;
  if (l->max_pipeline <= 0) l->max_pipeline = 32;
}

/* Binds with plain sockets before any libuv handle exists, so that a busy
 * port or a bad host fails synchronously with nothing left to close. */
static int bind_listen(const char *host, int port, int *out_port, char *err, size_t errlen) {
  struct addrinfo hints, *res = NULL, *ai;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char ps[16];
  int fd = -1, rc, one = 1, e = 0;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  snprintf(ps, sizeof ps, "%d", port);
  rc = getaddrinfo(host && *host ? host : NULL, ps, &hints, &res);
  if (rc) {
    snprintf(err, errlen, "%s: %s", host ? host : "*", gai_strerror(rc));
    return -1;
  }
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      e = uv_translate_sys_error(errno);
      continue;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 511)) break;
    e = uv_translate_sys_error(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    snprintf(err, errlen, "listen on %s:%d: %s", host ? host : "*", port, uv_strerror(e ? e : UV_EINVAL));
    return -1;
  }
  if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
    e = uv_translate_sys_error(errno);
    close(fd);
    snprintf(err, errlen, "getsockname: %s", uv_strerror(e));
    return -1;
  }
  *out_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

static void free_server(uv_handle_t *h) {
  free(h->data);
}

mw_http *mw__http_start(uv_loop_t *loop, const char *host, int port, const mw_http_limits *l,
                        mw_http_handler h, void *ud, char *err, size_t errlen) {
  char dummy[1];
  struct sigaction sa;
  mw_http *s;
  int fd;
  if (!err || !errlen) {
    err = dummy;
    errlen = sizeof dummy;
  }
  if (!loop || !h || port < 0 || port > 65535) {
    snprintf(err, errlen, "mw__http_start: bad argument");
    return NULL;
  }
  s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (l) s->lim = *l;
  mw__http_defaults(&s->lim);
  s->loop = loop;
  s->h = h;
  s->ud = ud;
  fd = bind_listen(host, port, &s->port, err, errlen);
  if (fd < 0) {
    free(s);
    return NULL;
  }
  /* A client that resets while we write must not kill the process: libuv
   * writes with write(2), which raises SIGPIPE.  Only the default action is
   * replaced; a host that installed its own handler keeps it. */
  if (!sigaction(SIGPIPE, NULL, &sa) && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL) {
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
  }
  uv_tcp_init(loop, &s->listener);
  uv_timer_init(loop, &s->finish);
  s->listener.data = s;
  s->finish.data = s;
  if (uv_tcp_open(&s->listener, fd) || uv_listen((uv_stream_t *)&s->listener, 511, on_connection)) {
    /* Not expected once bind and listen succeeded; the handles need the loop
     * to run once to be released. */
    snprintf(err, errlen, "listen on %s:%d failed", host ? host : "*", port);
    uv_close((uv_handle_t *)&s->finish, NULL);
    uv_close((uv_handle_t *)&s->listener, free_server);
    return NULL;
  }
  return s;
}

int mw__http_port(const mw_http *s) {
  return s ? s->port : -1;
}

void mw__http_respond(mw_http_req *pub, int status, const char *ctype, const char *body, size_t len) {
  req *r = (req *)pub;
  mw_http *s;
  conn *c;
  if (!r) return;
  assert(r->handed && !r->answered); /* exactly once per handed request */
  if (!r->handed || r->answered) return;
  s = r->s;
  c = r->c;
  r->answered = 1;
  s->outstanding--;
  if (!c) { /* the client went away: nothing to write */
    free_req(r);
    maybe_done(s);
    return;
  }
  if (--c->inflight == 0) c->quiet_since = uv_now(s->loop);
  if (frame(r, status, ctype, body, len)) {
    conn_close(c); /* frees r: answered and not being written */
    return;
  }
  flush(c);
  if (c->state != CLOSING) arm(c);
}

void mw__http_drain(mw_http *s, void (*done)(void *ud), void *ud) {
  conn *c, *next;
  if (!s || s->draining) return;
  s->draining = 1;
  s->done = done;
  s->done_ud = ud;
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
  for (c = s->conns; c; c = next) {
    next = c->next; /* conn_close unlinks only from its callback */
    if (c->state != OPEN) continue;
    if (!c->nq) {
      conn_close(c); /* idle, or only a partial request: nothing owed */
    } else {
      end_input(c);
      arm(c);
    }
  }
}

/* accepted counts connections admitted (rejected ones are only in rejected);
 * requests counts those handed to the handler; parse_errors the 400, 413 and
 * 431 answers of this layer; timeouts the slow requests (408) and the answers
 * a client would not take; an idle keep-alive expiring is not a timeout. */
void mw__http_stats(const mw_http *s, mw_http_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!s) return;
  *out = s->st;
  out->open = (uint64_t)s->open;
}
