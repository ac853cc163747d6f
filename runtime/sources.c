/* sources.c -- the source locators: what a file, a folder, a git repository,
 * a feed or another actor's log has new since a horizon.  Every pull answers
 * once, on the loop thread, by its deadline; it must never block the loop,
 * never name a path outside the operator's roots, and never let one source's
 * failure touch another pull.  No Lua, no subject: the policy tags items.
 *
 * Lifecycle of a pull (one `pull`, owned here from mw__pull_start to its
 * last close callback):
 *   - a deadline timer is armed at once; whichever comes first, the result
 *     or the timer, calls cb (`finish`), exactly once;
 *   - file:, dir:, log: and the path check of git: run on the thread pool;
 *     http: connects, writes and reads on the loop (uv_tcp: no pool thread
 *     is held while a slow server dawdles) and parses the body on the pool;
 *     git: runs `git log` through uv_spawn with both outputs on uv_pipes;
 *   - after finish, whatever is still running is cancelled (uv_cancel, a
 *     SIGKILL for git, uv_close for sockets and pipes) and its late result
 *     discarded; the pull is freed when the last handle or request is back
 *     (`refs`). */
#include "sources.h"
#include "jlex.h"
#include "chain.h"
#include "jfield.h"
#include "json.h"
#include "mw.h"

#include <dirent.h>
#include <errno.h>
#include <expat.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define DEFAULT_DEADLINE_MS 5000
#define DEFAULT_MAX_ITEMS 10000
#define DEFAULT_MAX_BYTES (8u << 20)
#define SEEN_CAP 1000           /* ids a feed horizon remembers */
#define HEADERS_MAX 65536       /* bytes of HTTP response headers */
#define STDERR_MAX 4096         /* bytes of git's stderr kept for messages */
#define HEAD_BYTES 64           /* bytes of a file fingerprinted in its horizon */
#define CHUNK 65536             /* file: bytes read at a time */

enum { S_FILE, S_DIR, S_GIT, S_HTTP, S_LOG };

typedef struct url {
  char host[256];
  int port;
  char path[2048];              /* path and query, never empty */
} url;

typedef struct pull {
  uv_loop_t *loop;
  mw_pull_cb cb;
  void *ud;
  int scheme;
  char *id, *locator, *home, *tenant, *horizon;
  size_t horizon_len;
  char **roots;
  int nroots;
  uint64_t deadline_ms, t_end;  /* t_end: uv_hrtime() when the deadline passes */
  size_t max_items, max_bytes;

  int refs;                     /* the timer, work, handles and requests still out */
  int done;                     /* cb has been called */
  int early;                    /* the timer carries an error found before any work */
  uv_timer_t timer;
  uv_work_t work;
  int work_busy;
  int starting;                 /* inside mw__pull_start: errors wait for the timer */

  /* The worker's answer, read on the loop only after the work is back. */
  int rc;
  char err[400];
  mw_buf items, hz;
  char path[PATH_MAX];          /* file/dir/git: the resolved path */
  const char *target;           /* the locator after its scheme */

  /* git: */
  uv_process_t proc;
  uv_pipe_t pout, perr;
  int git_open;                 /* of proc, pout, perr: not yet closed */
  int exited, enough, range, spawn_err;
  size_t grecs, gscan;          /* records counted in gout[0..gscan) */
  int64_t exit_status;
  int term_signal;
  mw_buf gout, gerr;
  char last[72];                /* the horizon's commit */

  /* http: */
  url u;
  uv_tcp_t tcp;
  int tcp_open;
  uv_connect_t conn;
  uv_write_t wr;
  uv_getaddrinfo_t gai;
  int gai_busy;
  mw_buf req, resp;
  size_t hdr_len;               /* 0 until the headers are complete */
  int64_t clen;                 /* Content-Length, -1 when absent */
  const char *body;
  size_t blen;
} pull;

/* ---- small helpers -------------------------------------------------------- */

#if defined(__GNUC__)
#define PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF(f, a)
#endif

static int ferr(char *err, size_t n, const char *fmt, ...) PRINTF(3, 4);
static int set_err(struct pull *p, int rc, const char *fmt, ...) PRINTF(3, 4);

static int ferr(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

static int set_err(pull *p, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  p->rc = rc;
  return rc;
}

static int past_deadline(const pull *p) { return uv_hrtime() >= p->t_end; }

/* Decimal digits of v into b (no NUL); returns the count.  Two digits per
 * division. */
static size_t u64dec(char *b, uint64_t v) {
  static const char D[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                          "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                          "8081828384858687888990919293949596979899";
  char t[24];
  size_t n = sizeof t;
  while (v >= 100) {
    unsigned r = (unsigned)(v % 100);
    v /= 100;
    t[--n] = D[2 * r + 1];
    t[--n] = D[2 * r];
  }
  if (v >= 10) {
    t[--n] = D[2 * v + 1];
    t[--n] = D[2 * v];
  } else {
    t[--n] = (char)('0' + v);
  }
  memcpy(b, t + n, sizeof t - n);
  return sizeof t - n;
}

static int add_i64(mw_buf *b, int64_t v) {
  char t[24];
  size_t n = 0;
  uint64_t u = (uint64_t)v;
  if (v < 0) {
    t[n++] = '-';
    u = 0 - u;
  }
  n += u64dec(t + n, u);
  return mw__buf_add(b, t, n);
}

/* 1 when none of 8 bytes needs care in a JSON string: no control byte, no
 * '"', no '\\', nothing above 0x7F (the word-at-a-time tests of "Bit
 * Twiddling Hacks", exact for existence). */
#define ONES 0x0101010101010101ULL
#define HIGH 0x8080808080808080ULL
static inline int plain8(uint64_t x) {
  uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
  uint64_t bad = ((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q) | ((b - ONES) & ~b) | x;
  return (bad & HIGH) == 0;
}

static const char HEX[] = "0123456789abcdef";

/* Appends the escape of control byte / quote / backslash c (RFC 8785). */
static int add_escape(mw_buf *b, unsigned c) {
  char u[6] = {'\\', 'u', '0', '0', 0, 0};
  switch (c) {
  case '"': return mw__buf_add(b, "\\\"", 2);
  case '\\': return mw__buf_add(b, "\\\\", 2);
  case '\b': return mw__buf_add(b, "\\b", 2);
  case '\t': return mw__buf_add(b, "\\t", 2);
  case '\n': return mw__buf_add(b, "\\n", 2);
  case '\f': return mw__buf_add(b, "\\f", 2);
  case '\r': return mw__buf_add(b, "\\r", 2);
  }
  u[4] = HEX[c >> 4];
  u[5] = HEX[c & 15];
  return mw__buf_add(b, u, 6);
}

/* Index of the first byte at or after i that needs care in a JSON string
 * (control byte, '"', '\\', or above 0x7F), or n. */
static inline size_t plain_run(const unsigned char *s, size_t i, size_t n) {
#ifdef __SSE2__
  const __m128i sp = _mm_set1_epi8(0x20), q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    /* signed compare: bytes above 0x7F are negative, so "< 0x20" takes them too */
    __m128i m = _mm_or_si128(_mm_cmplt_epi8(v, sp), _mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)));
    int mask = _mm_movemask_epi8(m);
    if (mask) return i + (size_t)__builtin_ctz((unsigned)mask);
    i += 16;
  }
#endif
  while (i + 8 <= n) {
    uint64_t x;
    memcpy(&x, s + i, 8);
    if (!plain8(x)) break;
    i += 8;
  }
  while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\') i++;
  return i;
}

/* Appends the canonical JSON string of s[0..n).  Bytes that are not UTF-8
 * become U+FFFD: a line of a file or a git subject need not be UTF-8, the
 * items must be.  If stop_nl, stops at the first '\n' (a "\r\n" ends there
 * too) and stores its index in *nl, or n in *nl when there is none.  Leaves
 * room for one more byte and a NUL after the closing quote. */
static int add_text(mw_buf *b, const char *str, size_t n, int stop_nl, size_t *nl) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0, st = 0;
  if (b->cap - b->len <= 258 && mw__buf_reserve(b, 258)) return MW_ENOMEM;
  b->p[b->len++] = '"';
  for (;;) {
    i = plain_run(s, i, n);
    if (i >= n) break;
    unsigned c = s[i];
    if (stop_nl && (c == '\n' || (c == '\r' && i + 1 < n && s[i + 1] == '\n'))) break;
    if (i > st && mw__buf_add(b, s + st, i - st)) return MW_ENOMEM;
    if (c >= 0x80) {
      size_t l = mw__utf8_len(s + i, n - i);
      if (l ? mw__buf_add(b, s + i, l) : mw__buf_add(b, "\xEF\xBF\xBD", 3)) return MW_ENOMEM;
      i += l ? l : 1;
    } else {
      if (add_escape(b, c)) return MW_ENOMEM;
      i++;
    }
    st = i;
  }
  /* Room for the run, the closing quote, one byte more for the caller and
   * the NUL. */
  if (b->cap - b->len <= i - st + 3 && mw__buf_reserve(b, i - st + 3)) return MW_ENOMEM;
  memcpy(b->p + b->len, s + st, i - st);
  b->len += i - st;
  if (nl) *nl = i;
  b->p[b->len++] = '"';
  b->p[b->len] = '\0';
  return 0;
}

static int add_str(mw_buf *b, const char *s) { return add_text(b, s, strlen(s), 0, NULL); }

