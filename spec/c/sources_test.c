/* sources_test.c -- the source locators (runtime/sources.c) against real
 * local data: files, folders, git repositories, feeds from a tiny HTTP server
 * on 127.0.0.1 (its own thread), and another actor's log in a temp home.
 * Prints TAP lines; exits 0 only if every case passes.  After every pull:
 * the callback fired exactly once and never inside mw__pull_start, the loop
 * has nothing left open, and items and horizon are canonical JSON. */
#include "jfield.h"
#include "json.h"
#include "mw.h"
#include "sources.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int ntest, nfail;

static void ok(int cond, const char *fmt, ...) {
  va_list ap;
  char name[512];
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  ntest++;
  if (!cond) nfail++;
  printf("%s %d - %s\n", cond ? "ok" : "not ok", ntest, name);
  fflush(stdout);
}

static char ROOT[256], OUT[256], HOME_[300];
static const char *roots[1];

static void sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) {
    fprintf(stderr, "command failed: %s\n", cmd);
    exit(2);
  }
}

static void put(const char *path, const char *mode, const char *s) {
  FILE *f = fopen(path, mode);
  if (!f) {
    perror(path);
    exit(2);
  }
  fputs(s, f);
  fclose(f);
}

static uint64_t now_ms(void) { return uv_hrtime() / 1000000; }

/* ---- pulling ------------------------------------------------------------- */

static uv_loop_t loop;

typedef struct got {
  int calls, rc, in_start;
  char err[512];
  char *items, *hz;
  uint64_t at;      /* ms (uv_hrtime) when cb ran */
} got;

static void got_free(got *g) {
  free(g->items);
  free(g->hz);
  memset(g, 0, sizeof *g);
}

static void on_pull(void *ud, mw_pull_res *r) {
  got *g = ud;
  g->calls++;
  if (g->in_start) g->in_start = 2;
  g->rc = r->rc;
  snprintf(g->err, sizeof g->err, "%s", r->error);
  free(g->items);
  free(g->hz);
  g->items = strndup(r->items.p ? r->items.p : "", r->items.len);
  g->hz = strndup(r->horizon.p ? r->horizon.p : "", r->horizon.len);
  g->at = now_ms();
}

static mw_pull_req req(const char *loc, const char *hz) {
  mw_pull_req r;
  memset(&r, 0, sizeof r);
  r.source_id = "src";
  r.locator = loc;
  r.horizon = hz;
  r.roots = roots;
  r.nroots = 1;
  r.home = HOME_;
  r.tenant = "t1";
  return r;
}

static int canonical(const char *s) {
  mw_buf b = {0};
  char e[100];
  int c = mw__json_canon(s, strlen(s), &b, e, sizeof e) == 0 && b.len == strlen(s) && memcmp(b.p, s, b.len) == 0;
  mw__buf_free(&b);
  return c;
}

/* Element i of a canonical JSON array (malloc'd), or NULL. */
static size_t skipv(const char *s, size_t n, size_t i) {
  int depth = 0;
  for (; i < n; i++) {
    char c = s[i];
    if (c == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
      if (!depth) return i + 1;
      continue;
    }
    if (c == '{' || c == '[') depth++;
    else if (c == '}' || c == ']') {
      if (depth == 0) return i;
      if (--depth == 0) return i + 1;
    } else if (c == ',' && !depth) return i;
  }
  return n;
}

static int count(const char *a) {
  size_t n = strlen(a), i = 1;
  int k = 0;
  if (n < 2 || a[0] != '[') return -1;
  while (i < n && a[i] != ']') {
    i = skipv(a, n, i);
    k++;
    if (a[i] == ',') i++;
  }
  return k;
}

static char *item(const char *a, int want) {
  size_t n = strlen(a), i = 1;
  int k = 0;
  while (i < n && a[i] != ']') {
    size_t j = skipv(a, n, i);
    if (k++ == want) return strndup(a + i, j - i);
    i = j;
    if (a[i] == ',') i++;
  }
  return NULL;
}

/* The string field key of item i, in a static buffer ("" if absent). */
static const char *field(const char *a, int i, const char *key) {
  static char out[8][4096];
  static int slot;
  char *o = out[slot++ & 7], *it = item(a, i);
  const char *v;
  size_t vn;
  o[0] = '\0';
  if (it && mw__jfield(it, strlen(it), key, &v, &vn) == 0) {
    if (v[0] != '"') snprintf(o, 4096, "%.*s", (int)vn, v);
    else if (mw__jstring(v, vn, o, 4096) < 0) o[0] = '\0';   /* too long for here */
  }
  free(it);
  return o;
}

/* Side conditions of every pull. */
static void sides(const char *name, got *g) {
  int good = g->calls == 1 && g->in_start != 2 && !uv_loop_alive(&loop) && g->items && g->hz && canonical(g->items) &&
             canonical(g->hz) && count(g->items) >= 0 && g->hz[0] == '{';
  for (int i = 0; good && i < count(g->items); i++) good = field(g->items, i, "id")[0] && field(g->items, i, "kind")[0];
  if (good && g->rc) good = g->err[0] != '\0' && strncmp(g->err, "source src: ", 12) == 0;
  ok(good, "%s: cb once, not re-entrant, loop empty, canonical items and horizon", name);
  if (!good)
    fprintf(stderr, "# calls=%d in_start=%d alive=%d items=%s hz=%s err=%s\n", g->calls, g->in_start,
            uv_loop_alive(&loop), g->items ? g->items : "(null)", g->hz ? g->hz : "(null)", g->err);
}

