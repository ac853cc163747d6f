/* http.h -- the host's HTTP/1.1 server on libuv: keep-alive, pipelining
 * answered in order, limits (header bytes, body bytes, idle and slow-client
 * timeouts, connections), graceful drain.  It parses (with the packaged
 * http_parser) and frames; it knows nothing of routes, JSON or the engine. */
#ifndef MW_HTTP_H
#define MW_HTTP_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct mw_http mw_http;

typedef struct mw_http_limits {
  size_t max_header_bytes;     /* request line + headers; default 16 KiB -> 431 */
  size_t max_body_bytes;       /* default 1 MiB -> 413 */
  uint64_t idle_timeout_ms;    /* keep-alive idle; default 60000 */
  uint64_t request_timeout_ms; /* first byte to whole request; default 10000 */
  int max_connections;         /* default 1024; past it: 503 and close */
  int max_pipeline;            /* requests queued per connection; default 32 */
} mw_http_limits;

typedef struct mw_http_req {
  uint64_t id;                 /* unique per server, for log lines */
  const char *method;          /* "GET", "POST", ... */
  const char *path;            /* URL path, percent-decoding NOT applied */
  const char *query;           /* after '?', "" if none */
  const char *authorization;   /* the Authorization header value, or NULL */
  const char *body;            /* NUL-terminated copy; body_len bytes */
  size_t body_len;
  uint64_t t0_ns;              /* uv_hrtime() when the request was complete */
  void *user;                  /* free for the handler */
} mw_http_req;

/* Called once per complete request, in arrival order per connection.  The
 * handler must call mw__http_respond exactly once for it, now or later (from
 * the loop thread).  Responding after the client went away is safe: the
 * answer is dropped and the request freed. */
typedef void (*mw_http_handler)(void *ud, mw_http_req *req);

/* Fills unset (zero) fields of l with the defaults. */
void mw__http_defaults(mw_http_limits *l);

/* Binds and listens on host:port (port 0 picks one; mw__http_port tells).
 * Returns NULL with err filled on failure. */
mw_http *mw__http_start(uv_loop_t *loop, const char *host, int port, const mw_http_limits *l,
                        mw_http_handler h, void *ud, char *err, size_t errlen);
int mw__http_port(const mw_http *s);

/* Sends status + body (Content-Type ctype) and frees req.  Answers are
 * written in request order on each connection; Connection: close is honoured;
 * keep-alive otherwise (HTTP/1.1 default, HTTP/1.0 only with keep-alive). */
void mw__http_respond(mw_http_req *req, int status, const char *ctype, const char *body, size_t len);

/* Stops accepting, lets in-flight requests finish and be answered, closes
 * every connection, then frees the server and calls done(ud).  Idempotent. */
void mw__http_drain(mw_http *s, void (*done)(void *ud), void *ud);

/* Figures for /metrics: open connections, total accepted, rejected (limit). */
typedef struct mw_http_stats {
  uint64_t open, accepted, rejected, requests, parse_errors, timeouts;
} mw_http_stats;
void mw__http_stats(const mw_http *s, mw_http_stats *out);
#endif