/* Skips one value of canonical JSON at s[i]; returns the index past it. */
static size_t jskip_string(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

static size_t jskip(const char *s, size_t n, size_t i) {
  if (i >= n) return n;
  if (s[i] == '"') return jskip_string(s, n, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    for (; i < n; i++) {
      char c = s[i];
      if (c == '"') {
        i = jskip_string(s, n, i) - 1;
        continue;
      }
      if (c == '{' || c == '[') depth++;
      else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    }
    return n;
  }
  while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
  return i;
}

/* The request's horizon in canonical form (empty when none was given).
 * 0, or an error in p. */
static int horizon_canon(pull *p, mw_buf *out) {
  char e[200];
  if (!p->horizon || !p->horizon_len) return 0;
  int rc = mw__json_canon(p->horizon, p->horizon_len, out, e, sizeof e);
  if (rc == MW_ENOMEM) return set_err(p, rc, "out of memory");
  if (rc) return set_err(p, MW_EINVAL, "horizon is not valid JSON: %s", e);
  if (!mw__jis_object(out->p, out->len)) return set_err(p, MW_EINVAL, "horizon is not a JSON object");
  return 0;
}

static int hz_int(const mw_buf *h, const char *key, int64_t *v) {
  const char *s;
  size_t n;
  return h->len && mw__jfield(h->p, h->len, key, &s, &n) == 0 && mw__jint(s, n, v) == 0 ? 0 : -1;
}

/* ---- locators ------------------------------------------------------------- */

/* Splits a locator into its scheme and the rest.  0 or -1 with err. */
static int parse_scheme(const char *loc, int *scheme, const char **rest, char *err, size_t errlen) {
  static const struct { const char *name; int scheme; } S[] = {
    {"file:", S_FILE}, {"dir:", S_DIR}, {"git:", S_GIT}, {"log:", S_LOG}};
  if (!loc || !*loc) return ferr(err, errlen, "empty locator");
  if (strncmp(loc, "http://", 7) == 0) {
    *scheme = S_HTTP;
    *rest = loc;
    return 0;
  }
  if (strncasecmp(loc, "https:", 6) == 0) return ferr(err, errlen, "https is not supported: no TLS in this host");
  for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
    size_t l = strlen(S[i].name);
    if (strncmp(loc, S[i].name, l) == 0) {
      *scheme = S[i].scheme;
      *rest = loc + l;
      return 0;
    }
  }
  const char *c = strchr(loc, ':');
  if (!c) return ferr(err, errlen, "locator \"%.200s\" has no scheme (file:, dir:, git:, http://, log:)", loc);
  return ferr(err, errlen, "unknown scheme \"%.*s\" (known: file:, dir:, git:, http://, log:)",
              (int)(c - loc > 40 ? 40 : c - loc), loc);
}

/* Is the resolved path r under the resolved root t? */
static int under(const char *r, const char *t) {
  size_t n = strlen(t);
  if (n == 1 && t[0] == '/') return 1;
  return strncmp(r, t, n) == 0 && (r[n] == '\0' || r[n] == '/');
}

/* Checks a path locator against the roots and resolves it (symlinks
 * followed) into out[PATH_MAX].  A path that does not exist yet is resolved
 * through its parent; a dangling symlink is refused (it could be made to
 * point anywhere later). */