static void run(const char *name, mw_pull_req r, got *g) {
  got_free(g);
  g->in_start = 1;
  int rc = mw__pull_start(&loop, &r, on_pull, g);
  g->in_start = 0;
  if (rc) {
    ok(0, "%s: mw__pull_start returned %d", name, rc);
    return;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  sides(name, g);
}

/* ---- a tiny HTTP server ------------------------------------------------- */

static int srv_fd, srv_port, srv_stop;
static pthread_t srv_thread, conn_threads[256];
static int nconn;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *feed_json;   /* what /json serves (under mu) */

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void respond(int fd, int status, const char *ctype, const char *body, int with_len) {
  char h[512];
  int n = snprintf(h, sizeof h, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", status, status == 200 ? "OK" : "Not Found", ctype);
  if (with_len) n += snprintf(h + n, sizeof h - n, "Content-Length: %zu\r\n", strlen(body));
  n += snprintf(h + n, sizeof h - n, "Connection: close\r\n\r\n");
  send_all(fd, h, (size_t)n);
  send_all(fd, body, strlen(body));
}

static const char RSS[] =
  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
  "<rss version=\"2.0\" xmlns:atom=\"http://www.w3.org/2005/Atom\"><channel><title>Chan</title>"
  "<link>http://example.org/</link>"
  "<item><title>First &amp; best</title><link>http://example.org/1</link><guid>g-1</guid>"
  "<pubDate>Sat, 07 Sep 2002 00:00:01 GMT</pubDate><description>one &lt;b&gt;</description></item>"
  "<item><title>Second</title><link>http://example.org/2</link>"
  "<pubDate>Sun, 08 Sep 2002 10:00:00 +0200</pubDate></item>"
  "<item><title><![CDATA[Third]]></title></item>"
  "</channel></rss>\n";

static const char ATOM[] =
  "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
  "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title>A</title><id>urn:feed</id>"
  "<entry><title>Atom one</title><link rel=\"self\" href=\"http://x/self\"/><link href=\"http://x/1\"/>"
  "<id>urn:uuid:1</id><updated>2003-12-13T18:30:02Z</updated><summary>sum 1</summary></entry>"
  "<entry><title type=\"xhtml\"><div xmlns=\"http://www.w3.org/1999/xhtml\">Atom <b>two</b></div></title>"
  "<link rel=\"alternate\" href=\"http://x/2\"/><id>urn:uuid:2</id>"
  "<updated>2003-12-13T18:30:02.250+01:00</updated><content>body 2</content></entry>"
  "</feed>";

static const char ENTITY[] =
  "<?xml version=\"1.0\"?><!DOCTYPE rss [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;\">]>"
  "<rss><channel><item><title>&b;</title></item></channel></rss>";

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  char rq[4096];
  size_t n = 0;
  while (n < sizeof rq - 1) {
    ssize_t r = recv(fd, rq + n, sizeof rq - 1 - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
    rq[n] = '\0';
    if (strstr(rq, "\r\n\r\n")) break;
  }
  rq[n] = '\0';
  char path[256] = "";
  sscanf(rq, "GET %255s", path);
  if (strcmp(path, "/json") == 0) {
    pthread_mutex_lock(&mu);
    char *b = strdup(feed_json);
    pthread_mutex_unlock(&mu);
    respond(fd, 200, "application/json", b, 1);
    free(b);
  } else if (strcmp(path, "/jsonobj") == 0) {
    respond(fd, 200, "application/json",
            "{\"version\":\"https://jsonfeed.org/version/1\",\"items\":[{\"id\":\"a\",\"title\":\"A\",\"kind\":\"note\"},"
            "{\"guid\":\"g\",\"z\":1,\"a\":[1,2]},{\"link\":\"http://l\"},{\"id\":7},{\"title\":\"no id\"},\"bare\","
            "{\"id\":\"a\",\"title\":\"dup\"}]}",
            0);
  } else if (strcmp(path, "/entries") == 0) {
    respond(fd, 200, "application/json", "{\"entries\":[{\"id\":\"e1\"}]}", 1);
  } else if (strcmp(path, "/noitems") == 0) {
    respond(fd, 200, "application/json", "{\"hello\":1}", 1);
  } else if (strcmp(path, "/badjson") == 0) {
    respond(fd, 200, "application/json", "[{\"a\":1,}]", 1);
  } else if (strcmp(path, "/rss") == 0) {
    respond(fd, 200, "application/rss+xml", RSS, 1);
  } else if (strcmp(path, "/atom") == 0) {
    respond(fd, 200, "application/atom+xml", ATOM, 0);
  } else if (strcmp(path, "/text") == 0) {
    respond(fd, 200, "text/plain", "hello, this is not a feed\n", 1);
  } else if (strcmp(path, "/html") == 0) {
    respond(fd, 200, "text/html", "<html><body><p>hi</p></body></html>", 1);
  } else if (strcmp(path, "/badxml") == 0) {
    respond(fd, 200, "application/xml", "<rss><channel><item></channel>", 1);
  } else if (strcmp(path, "/entity") == 0) {
    respond(fd, 200, "application/xml", ENTITY, 1);
  } else if (strcmp(path, "/big") == 0 || strcmp(path, "/bigclose") == 0) {
    size_t big = 20u << 20;
    char h[256];
    int hl = strcmp(path, "/big") == 0
               ? snprintf(h, sizeof h, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", big)
               : snprintf(h, sizeof h, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n");
    send_all(fd, h, (size_t)hl);
    char *chunk = malloc(1 << 16);
    memset(chunk, ' ', 1 << 16);
    chunk[0] = '[';
    for (size_t sent = 0; sent < big; sent += 1 << 16) {
      ssize_t w = send(fd, chunk, 1 << 16, MSG_NOSIGNAL);
      if (w <= 0) break;
      chunk[0] = ' ';
    }
    free(chunk);
  } else if (strcmp(path, "/slow") == 0) {
    /* Sleeps 2 s, or until the client gives up and closes. */
    struct pollfd pf = {fd, POLLIN, 0};
    poll(&pf, 1, 2000);
    respond(fd, 200, "application/json", "[]", 1);
  } else {
    respond(fd, 404, "text/plain", "nope", 1);
  }
  close(fd);
  return NULL;
}

static void *srv_main(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(srv_fd, NULL, NULL);
    if (fd < 0) {
      if (srv_stop) break;
      if (errno == EINTR) continue;
      break;
    }
    if (nconn == 256) {
      close(fd);
      continue;
    }
    pthread_create(&conn_threads[nconn++], NULL, conn_main, (void *)(intptr_t)fd);
  }
  return NULL;
}

static void srv_start(void) {
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  srv_fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(srv_fd, (struct sockaddr *)&a, sizeof a) || listen(srv_fd, 64)) {
    perror("server");
    exit(2);
  }
  getsockname(srv_fd, (struct sockaddr *)&a, &al);
  srv_port = ntohs(a.sin_port);
  feed_json = strdup("[{\"id\":\"1\",\"title\":\"one\"},{\"id\":\"2\",\"title\":\"two\"}]");
  pthread_create(&srv_thread, NULL, srv_main, NULL);
}

static void srv_end(void) {
  srv_stop = 1;
  shutdown(srv_fd, SHUT_RDWR);
  pthread_join(srv_thread, NULL);
  close(srv_fd);
  for (int i = 0; i < nconn; i++) pthread_join(conn_threads[i], NULL);
  free(feed_json);
}

static char *url(const char *path) {
  static char u[8][256];
  static int slot;
  char *o = u[slot++ & 7];
  snprintf(o, 256, "http://127.0.0.1:%d%s", srv_port, path);
  return o;
}

/* ---- cases --------------------------------------------------------------- */

static void t_locators(void) {
  char e[512], loc[PATH_MAX + 16];
  int rc = mw__locator_check("ftp://x/y", roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "unknown scheme \"ftp\""), "unknown scheme refused: %s", e);
  rc = mw__locator_check("https://example.org/feed", roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "https is not supported: no TLS in this host"), "https refused: %s", e);
  snprintf(loc, sizeof loc, "file:%s/../etc/passwd", ROOT);
  rc = mw__locator_check(loc, roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "\"..\""), "a .. segment is refused: %s", e);
  snprintf(loc, sizeof loc, "dir:%s/sub/..", ROOT);
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == MW_EINVAL, "a trailing .. is refused");
  snprintf(loc, sizeof loc, "file:%s/esc/secret.txt", ROOT);   /* esc -> OUT */
  rc = mw__locator_check(loc, roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "outside the configured roots") && strstr(e, "resolves to"),
     "a symlink leading out of the root is refused: %s", e);
  snprintf(loc, sizeof loc, "file:%s/esc-file", ROOT);   /* esc-file -> OUT/secret.txt */
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == MW_EINVAL, "a symlinked file leading out is refused");
  snprintf(loc, sizeof loc, "file:%s/dangling", ROOT);
  rc = mw__locator_check(loc, roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "symlink to nothing"), "a dangling symlink is refused: %s", e);
  snprintf(loc, sizeof loc, "file:%s/secret.txt", OUT);
  rc = mw__locator_check(loc, roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "outside the configured roots"), "a path outside the roots is refused: %s", e);
  snprintf(loc, sizeof loc, "file:%sx/a.log", ROOT);   /* a sibling sharing the root's prefix */
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == MW_EINVAL, "a prefix sibling of the root is refused");
  snprintf(loc, sizeof loc, "file:%s/in-link", ROOT);   /* in-link -> ROOT/inside.txt, stays inside */
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == 0, "a symlink staying inside the root is fine");
  snprintf(loc, sizeof loc, "file:%s/not-yet.log", ROOT);
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == 0, "a file not yet created under the root is fine");
  snprintf(loc, sizeof loc, "file://%s/app.log", ROOT);
  ok(mw__locator_check(loc, roots, 1, e, sizeof e) == 0, "file:///abs is accepted");
  rc = mw__locator_check("file:relative/path", roots, 1, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "not absolute"), "a relative path is refused: %s", e);
  snprintf(loc, sizeof loc, "file:%s/app.log", ROOT);
  rc = mw__locator_check(loc, NULL, 0, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "no roots configured: the operator allows none"), "no roots: every path refused: %s", e);
  ok(mw__locator_check("log:bob", NULL, 0, e, sizeof e) == 0, "log:ACTOR is fine without roots");
  rc = mw__locator_check("log:../bob", NULL, 0, e, sizeof e);
  ok(rc == MW_EINVAL && strstr(e, "actor id"), "log: with a bad actor id refused: %s", e);
  ok(mw__locator_check("log:", NULL, 0, e, sizeof e) == MW_EINVAL, "log: with no actor refused");
  ok(mw__locator_check("http://127.0.0.1:8080/feed?x=1", NULL, 0, e, sizeof e) == 0, "http:// with a port is fine");
  ok(mw__locator_check("http://u:p@host/", NULL, 0, e, sizeof e) == MW_EINVAL, "credentials in a URL refused");
  ok(mw__locator_check("http://host:99999/", NULL, 0, e, sizeof e) == MW_EINVAL, "a bad port refused");
  ok(mw__locator_check("http://ho st/", NULL, 0, e, sizeof e) == MW_EINVAL, "a space in a URL refused");
  ok(mw__locator_check("nothing", NULL, 0, e, sizeof e) == MW_EINVAL && strstr(e, "no scheme"), "no scheme refused");

  got g = {0};
  run("unknown scheme through a pull", req("gopher://x", NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "unknown scheme"), "a pull with an unknown scheme: an error entry: %s", g.err);
  ok(strcmp(g.items, "[]") == 0 && strcmp(g.hz, "{}") == 0, "error: items [] and horizon {}");
  snprintf(loc, sizeof loc, "file:%s/esc/secret.txt", ROOT);
  run("escaping symlink through a pull", req(loc, "{\"offset\":3, \"ino\":1}"), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "outside"), "a pull through a symlink leading out: refused: %s", g.err);
  ok(strcmp(g.hz, "{\"ino\":1,\"offset\":3}") == 0, "error: the given horizon comes back (canonical): %s", g.hz);
  got_free(&g);
}