static int check_path(const char *path, const char *const *roots, int nroots, char *out, char *err,
                      size_t errlen) {
  if (path[0] == '/' && path[1] == '/') path += 2;   /* file:///abs */
  if (path[0] != '/') return ferr(err, errlen, "path \"%.200s\" is not absolute", path);
  size_t len = strlen(path);
  if (len >= PATH_MAX - 1) return ferr(err, errlen, "path is too long");
  for (const char *s = path; *s;) {
    while (*s == '/') s++;
    const char *e = strchr(s, '/');
    size_t l = e ? (size_t)(e - s) : strlen(s);
    if (l == 2 && s[0] == '.' && s[1] == '.') return ferr(err, errlen, "path %.200s has a \"..\" segment: refused", path);
    s += l;
  }
  if (nroots <= 0 || !roots) return ferr(err, errlen, "no roots configured: the operator allows none");
  if (!realpath(path, out)) {
    if (errno != ENOENT) return ferr(err, errlen, "cannot resolve %.200s: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) == 0) return ferr(err, errlen, "%.200s is a symlink to nothing: refused", path);
    char dir[PATH_MAX], rdir[PATH_MAX];
    memcpy(dir, path, len + 1);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
    char *slash = strrchr(dir, '/');
    const char *base = slash + 1;
    if (!*base) return ferr(err, errlen, "cannot resolve %.200s", path);
    if (slash == dir) strcpy(rdir, "/");
    else {
      *slash = '\0';
      if (!realpath(dir, rdir)) return ferr(err, errlen, "cannot resolve %.200s: %s", path, strerror(errno));
    }
    if (strlen(rdir) + strlen(base) + 2 > PATH_MAX) return ferr(err, errlen, "path is too long");
    size_t rl = strcmp(rdir, "/") ? strlen(rdir) : 0, bl = strlen(base);
    memcpy(out, rdir, rl);
    out[rl] = '/';
    memcpy(out + rl + 1, base, bl + 1);
  }
  char rroot[PATH_MAX];
  for (int i = 0; i < nroots; i++)
    if (roots[i] && realpath(roots[i], rroot) && under(out, rroot)) return 0;
  if (strcmp(out, path) != 0)
    return ferr(err, errlen, "%.150s resolves to %.150s, outside the configured roots", path, out);
  return ferr(err, errlen, "%.200s is outside the configured roots", path);
}

static int parse_url(const char *s, url *u, char *err, size_t errlen) {
  const char *a = s + 7, *e = a;
  while (*e && *e != '/' && *e != '?' && *e != '#') e++;
  for (const char *c = s; *c; c++)
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
      return ferr(err, errlen, "URL has a space, control or non-ASCII byte (percent-encode it)");
  for (const char *c = a; c < e; c++)
    if (*c == '@') return ferr(err, errlen, "credentials in a URL are refused");
  const char *hs = a, *he, *pc = NULL;
  if (*a == '[') {
    hs = a + 1;
    he = memchr(hs, ']', (size_t)(e - hs));
    if (!he) return ferr(err, errlen, "bad IPv6 host in URL");
    if (he + 1 < e) {
      if (he[1] != ':') return ferr(err, errlen, "bad host in URL");
      pc = he + 2;
    }
  } else {
    he = memchr(a, ':', (size_t)(e - a));
    if (he) pc = he + 1;
    else he = e;
  }
  if (he == hs) return ferr(err, errlen, "URL has no host");
  if ((size_t)(he - hs) >= sizeof u->host) return ferr(err, errlen, "URL host is too long");
  memcpy(u->host, hs, (size_t)(he - hs));
  u->host[he - hs] = '\0';
  u->port = 80;
  if (pc) {
    long port = 0;
    if (pc == e) return ferr(err, errlen, "URL has an empty port");
    for (const char *c = pc; c < e; c++) {
      if (*c < '0' || *c > '9' || port > 65535) return ferr(err, errlen, "bad port in URL");
      port = port * 10 + (*c - '0');
    }
    if (port < 1 || port > 65535) return ferr(err, errlen, "bad port in URL");
    u->port = (int)port;
  }
  const char *pe = strchr(e, '#');
  size_t pl = pe ? (size_t)(pe - e) : strlen(e);
  if (pl + 2 > sizeof u->path) return ferr(err, errlen, "URL path is too long");
  size_t o = 0;
  if (pl == 0 || *e != '/') u->path[o++] = '/';
  memcpy(u->path + o, e, pl);
  u->path[o + pl] = '\0';
  return 0;
}

int mw__locator_check(const char *locator, const char *const *roots, int nroots, char *err, size_t errlen) {
  char tmp[PATH_MAX], dummy[8];
  int scheme;
  const char *rest;
  if (!err || !errlen) err = dummy, errlen = sizeof dummy;
  if (parse_scheme(locator, &scheme, &rest, err, errlen)) return MW_EINVAL;
  switch (scheme) {
  case S_HTTP: {
    url u;
    return parse_url(rest, &u, err, errlen) ? MW_EINVAL : 0;
  }
  case S_LOG:
    if (!mw_valid_id(rest)) {
      ferr(err, errlen, "log: needs an actor id (1-64 of A-Z a-z 0-9 _ . -), not \"%.80s\"", rest);
      return MW_EINVAL;
    }
    return 0;
  default:
    return check_path(rest, roots, nroots, tmp, err, errlen) ? MW_EINVAL : 0;
  }
}

/* ---- file: ---------------------------------------------------------------- */

/* The fingerprint of a file's first min(upto, 64) bytes, as 16 hex digits:
 * a file replaced under the same inode, or truncated and grown back past the
 * old offset between two pulls, is caught by it. */
static int head_fp(int fd, int64_t upto, char out[17]) {
  unsigned char b[HEAD_BYTES], d[32];
  size_t want = upto < HEAD_BYTES ? (size_t)upto : HEAD_BYTES, got = 0;
  while (got < want) {
    ssize_t r = pread(fd, b + got, want - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  mw__sha256(b, want, d);
  mw__hex(d, 8, out);
  return 0;
}

/* A line's offset as decimal text, moved forward by adding each line's
 * length digit by digit (cheaper than formatting 10k numbers afresh). */
typedef struct dec {
  char d[24];      /* the digits are d[at..24) */
  int at;
} dec;

static void dec_set(dec *x, uint64_t v) {
  char t[24];
  size_t n = u64dec(t, v);
  x->at = (int)(sizeof x->d - n);
  memcpy(x->d + x->at, t, n);
}

static void dec_add(dec *x, uint64_t a) {
  unsigned carry = 0;
  for (int i = (int)sizeof x->d - 1; a || carry; i--, a /= 10) {
    if (i < x->at) x->d[x->at = i] = '0';
    unsigned s = (unsigned)(x->d[i] - '0') + (unsigned)(a % 10) + carry;
    carry = s >= 10;
    x->d[i] = (char)('0' + (carry ? s - 10 : s));
  }
}

/* {"cut"?, "id":"<ino>:<at>", "kind":"line", "offset":at, "text": -- the
 * text is appended by the caller. */
static int line_prefix(mw_buf *b, int comma, int cut, const char *idp, size_t idn, const dec *at) {
  if (b->cap - b->len <= 160 && mw__buf_reserve(b, 160)) return MW_ENOMEM;
  /* Fixed-size copies (the room is there), advanced by the real lengths. */
  char *w = b->p + b->len, d[24];
  size_t k = 0, dn = sizeof at->d - (size_t)at->at;
  memcpy(d, at->d + at->at, dn);
  if (comma) w[k++] = ',';
  w[k++] = '{';
  if (cut) memcpy(w + k, "\"cut\":true,", 11), k += 11;
  memcpy(w + k, "\"id\":\"", 6), k += 6;
  memcpy(w + k, idp, 24), k += idn;
  memcpy(w + k, d, 24), k += dn;
  memcpy(w + k, "\",\"kind\":\"line\",\"offset\":", 25), k += 25;
  memcpy(w + k, d, 24), k += dn;
  memcpy(w + k, ",\"text\":", 8), k += 8;
  b->len += k;
  b->p[b->len] = '\0';
  return 0;
}

static void do_file(pull *p) {
  mw_buf h = {0};
  char *buf = NULL;
  int fd = -1;
  int64_t ino = -1, off = 0;
  char head[17] = "", want_head[24] = "";
  if (horizon_canon(p, &h)) goto done;
  if (hz_int(&h, "ino", &ino)) ino = -1;
  if (hz_int(&h, "offset", &off) || off < 0) off = 0;
  const char *v;
  size_t vn;
  if (h.len && mw__jfield(h.p, h.len, "head", &v, &vn) == 0) mw__jstring(v, vn, want_head, sizeof want_head);

  /* O_NONBLOCK: a FIFO named here must not hang a pool thread in open(). */
  fd = open(p->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT)
      set_err(p, MW_ENOENT, h.len ? "file %.300s vanished" : "file %.300s does not exist", p->path);
    else
      set_err(p, MW_EUNAVAIL, "cannot open %.300s: %s", p->path, strerror(errno));
    goto done;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    set_err(p, MW_EUNAVAIL, "cannot stat %.300s: %s", p->path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    set_err(p, MW_EINVAL, "%.300s is not a regular file", p->path);
    goto done;
  }
  /* Rotation (a new inode) or truncation (shorter than the offset, or a
   * different head) restarts at 0. */
  int64_t size = (int64_t)st.st_size;
  if (ino != (int64_t)st.st_ino || size < off) off = 0;
  else if (off > 0 && want_head[0] && (head_fp(fd, off, head) || strcmp(head, want_head) != 0)) off = 0;

  /* The new bytes are read through a small window that stays in cache (a
   * line longer than it grows it, up to max_bytes); only the items are big. */
  size_t avail = (size_t)(size - off), take = avail < p->max_bytes ? avail : p->max_bytes;
  size_t cap = take < CHUNK ? (take ? take : 1) : CHUNK, have = 0, fed = 0, pos = 0, n = 0;
  int sized = 0;
  dec at;
  dec_set(&at, (uint64_t)off);
  if (!(buf = malloc(cap))) goto nomem;
  mw_buf *b = &p->items;
  char idp[48];
  size_t idn = u64dec(idp, (uint64_t)st.st_ino);
  idp[idn++] = ':';
  if (mw__buf_reserve(b, (take < CHUNK ? take : CHUNK) * 2 + 64)) goto nomem;
  mw__buf_addc(b, '[');
  /* buf[0..have) holds the file's bytes from off+pos on; fed of take read. */
  while (n < p->max_items) {
    int last = 0;
    if (fed < take && have < cap) {
      ssize_t r = pread(fd, buf + have, (cap - have < take - fed ? cap - have : take - fed), (off_t)off + (off_t)fed);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        set_err(p, MW_EUNAVAIL, "cannot read %.300s: %s", p->path, strerror(errno));
        goto done;
      }
      if (r == 0) take = fed;   /* truncated while we read: take what is there */
      have += (size_t)r;
      fed += (size_t)r;
    }
    last = fed == take;
    size_t i = 0;
    while (i < have && n < p->max_items) {
      size_t mark = b->len, nl;
      if (line_prefix(b, n > 0, 0, idp, idn, &at) || add_text(b, buf + i, have - i, 1, &nl)) goto nomem;
      if (i + nl >= have) {
        b->len = mark;
        b->p[mark] = '\0';
        break;
      }
      b->p[b->len++] = '}';   /* add_text left room for it */
      b->p[b->len] = '\0';
      size_t adv = nl + (buf[i + nl] == '\r' ? 2 : 1);
      i += adv;
      pos += adv;
      dec_add(&at, adv);
      n++;
    }
    if (n >= p->max_items) break;
    /* Size the items from what the first window made of its bytes. */
    if (!sized && pos && !last) {
      sized = 1;
      double ratio = (double)(b->len + 16) / (double)pos;
      size_t want = (size_t)(ratio * (double)(take - pos) * 1.05) + 256;
      if (mw__buf_reserve(b, want)) goto nomem;
    }
    memmove(buf, buf + i, have - i);
    have -= i;
    if (last) {
      /* No newline after the last full line: a partial line waits for the
       * next pull, unless it alone fills max_bytes (then it comes cut). */
      if (have && pos == 0 && take >= p->max_bytes) {
        if (line_prefix(b, 0, 1, idp, idn, &at) || add_text(b, buf, have, 0, NULL) || mw__buf_addc(b, '}'))
          goto nomem;
        pos = have;
        n++;
      }
      break;
    }
    if (have == cap) {
      size_t ncap = cap * 2 < take ? cap * 2 : take;
      char *nb = realloc(buf, ncap);
      if (!nb) goto nomem;
      buf = nb;
      cap = ncap;
    }
    if (past_deadline(p)) {   /* one clock read a window: the pool thread goes back early */
      set_err(p, MW_ETIMEOUT, "deadline passed while reading");
      goto done;
    }
  }
  if (mw__buf_addc(b, ']')) goto nomem;
  int64_t noff = off + (int64_t)pos;
  if (head_fp(fd, noff, head)) head[0] = '\0';
  if (mw__buf_addstr(&p->hz, "{\"head\":") || add_str(&p->hz, head) || mw__buf_addstr(&p->hz, ",\"ino\":") ||
      add_i64(&p->hz, (int64_t)st.st_ino) || mw__buf_addstr(&p->hz, ",\"offset\":") || add_i64(&p->hz, noff) ||
      mw__buf_addc(&p->hz, '}'))
    goto nomem;
  goto done;
nomem:
  set_err(p, MW_ENOMEM, "out of memory");
done:
  if (fd >= 0) close(fd);
  free(buf);
  mw__buf_free(&h);
}

/* ---- dir: ----------------------------------------------------------------- */

typedef struct dent {
  char *name;
  int64_t mtime, size, old;   /* old: the horizon's mtime, or INT64_MIN */
  int changed, returned;
} dent;

typedef struct seen_ent {
  char *name;
  int64_t mtime;
} seen_ent;

static int seen_cmp(const void *a, const void *b) {
  return strcmp(((const seen_ent *)a)->name, ((const seen_ent *)b)->name);
}

static int dent_cmp(const void *a, const void *b) {
  const dent *x = a, *y = b;
  if (x->mtime != y->mtime) return x->mtime < y->mtime ? -1 : 1;
  return strcmp(x->name, y->name);
}

static void do_dir(pull *p) {
  mw_buf h = {0}, raw = {0}, tmp = {0};
  seen_ent *seen = NULL;
  dent *ds = NULL;
  size_t nseen = 0, nd = 0, capd = 0;
  DIR *d = NULL;
  if (horizon_canon(p, &h)) goto done;

  /* The horizon: {"mtime_ms": newest mtime recorded, "seen": {name: mtime_ms}}
   * for every file of the last pull, so a file is new or changed exactly when
   * it is absent or its mtime differs -- also when files share an mtime, and
   * when an mtime moves backwards (a copy with preserved times). */
  const char *sv;
  size_t sn;
  if (h.len && mw__jfield(h.p, h.len, "seen", &sv, &sn) == 0 && sn >= 2 && sv[0] == '{') {
    size_t cap = 0, i = 1;
    while (i < sn && sv[i] == '"') {
      size_t ke = jskip_string(sv, sn, i), ve = jskip(sv, sn, ke + 1);
      char name[1024];
      int64_t m;
      if (mw__jstring(sv + i, ke - i, name, sizeof name) >= 0 && mw__jint(sv + ke + 1, ve - ke - 1, &m) == 0) {
        if (nseen == cap) {
          cap = cap ? cap * 2 : 64;
          seen_ent *ns = realloc(seen, cap * sizeof *ns);
          if (!ns) goto nomem;
          seen = ns;
        }
        if (!(seen[nseen].name = strdup(name))) goto nomem;
        seen[nseen++].mtime = m;
      }
      i = ve;
      if (i < sn && sv[i] == ',') i++;
    }
    qsort(seen, nseen, sizeof *seen, seen_cmp);
  }

  int fd = open(p->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      set_err(p, MW_ENOENT, h.len ? "folder %.300s vanished" : "folder %.300s does not exist", p->path);
    else if (errno == ENOTDIR)
      set_err(p, MW_EINVAL, "%.300s is not a folder", p->path);
    else
      set_err(p, MW_EUNAVAIL, "cannot open %.300s: %s", p->path, strerror(errno));
    goto done;
  }
  if (!(d = fdopendir(fd))) {
    close(fd);
    set_err(p, MW_EUNAVAIL, "cannot read %.300s: %s", p->path, strerror(errno));
    goto done;
  }
  struct dirent *de;
  size_t scanned = 0;
  errno = 0;
  while ((de = readdir(d))) {
    if ((++scanned & 1023) == 0 && past_deadline(p)) {
      set_err(p, MW_ETIMEOUT, "deadline passed while listing");
      goto done;
    }
    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
    struct stat st;
    /* Top level only, regular files only: a symlink is never followed. */
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    size_t l = strlen(de->d_name);
    tmp.len = 0;
    if (mw__json_string(&tmp, de->d_name, l)) continue;   /* not UTF-8: skipped */
    if (nd == capd) {
      capd = capd ? capd * 2 : 64;
      dent *nds = realloc(ds, capd * sizeof *nds);
      if (!nds) goto nomem;
      ds = nds;
    }
    dent *x = &ds[nd];
    if (!(x->name = strdup(de->d_name))) goto nomem;
    nd++;
    x->mtime = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    x->size = (int64_t)st.st_size;
    seen_ent key = {x->name, 0}, *f = nseen ? bsearch(&key, seen, nseen, sizeof *seen, seen_cmp) : NULL;
    x->old = f ? f->mtime : INT64_MIN;
    x->changed = !f || f->mtime != x->mtime;
    x->returned = 0;
  }
  if (errno) {
    set_err(p, MW_EUNAVAIL, "cannot read %.300s: %s", p->path, strerror(errno));
    goto done;
  }
  qsort(ds, nd, sizeof *ds, dent_cmp);

  mw_buf *b = &p->items;
  if (mw__buf_addc(b, '[')) goto nomem;
  size_t n = 0;
  for (size_t i = 0; i < nd && n < p->max_items; i++) {
    dent *x = &ds[i];
    if (!x->changed) continue;
    char at[24];
    size_t an = u64dec(at + 1, (uint64_t)x->mtime);
    at[0] = '@';
    tmp.len = 0;
    if (mw__buf_addstr(&tmp, x->name) || mw__buf_add(&tmp, at, an + 1)) goto nomem;
    if ((n && mw__buf_addc(b, ',')) || mw__buf_addstr(b, "{\"id\":") || add_text(b, tmp.p, tmp.len, 0, NULL) ||
        mw__buf_addstr(b, ",\"kind\":\"file\",\"mtime_ms\":") || add_i64(b, x->mtime) ||
        mw__buf_addstr(b, ",\"path\":") || add_str(b, x->name) || mw__buf_addstr(b, ",\"size\":") ||
        add_i64(b, x->size) || mw__buf_addc(b, '}'))
      goto nomem;
    x->returned = 1;
    n++;
  }
  if (mw__buf_addc(b, ']')) goto nomem;

  /* A changed file not returned (max_items) keeps its old entry, or none. */
  int64_t newest = 0;
  int first = 1;
  if (mw__buf_addstr(&raw, "{\"seen\":{")) goto nomem;
  for (size_t i = 0; i < nd; i++) {
    dent *x = &ds[i];
    int64_t m = x->changed && !x->returned ? x->old : x->mtime;
    if (m == INT64_MIN) continue;
    if (m > newest) newest = m;
    if ((!first && mw__buf_addc(&raw, ',')) || add_str(&raw, x->name) || mw__buf_addc(&raw, ':') || add_i64(&raw, m))
      goto nomem;
    first = 0;
    if (raw.len > p->max_bytes) {
      set_err(p, MW_ETOOBIG, "folder %.300s has too many files for a horizon (over %zu bytes)", p->path,
              p->max_bytes);
      goto done;
    }
  }
  if (mw__buf_addstr(&raw, "},\"mtime_ms\":") || add_i64(&raw, newest) || mw__buf_addc(&raw, '}')) goto nomem;
  char e[200];
  int rc = mw__json_canon(raw.p, raw.len, &p->hz, e, sizeof e);   /* sorts the names */
  if (rc) set_err(p, rc, "cannot encode the horizon: %s", e);
  goto done;
nomem:
  set_err(p, MW_ENOMEM, "out of memory");
done:
  if (d) closedir(d);
  for (size_t i = 0; i < nseen; i++) free(seen[i].name);
  for (size_t i = 0; i < nd; i++) free(ds[i].name);
  free(seen);
  free(ds);
  mw__buf_free(&h);
  mw__buf_free(&raw);
  mw__buf_free(&tmp);
}

/* ---- log: ----------------------------------------------------------------- */

typedef struct log_ctx {
  pull *p;
  size_t n;
  int64_t last;
  int fail;
} log_ctx;

static int log_entry(void *ud, const mw_entry *e) {
  log_ctx *c = ud;
  mw_buf *b = &c->p->items;
  char id[160];
  int l = snprintf(id, sizeof id, "%s:%lld", c->p->target, (long long)e->cursor);
  if ((c->n && mw__buf_addc(b, ',')) || mw__buf_addstr(b, "{\"body\":") || mw__buf_add(b, e->body, e->body_len) ||
      mw__buf_addstr(b, ",\"cursor\":") || add_i64(b, e->cursor) || mw__buf_addstr(b, ",\"id\":") ||
      add_text(b, id, (size_t)l, 0, NULL) || mw__buf_addstr(b, ",\"kind\":") || add_str(b, e->kind) ||
      mw__buf_addstr(b, ",\"ts\":") || add_i64(b, e->ts) || mw__buf_addc(b, '}')) {
    c->fail = MW_ENOMEM;
    return 1;
  }
  c->n++;
  c->last = e->cursor;
  return b->len > c->p->max_bytes || past_deadline(c->p);
}

static void do_log(pull *p) {
  mw_buf h = {0};
  mw_store *s = NULL;
  int64_t cursor = 0, stream;
  char e[400];
  if (horizon_canon(p, &h)) goto done;
  if (hz_int(&h, "cursor", &cursor) || cursor < 0) cursor = 0;
  /* Its own read-only connection: the pool thread never shares the loop's. */
  int rc = mw_store_open(p->home, MW_STORE_READONLY, &s, e, sizeof e);
  if (rc) {
    set_err(p, rc, "cannot open the home: %s", e);
    goto done;
  }
  rc = mw_store_stream(s, p->tenant, p->target, 0, &stream);
  if (rc) {
    if (rc == MW_ENOENT) set_err(p, rc, "no actor \"%s\" in tenant \"%.64s\"", p->target, p->tenant);
    else set_err(p, rc, "%s", mw_store_errmsg(s));
    goto done;
  }
  log_ctx c = {p, 0, cursor, 0};
  if (mw__buf_addc(&p->items, '[')) goto nomem;
  rc = mw_log_read(s, stream, cursor + 1, (int64_t)p->max_items, log_entry, &c);
  if (c.fail) goto nomem;
  if (rc) {
    set_err(p, rc, "%s", mw_store_errmsg(s));
    goto done;
  }
  if (mw__buf_addc(&p->items, ']') || mw__buf_addstr(&p->hz, "{\"cursor\":") || add_i64(&p->hz, c.last) ||
      mw__buf_addc(&p->hz, '}'))
    goto nomem;
  goto done;
nomem:
  set_err(p, MW_ENOMEM, "out of memory");
done:
  mw_store_close(s);
  mw__buf_free(&h);
}

/* ---- feeds: JSON, RSS, Atom ----------------------------------------------- */

/* A set of id literals (canonical JSON strings), open addressing. */
typedef struct idset {
  char **k;
  size_t *kl;
  size_t cap, n;
} idset;

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static void idset_free(idset *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->k[i]);
  free(s->k);
  free(s->kl);
}

static int idset_has(const idset *s, const char *k, size_t n) {
  if (!s->cap) return 0;
  for (size_t i = fnv(k, n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->k[i]) return 0;
    if (s->kl[i] == n && memcmp(s->k[i], k, n) == 0) return 1;
  }
}

/* 1 if added, 0 if present, -1 out of memory. */
static int idset_add(idset *s, const char *k, size_t n) {
  if (idset_has(s, k, n)) return 0;
  if ((s->n + 1) * 2 > s->cap) {
    idset t = {0};
    t.cap = s->cap ? s->cap * 2 : 64;
    if (!(t.k = calloc(t.cap, sizeof *t.k)) || !(t.kl = calloc(t.cap, sizeof *t.kl))) {
      free(t.k);
      return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->k[i]) continue;
      size_t j = fnv(s->k[i], s->kl[i]) & (t.cap - 1);
      while (t.k[j]) j = (j + 1) & (t.cap - 1);
      t.k[j] = s->k[i];
      t.kl[j] = s->kl[i];
    }
    t.n = s->n;
    free(s->k);
    free(s->kl);
    *s = t;
  }
  size_t j = fnv(k, n) & (s->cap - 1);
  while (s->k[j]) j = (j + 1) & (s->cap - 1);
  if (!(s->k[j] = malloc(n + 1))) return -1;
  memcpy(s->k[j], k, n);
  s->k[j][n] = '\0';
  s->kl[j] = n;
  s->n++;
  return 1;
}

typedef struct feed {
  pull *p;
  idset seen, cur;
  mw_buf newseen;           /* the next horizon's ids, comma-separated */
  size_t nseen, returned;
} feed;

/* One item of the feed, in document order: repeated ids and ids of the last
 * pull are dropped; max_items caps what is returned (an item left out is not
 * marked seen, so a later pull returns it). */
static int feed_emit(feed *f, const char *id, size_t idn, const char *item, size_t itemn) {
  int r = idset_add(&f->cur, id, idn);
  if (r <= 0) return r;
  int was = idset_has(&f->seen, id, idn);
  if (!was) {
    if (f->returned >= f->p->max_items) return 0;
    if ((f->returned && mw__buf_addc(&f->p->items, ',')) || mw__buf_add(&f->p->items, item, itemn)) return -1;
    f->returned++;
  }
  if (f->nseen < SEEN_CAP) {
    if ((f->nseen && mw__buf_addc(&f->newseen, ',')) || mw__buf_add(&f->newseen, id, idn)) return -1;
    f->nseen++;
  }
  return 0;
}

static void sha_lit(const char *s, size_t n, char out[67]) {
  unsigned char d[32];
  mw__sha256(s, n, d);
  out[0] = '"';
  mw__hex(d, 32, out + 1);
  out[65] = '"';
  out[66] = '\0';
}

/* A JSON feed: an array of items, or an object with "items" or "entries".
 * Each object item keeps its members; "id" becomes a string (its "id",
 * "guid" or "link", else the SHA-256 of its canonical bytes) and "kind" is
 * "feed" unless the item has a string "kind" of its own. */