static void t_file(void) {
  char path[PATH_MAX], loc[PATH_MAX + 8], hz[512];
  got g = {0};
  snprintf(path, sizeof path, "%s/app.log", ROOT);
  snprintf(loc, sizeof loc, "file:%s", path);
  put(path, "w", "alpha\nbeta \"q\"\r\ngamma\tx\nfour");
  run("file first pull", req(loc, NULL), &g);
  ok(g.rc == 0 && count(g.items) == 3, "file: three complete lines (partial last line left): %s", g.items);
  ok(strcmp(field(g.items, 0, "text"), "alpha") == 0 && strcmp(field(g.items, 1, "text"), "beta \"q\"") == 0 &&
       strcmp(field(g.items, 2, "text"), "gamma\tx") == 0,
     "file: texts (CRLF stripped, quotes and tabs escaped)");
  ok(strcmp(field(g.items, 0, "kind"), "line") == 0 && strcmp(field(g.items, 1, "offset"), "6") == 0,
     "file: kind line, offsets");
  struct stat st;
  stat(path, &st);
  char want_id[64];
  snprintf(want_id, sizeof want_id, "%llu:6", (unsigned long long)st.st_ino);
  ok(strcmp(field(g.items, 1, "id"), want_id) == 0, "file: id is <ino>:<offset> (%s)", field(g.items, 1, "id"));
  snprintf(hz, sizeof hz, "%s", g.hz);
  ok(strstr(hz, "\"offset\":24") != NULL, "file: horizon at the end of the last full line: %s", hz);

  put(path, "a", "\nfive\n");
  run("file second pull", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "text"), "four") == 0 &&
       strcmp(field(g.items, 1, "text"), "five") == 0,
     "file: the second pull returns only the new lines: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);
  run("file nothing new", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 0 && strcmp(g.hz, hz) == 0, "file: nothing new, same horizon");

  /* Rotation: the file moves away, a new one takes its name. */
  char rotated[PATH_MAX + 8];
  snprintf(rotated, sizeof rotated, "%s.1", path);
  rename(path, rotated);
  put(path, "w", "new one\n");
  run("file rotation", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "text"), "new one") == 0,
     "file: rotation (new inode) restarts at 0: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* Truncation: shorter than the offset. */
  put(path, "a", "more\nand more\n");
  run("file before truncation", req(loc, hz), &g);
  snprintf(hz, sizeof hz, "%s", g.hz);
  truncate(path, 0);
  put(path, "a", "t1\n");
  run("file truncation", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "text"), "t1") == 0,
     "file: truncation (shorter than the offset) restarts at 0: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* copytruncate, then grown back past the old offset before the next pull. */
  truncate(path, 0);
  put(path, "a", "rewritten first line\nsecond\n");
  run("file truncated and regrown", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "text"), "rewritten first line") == 0,
     "file: truncated and regrown past the offset: caught by the head fingerprint: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* Bytes that are not UTF-8, control bytes. */
  put(path, "a", "bad \xff\xfe utf8 \x01 \xc3\xa9\n");
  run("file odd bytes", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "text"), "bad \xEF\xBF\xBD\xEF\xBF\xBD utf8 \x01 \xc3\xa9") == 0,
     "file: invalid UTF-8 becomes U+FFFD, control bytes escaped, valid UTF-8 kept");
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* max_items pages through. */
  for (int i = 0; i < 10; i++) put(path, "a", "page\n");
  mw_pull_req r = req(loc, hz);
  r.max_items = 4;
  run("file max_items", r, &g);
  ok(g.rc == 0 && count(g.items) == 4, "file: max_items 4 returns 4");
  snprintf(hz, sizeof hz, "%s", g.hz);
  r = req(loc, hz);
  r.max_items = 100;
  run("file rest", r, &g);
  ok(g.rc == 0 && count(g.items) == 6, "file: the next pull returns the other 6");
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* A line longer than max_bytes comes in pieces marked cut. */
  char longline[3000];
  memset(longline, 'x', 2500);
  strcpy(longline + 2500, "\n");
  put(path, "a", longline);
  r = req(loc, hz);
  r.max_bytes = 1000;
  run("file long line", r, &g);
  ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "cut"), "true") == 0 &&
       strlen(field(g.items, 0, "text")) == 1000,
     "file: a line over max_bytes comes cut");
  got_free(&g);

  /* Offsets across digit boundaries (9->10, 99->100, ...) and lines across
   * the 64 KB read window, one of them longer than the window. */
  {
    char big[PATH_MAX + 8], bloc[PATH_MAX + 16];
    snprintf(big, sizeof big, "%s/offsets.log", ROOT);
    snprintf(bloc, sizeof bloc, "file:%s", big);
    FILE *f = fopen(big, "w");
    long offs[700], o = 0;
    int nl = 0;
    for (int i = 0; i < 700; i++) {
      int len = i == 350 ? 100000 : (i * 37) % 300;   /* line 350 is longer than the window */
      offs[nl++] = o;
      for (int k = 0; k < len; k++) fputc('a' + (i + k) % 26, f);
      fputc('\n', f);
      o += len + 1;
    }
    fclose(f);
    run("file offsets", req(bloc, NULL), &g);
    int good = g.rc == 0 && count(g.items) == 700;
    for (int i = 0; good && i < 700; i++) {
      char want[32];
      snprintf(want, sizeof want, "%ld", offs[i]);
      good = strcmp(field(g.items, i, "offset"), want) == 0 && strstr(field(g.items, i, "id"), want);
      if (good && i != 350) good = strlen(field(g.items, i, "text")) == (size_t)((i * 37) % 300);
      if (good && i == 350) {
        char *it = item(g.items, i);
        good = it && strlen(it) > 100000 && strlen(it) < 100100;
        free(it);
      }
      if (!good) fprintf(stderr, "# item %d: offset %s want %s\n", i, field(g.items, i, "offset"), want);
    }
    ok(good, "file: 700 lines, offsets exact across digit and window boundaries");
    char bhz[512];
    snprintf(bhz, sizeof bhz, "%s", g.hz);
    f = fopen(big, "a");
    for (int k = 0; k < 150000; k++) fputc('z', f);
    fputs("\nafter\n", f);
    fclose(f);
    mw_pull_req br = req(bloc, bhz);
    br.max_bytes = 100000;
    run("file cut beyond the window", br, &g);
    char *it = item(g.items, 0);
    ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "cut"), "true") == 0 && it &&
         strlen(it) > 100000 && strlen(it) < 100100,
       "file: a 150 KB line with max_bytes 100000 comes cut at 100000 (%d items, %s)", count(g.items), g.err);
    free(it);
    snprintf(bhz, sizeof bhz, "%s", g.hz);
    br = req(bloc, bhz);
    run("file rest of the cut line", br, &g);
    it = item(g.items, 0);
    ok(g.rc == 0 && count(g.items) == 2 && it && strlen(it) > 50000 && strlen(it) < 50100 &&
         strcmp(field(g.items, 1, "text"), "after") == 0,
       "file: the rest of the cut line, then the next line");
    free(it);
    unlink(big);
  }

  /* Regression: the deadline is measured from mw__pull_start, not from the
   * loop's cached clock (stale after a long pause outside uv_run). */
  {
    uv_update_time(&loop);
    struct timespec ts = {0, 400 * 1000000L};
    nanosleep(&ts, NULL);
    mw_pull_req dr = req(loc, hz);
    dr.deadline_ms = 300;
    run("stale loop clock", dr, &g);
    ok(g.rc != MW_ETIMEOUT, "file: a pull after 400 ms outside uv_run keeps its 300 ms deadline: %s", g.err);
  }

  /* Vanished. */
  unlink(path);
  run("file vanished", req(loc, hz), &g);
  ok(g.rc == MW_ENOENT && strstr(g.err, "vanished"), "file: a vanished file is a clear error: %s", g.err);
  ok(strcmp(g.hz, hz) == 0, "file: the horizon survives the error");
  snprintf(loc, sizeof loc, "file:%s/never.log", ROOT);
  run("file never there", req(loc, NULL), &g);
  ok(g.rc == MW_ENOENT && strstr(g.err, "does not exist"), "file: a file never there: %s", g.err);
  snprintf(loc, sizeof loc, "file:%s/fifo", ROOT);
  run("file fifo", req(loc, NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "not a regular file"), "file: a FIFO is refused without hanging: %s", g.err);
  snprintf(loc, sizeof loc, "file:%s/app.log", ROOT);
  run("file bad horizon", req(loc, "{not json"), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "horizon is not valid JSON"), "file: a bad horizon is a clear error: %s", g.err);
  got_free(&g);
}