static int json_feed(feed *f) {
  pull *p = f->p;
  mw_buf c = {0}, m = {0}, it = {0};
  char e[200];
  int rc = mw__json_canon(p->body, p->blen, &c, e, sizeof e);
  if (rc == MW_ENOMEM) goto nomem;
  if (rc) {
    set_err(p, MW_EINVAL, "feed is not valid JSON: %s", e);
    goto out;
  }
  const char *a = c.p;
  size_t an = c.len;
  if (c.p[0] == '{' && mw__jfield(c.p, c.len, "items", &a, &an) && mw__jfield(c.p, c.len, "entries", &a, &an)) {
    set_err(p, MW_EINVAL, "JSON feed has no \"items\" or \"entries\" array");
    goto out;
  }
  if (an < 2 || a[0] != '[') {
    set_err(p, MW_EINVAL, "JSON feed's \"items\" is not an array");
    goto out;
  }
  for (size_t i = 1; i < an && a[i] != ']';) {
    size_t j = jskip(a, an, i);
    const char *s = a + i;
    size_t sn = j - i;
    char lit[67];
    sha_lit(s, sn, lit);
    it.len = 0;
    if (s[0] != '{') {
      if (mw__buf_addstr(&it, "{\"id\":") || mw__buf_addstr(&it, lit) ||
          mw__buf_addstr(&it, ",\"kind\":\"feed\",\"value\":") || mw__buf_add(&it, s, sn) || mw__buf_addc(&it, '}') ||
          feed_emit(f, lit, 66, it.p, it.len))
        goto nomem;
    } else {
      const char *idv = NULL, *kv = NULL, *v;
      size_t idvn = 0, kvn = 0, vn;
      static const char *const K[] = {"id", "guid", "link"};
      for (int k = 0; k < 3 && !idv; k++)
        if (mw__jfield(s, sn, K[k], &v, &vn) == 0 && vn > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')))
          idv = v, idvn = vn;
      if (mw__jfield(s, sn, "kind", &v, &vn) == 0 && vn > 0 && v[0] == '"') kv = v, kvn = vn;
      m.len = 0;
      if (!idv) {
        if (mw__buf_addstr(&m, lit)) goto nomem;
      } else if (idv[0] == '"') {
        if (mw__buf_add(&m, idv, idvn)) goto nomem;
      } else if (mw__buf_addc(&m, '"') || mw__buf_add(&m, idv, idvn) || mw__buf_addc(&m, '"')) {
        goto nomem;
      }
      mw_buf raw = {0};
      if (mw__buf_addstr(&raw, "{\"id\":") || mw__buf_add(&raw, m.p, m.len) || mw__buf_addstr(&raw, ",\"kind\":") ||
          (kv ? mw__buf_add(&raw, kv, kvn) : mw__buf_addstr(&raw, "\"feed\""))) {
        mw__buf_free(&raw);
        goto nomem;
      }
      for (size_t k = 1; k < sn && s[k] == '"';) {
        size_t ke = jskip_string(s, sn, k), ve = jskip(s, sn, ke + 1);
        int skip = (ke - k == 4 && memcmp(s + k, "\"id\"", 4) == 0) || (ke - k == 6 && memcmp(s + k, "\"kind\"", 6) == 0);
        if (!skip && (mw__buf_addc(&raw, ',') || mw__buf_add(&raw, s + k, ve - k))) {
          mw__buf_free(&raw);
          goto nomem;
        }
        k = ve;
        if (k < sn && s[k] == ',') k++;
      }
      rc = mw__buf_addc(&raw, '}');
      if (!rc) rc = mw__json_canon(raw.p, raw.len, &it, e, sizeof e);
      mw__buf_free(&raw);
      if (rc || feed_emit(f, m.p, m.len, it.p, it.len)) goto nomem;
    }
    i = j;
    if (i < an && a[i] == ',') i++;
  }
  goto out;
nomem:
  set_err(p, MW_ENOMEM, "out of memory");
out:
  mw__buf_free(&c);
  mw__buf_free(&m);
  mw__buf_free(&it);
  return p->rc;
}

/* Dates: RFC 822 (RSS pubDate) and RFC 3339 (Atom), to ms since the epoch. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int civil_ms(int y, int mo, int d, int h, int mi, int s, int ms, int off_min, int64_t *out) {
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 60) return -1;
  *out = (days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - off_min * 60) * 1000 + ms;
  return 0;
}

static int parse_rfc3339(const char *s, int64_t *out) {
  int y, mo, d, h = 0, mi = 0, sec = 0, ms = 0, n = 0, off = 0;
  if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3) return -1;
  s += n;
  if (*s == 'T' || *s == 't' || *s == ' ') {
    if (sscanf(s + 1, "%2d:%2d:%2d%n", &h, &mi, &sec, &n) != 3) return -1;
    s += 1 + n;
    if (*s == '.') {
      int k = 0;
      for (s++; *s >= '0' && *s <= '9'; s++, k++)
        if (k < 3) ms = ms * 10 + (*s - '0');
      for (; k < 3; k++) ms *= 10;
    }
    if (*s == '+' || *s == '-') {
      int oh, om;
      if (sscanf(s + 1, "%2d:%2d", &oh, &om) != 2) return -1;
      off = (oh * 60 + om) * (*s == '-' ? -1 : 1);
    }
  }
  return civil_ms(y, mo, d, h, mi, sec, ms, off, out);
}

static int parse_rfc822(const char *s, int64_t *out) {
  static const char M[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  static const struct { const char *z; int off; } Z[] = {
    {"GMT", 0}, {"UT", 0}, {"UTC", 0}, {"Z", 0}, {"EST", -300}, {"EDT", -240}, {"CST", -360},
    {"CDT", -300}, {"MST", -420}, {"MDT", -360}, {"PST", -480}, {"PDT", -420}};
  const char *c = strchr(s, ',');
  if (c && c - s <= 10) s = c + 1;
  int d, y, h, mi, sec = 0, n = 0, off = 0;
  char mon[4], zone[8] = "";
  if (sscanf(s, " %2d %3s %4d %2d:%2d%n", &d, mon, &y, &h, &mi, &n) != 5) return -1;
  s += n;
  if (*s == ':' && sscanf(s + 1, "%2d%n", &sec, &n) == 1) s += 1 + n;
  int mo = 0;
  for (int i = 0; i < 12 && !mo; i++)
    if (strlen(mon) == 3 && strncasecmp(M + 3 * i, mon, 3) == 0) mo = i + 1;
  if (!mo) return -1;
  if (y < 50) y += 2000;
  else if (y < 100) y += 1900;
  if (sscanf(s, " %7s", zone) == 1) {
    if ((zone[0] == '+' || zone[0] == '-') && strlen(zone) == 5) {
      int v = atoi(zone + 1);
      off = (v / 100 * 60 + v % 100) * (zone[0] == '-' ? -1 : 1);
    } else {
      for (size_t i = 0; i < sizeof Z / sizeof Z[0]; i++)
        if (strcasecmp(zone, Z[i].z) == 0) off = Z[i].off;
    }
  }
  return civil_ms(y, mo, d, h, mi, sec, 0, off, out);
}

enum { F_NONE, F_TITLE, F_LINK, F_ID, F_DATE, F_DATE2, F_TEXT, F_ALT, F__N };
enum { X_UNKNOWN, X_RSS, X_ATOM, X_OTHER };

typedef struct xfeed {
  feed *f;
  XML_Parser xp;
  int root;              /* X_* */
  char rootname[64];
  int depth, item_depth; /* item_depth 0: not inside an item */
  int field, field_depth;
  mw_buf v[F__N];
  int has[F__N];
  int fail;              /* MW_ENOMEM, or 1 for a refused construct */
  char why[120];
} xfeed;

static const char *local_name(const char *n) {
  const char *c = strrchr(n, ':');
  return c ? c + 1 : n;
}

static void x_stop(xfeed *x, int code, const char *why) {
  if (!x->fail) {
    x->fail = code;
    snprintf(x->why, sizeof x->why, "%s", why);
  }
  XML_StopParser(x->xp, XML_FALSE);
}

static void trim(mw_buf *b, const char **s, size_t *n) {
  const char *p = b->p ? b->p : "";
  size_t a = 0, e = b->len;
  while (a < e && (p[a] == ' ' || p[a] == '\t' || p[a] == '\n' || p[a] == '\r')) a++;
  while (e > a && (p[e - 1] == ' ' || p[e - 1] == '\t' || p[e - 1] == '\n' || p[e - 1] == '\r')) e--;
  *s = p + a;
  *n = e - a;
}

/* An item is complete: {"at"?, "id", "kind":"feed", "link", "text"?, "title"}. */
static void x_item(xfeed *x) {
  const char *s[F__N];
  size_t n[F__N];
  for (int i = 1; i < F__N; i++) trim(&x->v[i], &s[i], &n[i]);
  mw_buf it = {0}, id = {0}, key = {0};
  int64_t at;
  char tmp[64];
  int has_at = 0;
  for (int k = F_DATE; k <= F_DATE2 && !has_at; k++) {
    if (!n[k]) continue;
    size_t l = n[k] < sizeof tmp - 1 ? n[k] : sizeof tmp - 1;
    memcpy(tmp, s[k], l);
    tmp[l] = '\0';
    has_at = parse_rfc3339(tmp, &at) == 0 || parse_rfc822(tmp, &at) == 0;
  }
  int t = n[F_TEXT] ? F_TEXT : F_ALT;
  int rc = 0;
  if (n[F_ID]) rc = add_text(&id, s[F_ID], n[F_ID], 0, NULL);
  else if (n[F_LINK]) rc = add_text(&id, s[F_LINK], n[F_LINK], 0, NULL);
  else {
    char lit[67];
    rc = mw__buf_add(&key, s[F_TITLE], n[F_TITLE]) || mw__buf_addc(&key, '\n') || mw__buf_add(&key, s[F_LINK], n[F_LINK]) ||
         mw__buf_addc(&key, '\n') || mw__buf_add(&key, s[t], n[t]);
    if (!rc) {
      sha_lit(key.p ? key.p : "", key.len, lit);
      rc = mw__buf_addstr(&id, lit);
    }
  }
  if (!rc && has_at) rc = mw__buf_addstr(&it, "{\"at\":") || add_i64(&it, at) || mw__buf_addc(&it, ',');
  else if (!rc) rc = mw__buf_addc(&it, '{');
  if (!rc)
    rc = mw__buf_addstr(&it, "\"id\":") || mw__buf_add(&it, id.p, id.len) ||
         mw__buf_addstr(&it, ",\"kind\":\"feed\",\"link\":") || add_text(&it, s[F_LINK], n[F_LINK], 0, NULL);
  if (!rc && n[t]) rc = mw__buf_addstr(&it, ",\"text\":") || add_text(&it, s[t], n[t], 0, NULL);
  if (!rc)
    rc = mw__buf_addstr(&it, ",\"title\":") || add_text(&it, s[F_TITLE], n[F_TITLE], 0, NULL) || mw__buf_addc(&it, '}');
  if (rc || feed_emit(x->f, id.p, id.len, it.p, it.len)) x_stop(x, MW_ENOMEM, "out of memory");
  mw__buf_free(&it);
  mw__buf_free(&id);
  mw__buf_free(&key);
  for (int i = 0; i < F__N; i++) x->v[i].len = 0, x->has[i] = 0;
}

static void XMLCALL x_start(void *ud, const XML_Char *name, const XML_Char **attr) {
  xfeed *x = ud;
  const char *ln = local_name(name);
  x->depth++;
  if (x->depth == 1) {
    snprintf(x->rootname, sizeof x->rootname, "%s", name);
    x->root = strcmp(ln, "rss") == 0 || strcmp(ln, "RDF") == 0 ? X_RSS : strcmp(ln, "feed") == 0 ? X_ATOM : X_OTHER;
    if (x->root == X_OTHER) XML_StopParser(x->xp, XML_FALSE);
    return;
  }
  if (!x->item_depth) {
    if (strcmp(ln, x->root == X_ATOM ? "entry" : "item") == 0) x->item_depth = x->depth;
    return;
  }
  if (x->field || x->depth != x->item_depth + 1) return;   /* nested inside a field: its text counts */
  int f = F_NONE;
  if (strcmp(ln, "title") == 0) f = F_TITLE;
  else if (strcmp(ln, "link") == 0) {
    const char *href = NULL, *rel = NULL;
    for (int i = 0; attr[i]; i += 2) {
      if (strcmp(attr[i], "href") == 0) href = attr[i + 1];
      else if (strcmp(attr[i], "rel") == 0) rel = attr[i + 1];
    }
    if (href) {
      /* Atom: the alternate link (no rel means alternate); any other only
       * when nothing better is there. */
      int alt = !rel || strcmp(rel, "alternate") == 0;
      if ((alt && x->has[F_LINK] < 2) || !x->has[F_LINK]) {
        x->v[F_LINK].len = 0;
        if (mw__buf_addstr(&x->v[F_LINK], href)) x_stop(x, MW_ENOMEM, "out of memory");
        x->has[F_LINK] = alt ? 2 : 1;
      }
      return;
    }
    f = F_LINK;
  } else if (strcmp(ln, "guid") == 0 || strcmp(ln, "id") == 0) f = F_ID;
  else if (strcmp(ln, "pubDate") == 0 || strcmp(ln, "updated") == 0 || strcmp(ln, "date") == 0) f = F_DATE;
  else if (strcmp(ln, "published") == 0) f = F_DATE2;
  else if (strcmp(ln, "description") == 0 || strcmp(ln, "summary") == 0) f = F_TEXT;
  else if (strcmp(ln, "content") == 0 || strcmp(ln, "encoded") == 0) f = F_ALT;
  if (f == F_NONE || (f == F_LINK ? x->has[f] >= 2 : x->has[f])) return;   /* the first of each wins */
  x->has[f] = 2;
  x->v[f].len = 0;
  x->field = f;
  x->field_depth = x->depth;
}

static void XMLCALL x_end(void *ud, const XML_Char *name) {
  xfeed *x = ud;
  (void)name;
  if (x->field && x->depth == x->field_depth) x->field = F_NONE;
  if (x->item_depth && x->depth == x->item_depth) {
    x->item_depth = 0;
    x_item(x);
  }
  x->depth--;
}

static void XMLCALL x_text(void *ud, const XML_Char *s, int len) {
  xfeed *x = ud;
  if (x->field && mw__buf_add(&x->v[x->field], s, (size_t)len)) x_stop(x, MW_ENOMEM, "out of memory");
}

/* Entity declarations are refused outright: no feed needs them, and they are
 * how entity expansion attacks begin. */
static void XMLCALL x_entity(void *ud, const XML_Char *name, int pe, const XML_Char *value, int vlen,
                             const XML_Char *base, const XML_Char *sys, const XML_Char *pub, const XML_Char *nota) {
  (void)name, (void)pe, (void)value, (void)vlen, (void)base, (void)sys, (void)pub, (void)nota;
  x_stop(ud, 1, "the feed declares XML entities: refused");
}

static int xml_feed(feed *f) {
  pull *p = f->p;
  xfeed x = {0};
  x.f = f;
  if (!(x.xp = XML_ParserCreate(NULL))) return set_err(p, MW_ENOMEM, "out of memory");
  XML_SetUserData(x.xp, &x);
  XML_SetElementHandler(x.xp, x_start, x_end);
  XML_SetCharacterDataHandler(x.xp, x_text);
  XML_SetEntityDeclHandler(x.xp, x_entity);
  if (p->blen > INT_MAX) {
    set_err(p, MW_ETOOBIG, "feed over %d bytes", INT_MAX);
  } else {
    enum XML_Status st = XML_Parse(x.xp, p->body, (int)p->blen, 1);
    if (x.fail == MW_ENOMEM) set_err(p, MW_ENOMEM, "out of memory");
    else if (x.fail) set_err(p, MW_EINVAL, "%s", x.why);
    else if (x.root == X_OTHER)
      set_err(p, MW_EINVAL, "feed is neither JSON nor RSS/Atom (XML root <%.60s>)", x.rootname);
    else if (st != XML_STATUS_OK || x.root == X_UNKNOWN)
      set_err(p, MW_EINVAL, "feed is neither JSON nor RSS/Atom (XML error at line %lu: %s)",
              (unsigned long)XML_GetCurrentLineNumber(x.xp), XML_ErrorString(XML_GetErrorCode(x.xp)));
  }
  XML_ParserFree(x.xp);
  for (int i = 0; i < F__N; i++) mw__buf_free(&x.v[i]);
  return p->rc;
}

/* On the pool: the body fetched on the loop becomes items and a horizon. */
static void do_feed(pull *p) {
  feed f = {0};
  mw_buf h = {0};
  f.p = p;
  if (horizon_canon(p, &h)) goto done;
  const char *sv;
  size_t sn;
  if (h.len && mw__jfield(h.p, h.len, "seen", &sv, &sn) == 0 && sn >= 2 && sv[0] == '[') {
    for (size_t i = 1; i < sn && sv[i] == '"';) {
      size_t j = jskip_string(sv, sn, i);
      if (idset_add(&f.seen, sv + i, j - i) < 0) goto nomem;
      i = j;
      if (i < sn && sv[i] == ',') i++;
    }
  }
  const char *b = p->body;
  size_t n = p->blen, i = 0;
  if (n >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) i = 3;
  while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n')) i++;
  if (mw__buf_addc(&p->items, '[')) goto nomem;
  if (i < n && (b[i] == '{' || b[i] == '[')) json_feed(&f);
  else if (i < n && b[i] == '<') xml_feed(&f);
  else set_err(p, MW_EINVAL, "feed is neither JSON nor RSS/Atom");
  if (p->rc) goto done;
  if (mw__buf_addc(&p->items, ']') || mw__buf_addstr(&p->hz, "{\"seen\":[") ||
      (f.newseen.len && mw__buf_add(&p->hz, f.newseen.p, f.newseen.len)) || mw__buf_addstr(&p->hz, "]}"))
    goto nomem;
  goto done;
nomem:
  set_err(p, MW_ENOMEM, "out of memory");
done:
  idset_free(&f.seen);
  idset_free(&f.cur);
  mw__buf_free(&f.newseen);
  mw__buf_free(&h);
}

/* ---- the pull's lifecycle ------------------------------------------------- */

static void pull_free(pull *p) {
  free(p->id);
  free(p->locator);
  free(p->home);
  free(p->tenant);
  free(p->horizon);
  for (int i = 0; i < p->nroots; i++) free(p->roots[i]);
  free(p->roots);
  mw__buf_free(&p->items);
  mw__buf_free(&p->hz);
  mw__buf_free(&p->gout);
  mw__buf_free(&p->gerr);
  mw__buf_free(&p->req);
  mw__buf_free(&p->resp);
  free(p);
}

static void unref(pull *p) {
  if (--p->refs == 0) pull_free(p);
}

static void on_handle_closed(uv_handle_t *h) { unref(h->data); }

static void git_closed(uv_handle_t *h);

/* After the answer: stop whatever still runs.  Its callbacks come back
 * later and only release their reference. */
static void cancel_rest(pull *p) {
  if (p->work_busy) uv_cancel((uv_req_t *)&p->work);
  if (p->gai_busy) uv_cancel((uv_req_t *)&p->gai);
  if (p->tcp_open && !uv_is_closing((uv_handle_t *)&p->tcp)) uv_close((uv_handle_t *)&p->tcp, on_handle_closed);
  if (p->git_open) {
    if (!p->exited && !uv_is_closing((uv_handle_t *)&p->proc)) uv_process_kill(&p->proc, SIGKILL);
    if (!uv_is_closing((uv_handle_t *)&p->pout)) uv_close((uv_handle_t *)&p->pout, git_closed);
    if (!uv_is_closing((uv_handle_t *)&p->perr)) uv_close((uv_handle_t *)&p->perr, git_closed);
  }
}

/* Calls cb once.  On failure items is [] and horizon the one given (or {}),
 * so a caller that stores the horizon unconditionally keeps its place. */
static void finish(pull *p, int rc, const char *msg) {
  if (p->done) return;
  p->done = 1;
  uv_timer_stop(&p->timer);
  mw_pull_res r;
  memset(&r, 0, sizeof r);
  r.rc = rc;
  if (rc == 0) {
    r.items = p->items;
    r.horizon = p->hz;
    memset(&p->items, 0, sizeof p->items);
    memset(&p->hz, 0, sizeof p->hz);
  } else {
    snprintf(r.error, sizeof r.error, "source %.64s: %s", p->id, msg);
    mw_buf h = {0};
    char e[8];
    if (mw__buf_addstr(&r.items, "[]") == 0) {
      if (p->horizon_len && mw__json_canon(p->horizon, p->horizon_len, &h, e, sizeof e) == 0 && mw__jis_object(h.p, h.len))
        r.horizon = h;
      else {
        mw__buf_free(&h);
        mw__buf_addstr(&r.horizon, "{}");
      }
    }
  }
  p->cb(p->ud, &r);
  mw__buf_free(&r.items);
  mw__buf_free(&r.horizon);
  if (!uv_is_closing((uv_handle_t *)&p->timer)) uv_close((uv_handle_t *)&p->timer, on_handle_closed);
  cancel_rest(p);
}

static void on_deadline(uv_timer_t *t) {
  pull *p = t->data;
  char msg[64];
  if (p->early) {
    finish(p, p->rc, p->err);
    return;
  }
  snprintf(msg, sizeof msg, "no answer within %llu ms", (unsigned long long)p->deadline_ms);
  finish(p, MW_ETIMEOUT, msg);
}

/* ---- git: ----------------------------------------------------------------- */

static int git_spawn(pull *p);