static void set_mtime(const char *path, time_t sec, long ms) {
  struct timespec ts[2] = {{sec, ms * 1000000L}, {sec, ms * 1000000L}};
  utimensat(AT_FDCWD, path, ts, 0);
}

static void t_dir(void) {
  char d[PATH_MAX], p[PATH_MAX + 32], loc[PATH_MAX + 8], hz[4096];
  got g = {0};
  snprintf(d, sizeof d, "%s/inbox", ROOT);
  mkdir(d, 0700);
  snprintf(loc, sizeof loc, "dir:%s", d);
  snprintf(p, sizeof p, "%s/b.txt", d), put(p, "w", "bb"), set_mtime(p, 1700000000, 0);
  snprintf(p, sizeof p, "%s/a.txt", d), put(p, "w", "a"), set_mtime(p, 1700000000, 0);
  snprintf(p, sizeof p, "%s/c.txt", d), put(p, "w", "ccc"), set_mtime(p, 1600000000, 500);
  snprintf(p, sizeof p, "%s/sub", d), mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/sub/deep.txt", d), put(p, "w", "deep");
  snprintf(p, sizeof p, "%s/link.txt", d), symlink("/etc/passwd", p);
  run("dir first pull", req(loc, NULL), &g);
  ok(g.rc == 0 && count(g.items) == 3, "dir: three top-level regular files (no subfolder, no symlink): %s", g.items);
  ok(strcmp(field(g.items, 0, "path"), "c.txt") == 0 && strcmp(field(g.items, 1, "path"), "a.txt") == 0 &&
       strcmp(field(g.items, 2, "path"), "b.txt") == 0,
     "dir: sorted by (mtime, path)");
  ok(strcmp(field(g.items, 0, "id"), "c.txt@1600000000500") == 0 && strcmp(field(g.items, 0, "size"), "3") == 0 &&
       strcmp(field(g.items, 0, "kind"), "file") == 0,
     "dir: id <path>@<mtime_ms>, size, kind file");
  snprintf(hz, sizeof hz, "%s", g.hz);
  run("dir nothing new", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 0, "dir: nothing new");

  snprintf(p, sizeof p, "%s/a.txt", d), put(p, "a", "more"), set_mtime(p, 1700000100, 0);
  snprintf(p, sizeof p, "%s/d.txt", d), put(p, "w", "new"), set_mtime(p, 1700000000, 0);   /* shares an old mtime */
  snprintf(p, sizeof p, "%s/e.txt", d), put(p, "w", "older"), set_mtime(p, 1500000000, 0);  /* mtime in the past */
  run("dir second pull", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 3 && strcmp(field(g.items, 0, "path"), "e.txt") == 0 &&
       strcmp(field(g.items, 1, "path"), "d.txt") == 0 && strcmp(field(g.items, 2, "path"), "a.txt") == 0,
     "dir: added and changed files only, also with a shared or older mtime: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);

  /* max_items: what is not returned comes next time. */
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof p, "%s/m%d.txt", d, i);
    put(p, "w", "m");
    set_mtime(p, 1700000200 + i, 0);
  }
  mw_pull_req r = req(loc, hz);
  r.max_items = 2;
  run("dir max_items", r, &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 1, "path"), "m1.txt") == 0, "dir: max_items 2");
  snprintf(hz, sizeof hz, "%s", g.hz);
  run("dir rest", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 3 && strcmp(field(g.items, 0, "path"), "m2.txt") == 0,
     "dir: the rest on the next pull: %s", g.items);
  got_free(&g);

  snprintf(loc, sizeof loc, "dir:%s/gone", ROOT);
  run("dir missing", req(loc, hz), &g);
  ok(g.rc == MW_ENOENT && strstr(g.err, "vanished"), "dir: a vanished folder: %s", g.err);
  snprintf(loc, sizeof loc, "dir:%s/app.log.1", ROOT);
  run("dir on a file", req(loc, NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "not a folder"), "dir: a file is not a folder: %s", g.err);
  got_free(&g);
}