static int is_hash(const char *s, size_t n) {
  if (n != 40 && n != 64) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* Records "hash 0x1f author 0x1f at 0x1f subject 0x1e", newest first when
 * the pull had no range (reversed here), oldest first with one. */
static void git_items(pull *p) {
  typedef struct { const char *f[4]; size_t n[4]; } rec;
  rec *rs = NULL;
  size_t nr = 0, cap = 0;
  const char *s = p->gout.p ? p->gout.p : "", *e = s + p->gout.len;
  while (s < e) {
    const char *end = memchr(s, 0x1e, (size_t)(e - s));
    if (!end) break;   /* a record cut by the byte cap */
    while (s < end && (*s == '\n' || *s == '\r')) s++;
    rec r;
    const char *c = s;
    int k = 0;
    for (; k < 4; k++) {
      const char *sep = k < 3 ? memchr(c, 0x1f, (size_t)(end - c)) : end;
      if (!sep) break;
      r.f[k] = c;
      r.n[k] = (size_t)(sep - c);
      c = sep + 1;
    }
    s = end + 1;
    if (k < 4 || !is_hash(r.f[0], r.n[0])) continue;
    if (nr == cap) {
      cap = cap ? cap * 2 : 256;
      rec *nrs = realloc(rs, cap * sizeof *nrs);
      if (!nrs) goto nomem;
      rs = nrs;
    }
    rs[nr++] = r;
    if (nr >= p->max_items) break;
  }
  mw_buf *b = &p->items;
  if (mw__buf_addc(b, '[')) goto nomem;
  for (size_t i = 0; i < nr; i++) {
    rec *r = &rs[p->range ? i : nr - 1 - i];
    char num[24];
    size_t l = r->n[2] < sizeof num - 1 ? r->n[2] : sizeof num - 1;
    memcpy(num, r->f[2], l);
    num[l] = '\0';
    int64_t at = strtoll(num, NULL, 10) * 1000;
    if ((i && mw__buf_addc(b, ',')) || mw__buf_addstr(b, "{\"at\":") || add_i64(b, at) ||
        mw__buf_addstr(b, ",\"author\":") || add_text(b, r->f[1], r->n[1], 0, NULL) || mw__buf_addstr(b, ",\"id\":\"") ||
        mw__buf_add(b, r->f[0], r->n[0]) || mw__buf_addstr(b, "\",\"kind\":\"commit\",\"subject\":") ||
        add_text(b, r->f[3], r->n[3], 0, NULL) || mw__buf_addc(b, '}'))
      goto nomem;
  }
  if (mw__buf_addc(b, ']')) goto nomem;
  if (nr) {
    rec *newest = &rs[p->range ? nr - 1 : 0];
    if (mw__buf_addstr(&p->hz, "{\"commit\":\"") || mw__buf_add(&p->hz, newest->f[0], newest->n[0]) ||
        mw__buf_addstr(&p->hz, "\"}"))
      goto nomem;
  } else if (p->last[0]) {
    if (mw__buf_addstr(&p->hz, "{\"commit\":\"") || mw__buf_addstr(&p->hz, p->last) || mw__buf_addstr(&p->hz, "\"}"))
      goto nomem;
  } else if (mw__buf_addstr(&p->hz, "{}")) {
    goto nomem;
  }
  free(rs);
  p->rc = 0;
  return;
nomem:
  free(rs);
  set_err(p, MW_ENOMEM, "out of memory");
}

/* Every handle of the git run is closed: answer, or run again without the
 * range when the horizon's commit is gone (history rewritten). */
static void git_done(pull *p) {
  if (p->done) return;
  const char *err = p->gerr.p ? p->gerr.p : "";
  if (p->spawn_err) {
    set_err(p, MW_EUNAVAIL, "cannot run git: %s", uv_strerror(p->spawn_err));
  } else if (p->enough || (p->exited && p->exit_status == 0 && !p->term_signal)) {
    git_items(p);
  } else if (p->term_signal) {
    set_err(p, MW_EUNAVAIL, "git was killed by signal %d", p->term_signal);
  } else if (strstr(err, "not a git repository")) {
    set_err(p, MW_EINVAL, "%.300s is not a git repository", p->path);
  } else if (strstr(err, "does not have any commits yet")) {
    git_items(p);
  } else if (p->range && (strstr(err, "unknown revision") || strstr(err, "bad revision") || strstr(err, "Invalid revision"))) {
    p->range = 0;
    p->last[0] = '\0';
    p->gout.len = p->gerr.len = 0;
    if (git_spawn(p) == 0) return;
  } else {
    size_t l = strcspn(err, "\n");
    set_err(p, MW_EUNAVAIL, "git log failed (exit %lld): %.*s", (long long)p->exit_status, (int)(l > 300 ? 300 : l), err);
  }
  finish(p, p->rc, p->err);
}

static void git_closed(uv_handle_t *h) {
  pull *p = h->data;
  if (--p->git_open == 0) git_done(p);
  unref(p);
}

static void git_exit(uv_process_t *proc, int64_t status, int sig) {
  pull *p = proc->data;
  p->exited = 1;
  p->exit_status = status;
  p->term_signal = p->enough ? 0 : sig;
  uv_close((uv_handle_t *)proc, git_closed);
}

static void git_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  pull *p = h->data;
  mw_buf *b = h == (uv_handle_t *)&p->pout ? &p->gout : &p->gerr;
  (void)suggested;
  if (mw__buf_reserve(b, 65536)) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = b->p + b->len;
  buf->len = b->cap - b->len - 1;
}

static void git_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  pull *p = s->data;
  int out = s == (uv_stream_t *)&p->pout;
  mw_buf *b = out ? &p->gout : &p->gerr;
  (void)buf;
  if (nread > 0) {
    b->len += (size_t)nread;
    b->p[b->len] = '\0';
    if (!out) {
      if (b->len > STDERR_MAX) b->len = STDERR_MAX, b->p[b->len] = '\0';
      return;
    }
    /* Enough records, or the byte cap: stop git and keep what came. */
    for (; p->gscan < b->len; p->gscan++) p->grecs += b->p[p->gscan] == 0x1e;
    if (p->grecs < p->max_items && b->len <= p->max_bytes) return;
    p->enough = 1;
    if (!p->exited) uv_process_kill(&p->proc, SIGKILL);
  } else if (nread == 0) {
    return;
  }
  if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, git_closed);
}

static int git_spawn(pull *p) {
  char n[24], range[160], ceil[PATH_MAX + 32], path_env[4096], home_env[1024];
  const char *args[16];
  int a = 0;
  args[a++] = "git";
  args[a++] = "-c";
  args[a++] = "log.showSignature=false";
  args[a++] = "-C";
  args[a++] = p->path;
  args[a++] = "log";
  args[a++] = "--no-color";
  args[a++] = "--format=%H%x1f%an%x1f%at%x1f%s%x1e";
  if (p->range) {
    snprintf(range, sizeof range, "%s..HEAD", p->last);
    args[a++] = "--reverse";
    args[a++] = range;
  } else {
    snprintf(n, sizeof n, "-n%zu", p->max_items);
    args[a++] = n;
  }
  args[a++] = "--";
  args[a] = NULL;

  /* A minimal environment: no prompt, C messages (matched above), and no
   * search above the named folder, so git: names a repository itself and
   * never one that encloses it (which could lie outside the roots). */
  const char *path = getenv("PATH"), *home = getenv("HOME");
  char *env[8];
  int e = 0;
  snprintf(path_env, sizeof path_env, "PATH=%s", path ? path : "/usr/local/bin:/usr/bin:/bin");
  env[e++] = path_env;
  if (home) {
    snprintf(home_env, sizeof home_env, "HOME=%s", home);
    env[e++] = home_env;
  }
  snprintf(ceil, sizeof ceil, "GIT_CEILING_DIRECTORIES=%s", p->path);
  char *slash = strrchr(ceil, '/');
  if (slash && slash > ceil + 24) *slash = '\0';
  else strcpy(ceil + 24, "/");
  env[e++] = ceil;
  env[e++] = "GIT_TERMINAL_PROMPT=0";
  env[e++] = "GIT_OPTIONAL_LOCKS=0";
  env[e++] = "LC_ALL=C";
  env[e] = NULL;

  uv_pipe_init(p->loop, &p->pout, 0);
  uv_pipe_init(p->loop, &p->perr, 0);
  p->pout.data = p->perr.data = p->proc.data = p;
  uv_stdio_container_t io[3] = {
    {.flags = UV_IGNORE},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->pout},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->perr}};
  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.exit_cb = git_exit;
  o.file = "git";
  o.args = (char **)args;
  o.env = env;
  o.stdio_count = 3;
  o.stdio = io;
  p->git_open = 3;
  p->refs += 3;
  p->exited = p->enough = 0;
  p->grecs = p->gscan = 0;
  p->term_signal = 0;
  p->exit_status = 0;
  int rc = uv_spawn(p->loop, &p->proc, &o);
  if (rc) {
    /* Every handle is initialised: close them; git_done reports. */
    p->spawn_err = rc;
    uv_close((uv_handle_t *)&p->proc, git_closed);
    uv_close((uv_handle_t *)&p->pout, git_closed);
    uv_close((uv_handle_t *)&p->perr, git_closed);
    return 0;
  }
  uv_read_start((uv_stream_t *)&p->pout, git_alloc, git_read);
  uv_read_start((uv_stream_t *)&p->perr, git_alloc, git_read);
  return 0;
}

/* On the pool: the path check (realpath touches the disk) and the horizon. */
static void do_git_check(pull *p) {
  mw_buf h = {0};
  const char *v;
  size_t vn;
  if (horizon_canon(p, &h)) goto done;
  if (h.len && mw__jfield(h.p, h.len, "commit", &v, &vn) == 0) {
    char c[80];
    int l = mw__jstring(v, vn, c, sizeof c);
    if (l < 0 || !is_hash(c, (size_t)l)) {
      set_err(p, MW_EINVAL, "horizon's commit is not a hash");
      goto done;
    }
    memcpy(p->last, c, (size_t)l + 1);
    p->range = 1;
  }
  struct stat st;
  if (stat(p->path, &st) != 0) set_err(p, MW_ENOENT, "%.300s does not exist", p->path);
  else if (!S_ISDIR(st.st_mode)) set_err(p, MW_EINVAL, "%.300s is not a git repository", p->path);
done:
  mw__buf_free(&h);
}

/* ---- http: on the loop ---------------------------------------------------- */

static void http_fail(pull *p, int rc, const char *fmt, ...) PRINTF(3, 4);
static void http_fail(pull *p, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  p->rc = rc;
  if (!p->starting) finish(p, rc, p->err);
}

static void work_cb(uv_work_t *w);
static void after_work(uv_work_t *w, int status);

static void http_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  pull *p = h->data;
  (void)suggested;
  if (mw__buf_reserve(&p->resp, 65536)) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = p->resp.p + p->resp.len;
  buf->len = p->resp.cap - p->resp.len - 1;
}

/* Status line and headers, once "\r\n\r\n" has come: 0 to go on reading. */
static int http_headers(pull *p) {
  char *r = p->resp.p;
  int major, minor, status;
  if (sscanf(r, "HTTP/%d.%d %d", &major, &minor, &status) != 3) {
    http_fail(p, MW_EINVAL, "not an HTTP response from %s:%d", p->u.host, p->u.port);
    return -1;
  }
  if (status != 200) {
    char reason[80] = "";
    const char *sp = strchr(r, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL;
    if (sp) {
      size_t l = strcspn(sp + 1, "\r\n");
      snprintf(reason, sizeof reason, " %.*s", (int)(l > 60 ? 60 : l), sp + 1);
    }
    http_fail(p, MW_EUNAVAIL, "HTTP %d%s from %s:%d%s%s", status, reason, p->u.host, p->u.port, p->u.path,
              status >= 300 && status < 400 ? " (redirects are not followed)" : "");
    return -1;
  }
  p->clen = -1;
  for (char *l = strstr(r, "\r\n") + 2; l < r + p->hdr_len - 2; l = strstr(l, "\r\n") + 2) {
    if (strncasecmp(l, "Content-Length:", 15) == 0) {
      char *e;
      long long v = strtoll(l + 15, &e, 10);
      if (v < 0 || e == l + 15) {
        http_fail(p, MW_EINVAL, "bad Content-Length from %s:%d", p->u.host, p->u.port);
        return -1;
      }
      p->clen = v;
    } else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0) {
      const char *v = l + 18;
      while (*v == ' ') v++;
      if (strncasecmp(v, "identity", 8) != 0) {
        http_fail(p, MW_EINVAL, "chunked transfer encoding is not supported (the request is HTTP/1.0)");
        return -1;
      }
    }
  }
  if (p->clen > (int64_t)p->max_bytes) {
    http_fail(p, MW_ETOOBIG, "feed over %zu bytes (Content-Length %lld)", p->max_bytes, (long long)p->clen);
    return -1;
  }
  return 0;
}

static void http_complete(pull *p) {
  uv_read_stop((uv_stream_t *)&p->tcp);
  uv_close((uv_handle_t *)&p->tcp, on_handle_closed);
  p->body = p->resp.p + p->hdr_len;
  p->blen = p->resp.len - p->hdr_len;
  if (p->clen >= 0 && (int64_t)p->blen > p->clen) p->blen = (size_t)p->clen;
  p->work.data = p;
  if (uv_queue_work(p->loop, &p->work, work_cb, after_work) != 0) {
    http_fail(p, MW_EINTERNAL, "cannot queue the parse");
    return;
  }
  p->work_busy = 1;
  p->refs++;
}

static void http_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  pull *p = s->data;
  (void)buf;
  if (p->done) return;
  if (nread == 0) return;
  if (nread == UV_ENOBUFS) {
    http_fail(p, MW_ENOMEM, "out of memory");
    return;
  }
  if (nread > 0) {
    size_t from = p->resp.len > 3 ? p->resp.len - 3 : 0;
    p->resp.len += (size_t)nread;
    p->resp.p[p->resp.len] = '\0';
    if (!p->hdr_len) {
      const char *e = NULL, *r = p->resp.p;
      for (size_t i = from; i + 4 <= p->resp.len && !e; i++)
        if (r[i] == '\r' && memcmp(r + i, "\r\n\r\n", 4) == 0) e = r + i;
      if (!e) {
        if (p->resp.len > HEADERS_MAX)
          http_fail(p, MW_EINVAL, "response headers over %d bytes from %s:%d", HEADERS_MAX, p->u.host, p->u.port);
        return;
      }
      p->hdr_len = (size_t)(e - p->resp.p) + 4;
      if (http_headers(p)) return;
    }
    size_t body = p->resp.len - p->hdr_len;
    if (body > p->max_bytes) {
      http_fail(p, MW_ETOOBIG, "feed over %zu bytes", p->max_bytes);
      return;
    }
    if (p->clen >= 0 && (int64_t)body >= p->clen) http_complete(p);
    return;
  }
  if (nread != UV_EOF) {
    http_fail(p, MW_EUNAVAIL, "reading from %s:%d failed: %s", p->u.host, p->u.port, uv_strerror((int)nread));
    return;
  }
  if (!p->hdr_len) {
    http_fail(p, MW_EUNAVAIL, "%s:%d closed the connection before the response headers", p->u.host, p->u.port);
    return;
  }
  size_t body = p->resp.len - p->hdr_len;
  if (p->clen >= 0 && (int64_t)body < p->clen) {
    http_fail(p, MW_EUNAVAIL, "%s:%d closed the connection after %zu of %lld bytes", p->u.host, p->u.port, body,
              (long long)p->clen);
    return;
  }
  http_complete(p);
}

static void http_written(uv_write_t *w, int status) {
  pull *p = w->data;
  if (p->done || status == 0) return;
  http_fail(p, MW_EUNAVAIL, "sending to %s:%d failed: %s", p->u.host, p->u.port, uv_strerror(status));
}

static void http_connected(uv_connect_t *c, int status) {
  pull *p = c->data;
  if (p->done) return;
  if (status) {
    http_fail(p, MW_EUNAVAIL, "cannot connect to %s:%d: %s", p->u.host, p->u.port, uv_strerror(status));
    return;
  }
  char port[16] = "";
  if (p->u.port != 80) snprintf(port, sizeof port, ":%d", p->u.port);
  int v6 = strchr(p->u.host, ':') != NULL;
  if (mw__buf_addstr(&p->req, "GET ") || mw__buf_addstr(&p->req, p->u.path) ||
      mw__buf_addstr(&p->req, " HTTP/1.0\r\nHost: ") || mw__buf_addstr(&p->req, v6 ? "[" : "") ||
      mw__buf_addstr(&p->req, p->u.host) || mw__buf_addstr(&p->req, v6 ? "]" : "") || mw__buf_addstr(&p->req, port) ||
      mw__buf_addstr(&p->req, "\r\nUser-Agent: mw-sources/1\r\nAccept: application/json, application/feed+json, "
                              "application/rss+xml, application/atom+xml, application/xml, text/xml, */*;q=0.5\r\n"
                              "Connection: close\r\n\r\n")) {
    http_fail(p, MW_ENOMEM, "out of memory");
    return;
  }
  uv_buf_t b = uv_buf_init(p->req.p, (unsigned)p->req.len);
  p->wr.data = p;
  int rc = uv_write(&p->wr, (uv_stream_t *)&p->tcp, &b, 1, http_written);
  if (!rc) rc = uv_read_start((uv_stream_t *)&p->tcp, http_alloc, http_read);
  if (rc) http_fail(p, MW_EUNAVAIL, "sending to %s:%d failed: %s", p->u.host, p->u.port, uv_strerror(rc));
}

static void http_connect(pull *p, const struct sockaddr *sa) {
  uv_tcp_init(p->loop, &p->tcp);
  p->tcp.data = p;
  p->tcp_open = 1;
  p->refs++;
  p->conn.data = p;
  int rc = uv_tcp_connect(&p->conn, &p->tcp, sa, http_connected);
  if (rc) http_fail(p, MW_EUNAVAIL, "cannot connect to %s:%d: %s", p->u.host, p->u.port, uv_strerror(rc));
}

static void http_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  pull *p = g->data;
  p->gai_busy = 0;
  if (!p->done) {
    if (status || !res) http_fail(p, MW_EUNAVAIL, "cannot resolve %s: %s", p->u.host, uv_strerror(status));
    else http_connect(p, res->ai_addr);
  }
  uv_freeaddrinfo(res);
  unref(p);
}

static void http_start(pull *p) {
  struct sockaddr_storage ss;
  if (uv_ip4_addr(p->u.host, p->u.port, (struct sockaddr_in *)&ss) == 0 ||
      uv_ip6_addr(p->u.host, p->u.port, (struct sockaddr_in6 *)&ss) == 0) {
    http_connect(p, (struct sockaddr *)&ss);
    return;
  }
  /* A name: resolved on the pool by libuv (the deadline still holds). */
  char port[16];
  snprintf(port, sizeof port, "%d", p->u.port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  p->gai.data = p;
  int rc = uv_getaddrinfo(p->loop, &p->gai, http_resolved, p->u.host, port, &hints);
  if (rc) {
    http_fail(p, MW_EUNAVAIL, "cannot resolve %s: %s", p->u.host, uv_strerror(rc));
    return;
  }
  p->gai_busy = 1;
  p->refs++;
}

/* ---- work on the pool ----------------------------------------------------- */

static void work_cb(uv_work_t *w) {
  pull *p = w->data;
  if (p->scheme != S_HTTP && p->scheme != S_LOG) {
    char e[sizeof p->err];
    if (check_path(p->target, (const char *const *)p->roots, p->nroots, p->path, e, sizeof e)) {
      set_err(p, MW_EINVAL, "%s", e);
      return;
    }
  }
  switch (p->scheme) {
  case S_FILE: do_file(p); break;
  case S_DIR: do_dir(p); break;
  case S_LOG: do_log(p); break;
  case S_GIT: do_git_check(p); break;
  case S_HTTP: do_feed(p); break;
  }
}

static void after_work(uv_work_t *w, int status) {
  pull *p = w->data;
  p->work_busy = 0;
  if (!p->done) {
    if (status) finish(p, MW_EINTERNAL, "the work was cancelled");
    else if (p->rc) finish(p, p->rc, p->err);
    else if (p->scheme == S_GIT) git_spawn(p);
    else finish(p, 0, NULL);
  }
  unref(p);
}

/* ---- entry ---------------------------------------------------------------- */

static char *dup_or_null(const char *s, int *fail) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *fail = 1;
  return d;
}

int mw__pull_start(uv_loop_t *loop, const mw_pull_req *req, mw_pull_cb cb, void *ud) {
  if (!loop || !req || !cb || !req->locator) return MW_EINVAL;
  pull *p = calloc(1, sizeof *p);
  if (!p) return MW_ENOMEM;
  int fail = 0;
  p->loop = loop;
  p->cb = cb;
  p->ud = ud;
  p->id = dup_or_null(req->source_id ? req->source_id : "?", &fail);
  p->locator = dup_or_null(req->locator, &fail);
  p->home = dup_or_null(req->home, &fail);
  p->tenant = dup_or_null(req->tenant, &fail);
  if (req->horizon && *req->horizon) {
    p->horizon = dup_or_null(req->horizon, &fail);
    p->horizon_len = strlen(req->horizon);
  }
  if (req->nroots > 0 && req->roots) {
    p->roots = calloc((size_t)req->nroots, sizeof *p->roots);
    if (!p->roots) fail = 1;
    else
      for (int i = 0; i < req->nroots; i++) {
        p->roots[i] = dup_or_null(req->roots[i] ? req->roots[i] : "", &fail);
        p->nroots = i + 1;
      }
  }
  if (fail) {
    pull_free(p);
    return MW_ENOMEM;
  }
  p->deadline_ms = req->deadline_ms ? req->deadline_ms : DEFAULT_DEADLINE_MS;
  p->max_items = req->max_items ? req->max_items : DEFAULT_MAX_ITEMS;
  p->max_bytes = req->max_bytes ? req->max_bytes : DEFAULT_MAX_BYTES;
  p->t_end = uv_hrtime() + p->deadline_ms * 1000000ull;
  p->clen = -1;
  uv_timer_init(loop, &p->timer);
  p->timer.data = p;
  p->refs = 1;
  p->starting = 1;

  /* Errors found here (no disk touched) answer through the timer, on the
   * next loop turn: cb never runs inside mw__pull_start. */
  if (parse_scheme(p->locator, &p->scheme, &p->target, p->err, sizeof p->err)) {
    p->rc = MW_EINVAL;
  } else if (p->scheme == S_HTTP) {
    if (parse_url(p->target, &p->u, p->err, sizeof p->err)) p->rc = MW_EINVAL;
  } else if (p->scheme == S_LOG) {
    if (!mw_valid_id(p->target))
      set_err(p, MW_EINVAL, "log: needs an actor id (1-64 of A-Z a-z 0-9 _ . -), not \"%.80s\"", p->target);
    else if (!p->home || !p->tenant)
      set_err(p, MW_EINVAL, "log: needs a home and a tenant");
  }
  if (!p->rc) {
    if (p->scheme == S_HTTP) {
      http_start(p);
    } else {
      p->work.data = p;
      if (uv_queue_work(loop, &p->work, work_cb, after_work) == 0) {
        p->work_busy = 1;
        p->refs++;
      } else {
        set_err(p, MW_EINTERNAL, "cannot queue the work");
      }
    }
  }
  p->starting = 0;
  if (p->rc) p->early = 1;   /* finish cancels whatever did start */
  /* The loop's clock is cached: after a long callback (or when called
   * outside uv_run) it is stale, and the deadline would be cut short. */
  uv_update_time(loop);
  uv_timer_start(&p->timer, on_deadline, p->early ? 0 : p->deadline_ms, 0);
  return 0;
}