static void git_commit(const char *repo, const char *msg) {
  sh("git -C '%s' -c user.name='T Author' -c user.email=t@t commit -q --allow-empty -m '%s'", repo, msg);
}

static void t_git(void) {
  char repo[PATH_MAX], loc[PATH_MAX + 8], hz[512];
  got g = {0};
  snprintf(repo, sizeof repo, "%s/repo", ROOT);
  sh("git init -q '%s'", repo);
  snprintf(loc, sizeof loc, "git:%s", repo);
  run("git empty repo", req(loc, NULL), &g);
  ok(g.rc == 0 && count(g.items) == 0 && strcmp(g.hz, "{}") == 0, "git: a repository with no commits yet: nothing");
  git_commit(repo, "one");
  git_commit(repo, "two \"quoted\"");
  git_commit(repo, "three");
  run("git first pull", req(loc, NULL), &g);
  ok(g.rc == 0 && count(g.items) == 3 && strcmp(field(g.items, 0, "subject"), "one") == 0 &&
       strcmp(field(g.items, 1, "subject"), "two \"quoted\"") == 0 && strcmp(field(g.items, 2, "subject"), "three") == 0,
     "git: commits oldest first: %s", g.items);
  ok(strcmp(field(g.items, 0, "kind"), "commit") == 0 && strcmp(field(g.items, 0, "author"), "T Author") == 0 &&
       strlen(field(g.items, 0, "id")) == 40 && atoll(field(g.items, 0, "at")) > 1500000000000LL,
     "git: kind, author, id (hash), at (ms)");
  char head[64];
  snprintf(head, sizeof head, "%s", field(g.items, 2, "id"));
  snprintf(hz, sizeof hz, "%s", g.hz);
  ok(strstr(hz, head) != NULL, "git: horizon is the newest commit: %s", hz);

  git_commit(repo, "four");
  git_commit(repo, "five");
  run("git second pull", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "subject"), "four") == 0 &&
       strcmp(field(g.items, 1, "subject"), "five") == 0,
     "git: the second pull returns only the new commits: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);
  run("git nothing new", req(loc, hz), &g);
  ok(g.rc == 0 && count(g.items) == 0 && strcmp(g.hz, hz) == 0, "git: nothing new, same horizon");

  mw_pull_req r = req(loc, NULL);
  r.max_items = 2;
  run("git max_items first", r, &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 1, "subject"), "five") == 0,
     "git: a first pull returns the newest max_items");
  r = req(loc, "{\"commit\":\"0123456789abcdef0123456789abcdef01234567\"}");
  run("git unknown horizon commit", r, &g);
  ok(g.rc == 0 && count(g.items) == 5, "git: a horizon commit gone from history restarts: %d items", count(g.items));
  r = req(loc, "{\"commit\":\"--output=/tmp/x\"}");
  run("git hostile horizon", r, &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "not a hash"), "git: a horizon commit that is not a hash is refused");

  char plain[PATH_MAX];
  snprintf(plain, sizeof plain, "%s/notrepo", ROOT);
  mkdir(plain, 0700);
  snprintf(loc, sizeof loc, "git:%s", plain);
  run("git not a repository", req(loc, NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "is not a git repository"), "git: a folder that is not a repository: %s", g.err);
  /* Inside a repository but not its top: git must not climb to the parent. */
  snprintf(plain, sizeof plain, "%s/repo/subdir", ROOT);
  mkdir(plain, 0700);
  snprintf(loc, sizeof loc, "git:%s", plain);
  run("git subfolder", req(loc, NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "is not a git repository"), "git: no climbing to an enclosing repository");
  snprintf(loc, sizeof loc, "git:%s/nowhere", ROOT);
  run("git missing", req(loc, NULL), &g);
  ok(g.rc == MW_ENOENT, "git: a missing path: %s", g.err);

  /* A git that hangs: the deadline answers, the child is killed. */
  char bin[PATH_MAX + 8], script[PATH_MAX + 16], newpath[8192];
  snprintf(bin, sizeof bin, "%s/bin", OUT);
  mkdir(bin, 0700);
  snprintf(script, sizeof script, "%s/git", bin);
  put(script, "w", "#!/bin/sh\nexec sleep 5\n");
  chmod(script, 0700);
  char *oldpath = strdup(getenv("PATH"));
  snprintf(newpath, sizeof newpath, "%s:%s", bin, oldpath);
  setenv("PATH", newpath, 1);
  snprintf(loc, sizeof loc, "git:%s", repo);
  r = req(loc, NULL);
  r.deadline_ms = 200;
  uint64_t t0 = now_ms();
  run("git hangs", r, &g);
  uint64_t took = now_ms() - t0;
  setenv("PATH", oldpath, 1);
  free(oldpath);
  ok(g.rc == MW_ETIMEOUT && strstr(g.err, "no answer within 200 ms") && g.at - t0 < 1000 && took < 1500,
     "git: a hanging git times out (%llu ms to answer, %llu ms to clean up): %s", (unsigned long long)(g.at - t0),
     (unsigned long long)took, g.err);
  got_free(&g);
}

static void t_http(void) {
  got g = {0};
  char hz[8192];
  run("json feed", req(url("/json"), NULL), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "id"), "1") == 0 &&
       strcmp(field(g.items, 0, "kind"), "feed") == 0 && strcmp(field(g.items, 1, "title"), "two") == 0,
     "http: a JSON array feed: %s", g.items);
  snprintf(hz, sizeof hz, "%s", g.hz);
  ok(strcmp(hz, "{\"seen\":[\"1\",\"2\"]}") == 0, "http: horizon lists the ids seen: %s", hz);
  run("json feed again", req(url("/json"), hz), &g);
  ok(g.rc == 0 && count(g.items) == 0, "http: the second pull returns nothing already seen");
  pthread_mutex_lock(&mu);
  free(feed_json);
  feed_json = strdup("[{\"id\":\"3\",\"title\":\"three\"},{\"id\":\"2\",\"title\":\"two\"}]");
  pthread_mutex_unlock(&mu);
  run("json feed changed", req(url("/json"), hz), &g);
  ok(g.rc == 0 && count(g.items) == 1 && strcmp(field(g.items, 0, "id"), "3") == 0,
     "http: only the new item: %s", g.items);

  run("json object feed", req(url("/jsonobj"), NULL), &g);
  ok(g.rc == 0 && count(g.items) == 6, "http: an object with items, the repeated id dropped: %d", count(g.items));
  ok(strcmp(field(g.items, 0, "kind"), "note") == 0 && strcmp(field(g.items, 1, "id"), "g") == 0 &&
       strcmp(field(g.items, 2, "id"), "http://l") == 0 && strcmp(field(g.items, 3, "id"), "7") == 0 &&
       strlen(field(g.items, 4, "id")) == 64 && strcmp(field(g.items, 5, "value"), "bare") == 0,
     "http: ids from id, guid, link, a number, a SHA-256; a non-object item kept as value");
  run("json entries feed", req(url("/entries"), NULL), &g);
  ok(g.rc == 0 && count(g.items) == 1, "http: an object with entries");
  run("json no items", req(url("/noitems"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "no \"items\" or \"entries\""), "http: JSON without items: %s", g.err);
  run("bad json", req(url("/badjson"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "not valid JSON"), "http: broken JSON: %s", g.err);

  run("rss feed", req(url("/rss"), NULL), &g);
  ok(g.rc == 0 && count(g.items) == 3, "http: RSS, three items: %s", g.items);
  ok(strcmp(field(g.items, 0, "id"), "g-1") == 0 && strcmp(field(g.items, 0, "title"), "First & best") == 0 &&
       strcmp(field(g.items, 0, "link"), "http://example.org/1") == 0 &&
       strcmp(field(g.items, 0, "text"), "one <b>") == 0 && strcmp(field(g.items, 0, "at"), "1031356801000") == 0,
     "http: RSS item fields (guid, title, link, description, pubDate in ms)");
  ok(strcmp(field(g.items, 1, "id"), "http://example.org/2") == 0 && strcmp(field(g.items, 1, "at"), "1031472000000") == 0 &&
       strcmp(field(g.items, 2, "title"), "Third") == 0 && strlen(field(g.items, 2, "id")) == 64,
     "http: RSS id falls back to link, then a hash; zone offsets applied");
  snprintf(hz, sizeof hz, "%s", g.hz);
  run("rss again", req(url("/rss"), hz), &g);
  ok(g.rc == 0 && count(g.items) == 0, "http: RSS second pull: nothing new");

  run("atom feed", req(url("/atom"), NULL), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "id"), "urn:uuid:1") == 0 &&
       strcmp(field(g.items, 0, "link"), "http://x/1") == 0 && strcmp(field(g.items, 0, "text"), "sum 1") == 0 &&
       strcmp(field(g.items, 0, "at"), "1071340202000") == 0,
     "http: Atom entries (read to close: no Content-Length): %s", g.items);
  ok(strcmp(field(g.items, 1, "title"), "Atom two") == 0 && strcmp(field(g.items, 1, "text"), "body 2") == 0 &&
       strcmp(field(g.items, 1, "at"), "1071336602250") == 0,
     "http: Atom xhtml title, content as text, offset date");

  run("text feed", req(url("/text"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "feed is neither JSON nor RSS/Atom"), "http: plain text: %s", g.err);
  run("html feed", req(url("/html"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "neither JSON nor RSS/Atom") && strstr(g.err, "<html>"), "http: HTML: %s", g.err);
  run("broken xml", req(url("/badxml"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "neither JSON nor RSS/Atom") && strstr(g.err, "XML error"),
     "http: broken XML: %s", g.err);
  run("entity feed", req(url("/entity"), NULL), &g);
  ok(g.rc == MW_EINVAL && strstr(g.err, "entities"), "http: entity declarations refused: %s", g.err);
  run("404", req(url("/missing"), NULL), &g);
  ok(g.rc == MW_EUNAVAIL && strstr(g.err, "HTTP 404"), "http: a 404 is an error: %s", g.err);

  mw_pull_req r = req(url("/big"), NULL);
  r.max_bytes = 1 << 20;
  uint64_t t0 = now_ms();
  run("oversized feed", r, &g);
  ok(g.rc == MW_ETOOBIG && strstr(g.err, "feed over 1048576 bytes") && now_ms() - t0 < 2000,
     "http: a 20 MB feed over max_bytes (Content-Length): %s", g.err);
  r = req(url("/bigclose"), NULL);
  r.max_bytes = 1 << 20;
  t0 = now_ms();
  run("oversized feed, no length", r, &g);
  ok(g.rc == MW_ETOOBIG && strstr(g.err, "feed over 1048576 bytes") && now_ms() - t0 < 2000,
     "http: a 20 MB feed over max_bytes (read to close): %s", g.err);
  r = req(url("/bigclose"), NULL);
  t0 = now_ms();
  run("oversized feed, default cap", r, &g);
  ok(g.rc == MW_ETOOBIG && strstr(g.err, "feed over 8388608 bytes"), "http: default cap 8 MiB: %s", g.err);

  /* Connection refused: a port nobody listens on. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, (struct sockaddr *)&a, sizeof a);
  getsockname(fd, (struct sockaddr *)&a, &al);
  char dead[64];
  snprintf(dead, sizeof dead, "http://127.0.0.1:%d/feed", ntohs(a.sin_port));
  close(fd);
  run("connection refused", req(dead, NULL), &g);
  ok(g.rc == MW_EUNAVAIL && strstr(g.err, "cannot connect"), "http: connection refused: %s", g.err);
  got_free(&g);
}

/* A slow feed times out at its deadline while, in the same loop, a feed, a
 * file and a log pull complete on time. */
static void t_slow(void) {
  got slow = {0}, fast = {0}, file = {0};
  char loc[PATH_MAX + 8], path[PATH_MAX];
  snprintf(path, sizeof path, "%s/side.log", ROOT);
  put(path, "w", "x\ny\n");
  snprintf(loc, sizeof loc, "file:%s", path);
  mw_pull_req rs = req(url("/slow"), NULL), rf = req(url("/json"), NULL), rl = req(loc, NULL);
  rs.deadline_ms = 200;
  uint64_t t0 = now_ms();
  int rc = mw__pull_start(&loop, &rs, on_pull, &slow);
  rc |= mw__pull_start(&loop, &rf, on_pull, &fast);
  rc |= mw__pull_start(&loop, &rl, on_pull, &file);
  ok(rc == 0 && slow.calls + fast.calls + file.calls == 0, "slow: three pulls started, no callback inside start");
  uv_run(&loop, UV_RUN_DEFAULT);
  uint64_t took = now_ms() - t0;
  ok(slow.calls == 1 && slow.rc == MW_ETIMEOUT && strstr(slow.err, "source src: no answer within 200 ms"),
     "slow: the slow feed answers MW_ETIMEOUT: %s", slow.err);
  ok(slow.at - t0 >= 190 && slow.at - t0 < 600, "slow: ... at its deadline (%llu ms)", (unsigned long long)(slow.at - t0));
  ok(fast.calls == 1 && fast.rc == 0 && count(fast.items) == 2 && fast.at - t0 < 200,
     "slow: another feed in the same loop completes on time (%llu ms)", (unsigned long long)(fast.at - t0));
  ok(file.calls == 1 && file.rc == 0 && count(file.items) == 2 && file.at - t0 < 200,
     "slow: a file pull in the same loop completes on time (%llu ms)", (unsigned long long)(file.at - t0));
  ok(!uv_loop_alive(&loop) && took < 1500, "slow: the loop ends soon after (%llu ms): the late answer was dropped",
     (unsigned long long)took);
  got_free(&slow);
  got_free(&fast);
  got_free(&file);
}

static void t_log(void) {
  mw_store *s;
  char e[256];
  int64_t stream, last;
  got g = {0};
  int rc = mw_store_open(HOME_, MW_STORE_CREATE, &s, e, sizeof e);
  ok(rc == 0, "log: a temp home: %s", rc ? e : "ok");
  if (rc) return;
  mw_store_stream(s, "t1", "bob", 1, &stream);
  mw_append a[3] = {{.kind = "note", .body = "{\"text\":\"hi\"}", .body_len = 13},
                    {.kind = "run", .body = "{ \"b\": 1, \"a\": 2 }", .body_len = 18},
                    {.kind = "note", .body = "[]", .body_len = 2}};
  rc = mw_log_append(s, stream, a, 3, 0, &last);
  ok(rc == 0 && last == 3, "log: bob has three entries");
  run("log first pull", req("log:bob", NULL), &g);
  ok(g.rc == 0 && count(g.items) == 3 && strcmp(field(g.items, 0, "kind"), "note") == 0 &&
       strcmp(field(g.items, 1, "body"), "{\"a\":2,\"b\":1}") == 0 && strcmp(field(g.items, 2, "id"), "bob:3") == 0 &&
       strcmp(field(g.items, 2, "cursor"), "3") == 0 && atoll(field(g.items, 0, "ts")) > 0,
     "log: another actor's entries: %s", g.items);
  char hz[128];
  snprintf(hz, sizeof hz, "%s", g.hz);
  ok(strcmp(hz, "{\"cursor\":3}") == 0, "log: horizon is the cursor: %s", hz);
  mw_append b[2] = {{.kind = "note", .body = "{\"n\":4}", .body_len = 7},
                    {.kind = "note", .body = "{\"n\":5}", .body_len = 7}};
  mw_log_append(s, stream, b, 2, 3, &last);   /* the writer keeps its connection open meanwhile */
  run("log second pull", req("log:bob", hz), &g);
  ok(g.rc == 0 && count(g.items) == 2 && strcmp(field(g.items, 0, "id"), "bob:4") == 0,
     "log: the second pull returns only the new entries");
  mw_pull_req r = req("log:bob", NULL);
  r.tenant = "other";
  run("log other tenant", r, &g);
  ok(g.rc == MW_ENOENT, "log: another tenant's actor is not found: %s", g.err);
  run("log unknown actor", req("log:nobody", NULL), &g);
  ok(g.rc == MW_ENOENT && strstr(g.err, "no actor \"nobody\""), "log: an unknown actor: %s", g.err);
  r = req("log:bob", NULL);
  r.home = OUT;
  run("log not a home", r, &g);
  ok(g.rc == MW_ENOTHOME, "log: not a home: %s", g.err);
  mw_store_close(s);
  got_free(&g);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  snprintf(ROOT, sizeof ROOT, "/tmp/mw-src-root.XXXXXX");
  snprintf(OUT, sizeof OUT, "/tmp/mw-src-out.XXXXXX");
  if (!mkdtemp(ROOT) || !mkdtemp(OUT)) return 2;
  snprintf(HOME_, sizeof HOME_, "%s/home", OUT);
  roots[0] = ROOT;
  char p[PATH_MAX + 32], q[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/secret.txt", OUT), put(p, "w", "secret\n");
  snprintf(p, sizeof p, "%s/esc", ROOT), symlink(OUT, p);
  snprintf(p, sizeof p, "%s/esc-file", ROOT), snprintf(q, sizeof q, "%s/secret.txt", OUT), symlink(q, p);
  snprintf(p, sizeof p, "%s/dangling", ROOT), symlink("/nonexistent/target", p);
  snprintf(q, sizeof q, "%s/inside.txt", ROOT), put(q, "w", "inside\n");
  snprintf(p, sizeof p, "%s/in-link", ROOT), symlink(q, p);
  snprintf(p, sizeof p, "%s/fifo", ROOT), mkfifo(p, 0600);
  uv_loop_init(&loop);
  srv_start();

  t_locators();
  t_file();
  t_dir();
  t_git();
  t_http();
  t_slow();
  t_log();

  srv_end();
  ok(uv_loop_close(&loop) == 0, "the loop closes: nothing left open");
  uv_library_shutdown();
  sh("rm -rf '%s' '%s'", ROOT, OUT);
  printf("1..%d\n# %d passed, %d failed\n", ntest, ntest - nfail, nfail);
  return nfail ? 1 : 0;
}
