/* json.c -- canonical JSON (RFC 8785, integers in int64 written exactly): a
 * validating parser that writes the canonical form as it reads, sorting each
 * object's members in place when the object closes. */
#include "json.h"
#include "jlex.h"
#include "mw.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct member {
  size_t key, klen;  /* decoded key, at parser.keys.p + key */
  size_t start, end; /* "key":value in out */
  size_t at;         /* input offset of the key, for messages */
  const char *kp;    /* set once the object is complete and keys.p stays put */
} member;

typedef struct parser {
  const unsigned char *s;
  size_t n, i;
  mw_buf *out;
  mw_buf keys; /* decoded keys of the open objects, a stack */
  mw_buf tmp;  /* unescaped strings, number rewrites, member reordering */
  member *m;   /* members of the open objects, a stack */
  size_t mlen, mcap;
  char *err;
  size_t errlen;
} parser;

static int fail(parser *p, const char *fmt, ...) {
  if (p->err && p->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
  }
  return MW_EJSON;
}

static int put(mw_buf *b, char c) {
  if (b->cap - b->len < 2 && mw__buf_reserve(b, 1)) return MW_ENOMEM;
  b->p[b->len++] = c;
  return 0;
}

/* Decodes the string literal whose quote is at p->i, appending its UTF-8 to
 * dst, and leaves p->i past the closing quote. */
static int lex_string(parser *p, mw_buf *dst) {
  const unsigned char *s = p->s;
  size_t n = p->n, i = p->i + 1;
  if (mw__buf_reserve(dst, 0)) return MW_ENOMEM; /* dst->p is never NULL */
  for (;;) {
    size_t j = mw__json_plain(s, i, n);
    unsigned cp, lo;
    char c;
    if (j > i && mw__buf_add(dst, s + i, j - i)) return MW_ENOMEM;
    if (j >= n) return fail(p, "unterminated string at byte %zu", p->i);
    if (s[j] == '"') {
      p->i = j + 1;
      return 0;
    }
    if (s[j] < 0x20) return fail(p, "control character in string at byte %zu", j);
    if (s[j] != '\\') return fail(p, "invalid UTF-8 at byte %zu", j);
    if (j + 1 >= n) return fail(p, "unterminated string at byte %zu", p->i);
    i = j + 2;
    switch (s[j + 1]) {
    case '"': c = '"'; break;
    case '\\': c = '\\'; break;
    case '/': c = '/'; break;
    case 'b': c = '\b'; break;
    case 'f': c = '\f'; break;
    case 'n': c = '\n'; break;
    case 'r': c = '\r'; break;
    case 't': c = '\t'; break;
    case 'u': {
      char u[4];
      size_t un;
      if (n - i < 4 || mw__hex4(s + i, &cp)) return fail(p, "bad \\u escape at byte %zu", j);
      i += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone surrogate at byte %zu", j);
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (n - i < 6 || s[i] != '\\' || s[i + 1] != 'u' || mw__hex4(s + i + 2, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF)
          return fail(p, "lone surrogate at byte %zu", j);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        i += 6;
      }
      if (cp < 0x80) {
        u[0] = (char)cp, un = 1;
      } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), un = 2;
      } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)), un = 3;
      } else {
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), un = 4;
      }
      if (mw__buf_add(dst, u, un)) return MW_ENOMEM;
      continue;
    }
    default: return fail(p, "bad escape at byte %zu", j);
    }
    if (mw__buf_add(dst, &c, 1)) return MW_ENOMEM;
  }
}

static int string(parser *p) {
  size_t st = p->i + 1, j = mw__json_plain(p->s, st, p->n);
  int rc;
  if (j < p->n && p->s[j] == '"') { /* nothing to decode: already canonical */
    p->i = j + 1;
    return mw__buf_add(p->out, p->s + st - 1, j - st + 2);
  }
  p->tmp.len = 0;
  if ((rc = lex_string(p, &p->tmp))) return rc;
  return mw__json_string(p->out, p->tmp.p, p->tmp.len);
}

/* [-]digits within int64? */
static int fits_int64(const unsigned char *s, size_t n) {
  int neg = s[0] == '-';
  uint64_t u = 0;
  if (n - neg > 19) return 0;
  for (size_t i = neg; i < n; i++) u = u * 10 + (s[i] - '0');
  return u <= (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX);
}

/* strtod reads the decimal point of the current locale, so the literal is
 * handed over without one: integer and fraction digits, and the exponent less
 * the number of fraction digits.  st..ie is [-]int, ie..fe .frac, fe..end exp. */
static int to_double(parser *p, size_t st, size_t ie, size_t fe, size_t end, double *d) {
  const unsigned char *s = p->s;
  size_t frac = fe > ie ? fe - ie - 1 : 0;
  long long e = 0;
  char x[32];
  p->tmp.len = 0;
  if (mw__buf_add(&p->tmp, s + st, ie - st) || (frac && mw__buf_add(&p->tmp, s + ie + 1, frac)))
    return MW_ENOMEM;
  if (fe < end) {
    size_t i = fe + 1;
    int neg = s[i] == '-';
    if (s[i] == '+' || s[i] == '-') i++;
    for (; i < end; i++)
      if (e < 100000000) e = e * 10 + (s[i] - '0'); /* saturates far beyond any double */
    if (neg) e = -e;
  }
  snprintf(x, sizeof x, "e%lld", e - (long long)frac);
  if (mw__buf_addstr(&p->tmp, x)) return MW_ENOMEM;
  *d = strtod(p->tmp.p, NULL);
  return 0;
}

/* Appends the ECMAScript Number::toString layout of (-)0.dig x 10^e, dig
 * being k > 0 significant digits without trailing zeros. */
static int es_format(mw_buf *out, int neg, const char *dig, int k, int e) {
  char r[40];
  int m = 0;
  if (neg) r[m++] = '-';
  if (k <= e && e <= 21) {
    memcpy(r + m, dig, k), m += k;
    memset(r + m, '0', e - k), m += e - k;
  } else if (0 < e && e <= 21) {
    memcpy(r + m, dig, e), m += e;
    r[m++] = '.';
    memcpy(r + m, dig + e, k - e), m += k - e;
  } else if (-6 < e && e <= 0) {
    r[m++] = '0', r[m++] = '.';
    memset(r + m, '0', -e), m += -e;
    memcpy(r + m, dig, k), m += k;
  } else {
    int x = e > 0 ? e - 1 : 1 - e;
    r[m++] = dig[0];
    if (k > 1) {
      r[m++] = '.';
      memcpy(r + m, dig + 1, k - 1), m += k - 1;
    }
    r[m++] = 'e', r[m++] = e > 0 ? '+' : '-';
    if (x >= 100) r[m++] = (char)('0' + x / 100);
    if (x >= 10) r[m++] = (char)('0' + x / 10 % 10);
    r[m++] = (char)('0' + x % 10);
  }
  return mw__buf_add(out, r, m);
}

/* A literal of at most 15 significant digits, well inside the normal range,
 * is its own shortest round-trip form (DBL_DIG): only the layout changes, and
 * neither strtod nor the digit search is needed.  Returns 1 if it does not
 * apply.  Positions as for to_double. */
static int short_decimal(parser *p, size_t st, size_t ie, size_t fe, size_t end) {
  const unsigned char *s = p->s;
  size_t d0 = st + (s[st] == '-');
  char seq[40];
  int len = 0, f, l;
  long e = 0;
  if (fe - d0 > sizeof seq) return 1;
  for (size_t i = d0; i < fe; i++)
    if (s[i] != '.') seq[len++] = (char)s[i];
  for (f = 0; f < len && seq[f] == '0'; f++) continue;
  if (f == len) return put(p->out, '0'); /* any zero, -0.0e7 too */
  for (l = len - 1; seq[l] == '0'; l--) continue;
  if (l - f >= 15) return 1;
  if (fe < end) {
    size_t i = fe + 1 + (s[fe + 1] == '+' || s[fe + 1] == '-');
    for (; i < end; i++)
      if (e < 100000) e = e * 10 + (s[i] - '0');
    if (s[fe + 1] == '-') e = -e;
  }
  e += (long)(ie - d0) - f;
  if (e <= -300 || e > 300) return 1;
  return es_format(p->out, s[st] == '-', seq + f, l - f + 1, (int)e);
}

static int number(parser *p) {
  const unsigned char *s = p->s;
  size_t n = p->n, st = p->i, i = st, ie, fe;
  double d;
  int rc;
  if (i < n && s[i] == '-') i++;
  if (i >= n || !mw__isdigit(s[i])) return fail(p, "unexpected character at byte %zu", i);
  if (s[i++] != '0') /* no leading zeros */
    while (i < n && mw__isdigit(s[i])) i++;
  ie = i;
  if (i < n && s[i] == '.') {
    if (++i >= n || !mw__isdigit(s[i])) return fail(p, "bad number at byte %zu", st);
    while (i < n && mw__isdigit(s[i])) i++;
  }
  fe = i;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || !mw__isdigit(s[i])) return fail(p, "bad number at byte %zu", st);
    while (i < n && mw__isdigit(s[i])) i++;
  }
  p->i = i;
  if (i == ie && fits_int64(s + st, i - st)) {
    if (i - st == 2 && s[st] == '-' && s[st + 1] == '0') return put(p->out, '0');
    return mw__buf_add(p->out, s + st, i - st);
  }
  if ((rc = short_decimal(p, st, ie, fe, i)) != 1) return rc;
  if ((rc = to_double(p, st, ie, fe, i, &d))) return rc;
  if (isinf(d)) return fail(p, "number out of range at byte %zu", st);
  return mw__json_double(p->out, d);
}

static int literal(parser *p, const char *w, size_t n) {
  if (p->n - p->i < n || memcmp(p->s + p->i, w, n))
    return fail(p, "unexpected character at byte %zu", p->i);
  p->i += n;
  return mw__buf_add(p->out, w, n);
}

static void ws(parser *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->i++;
  }
}

static int value(parser *p, int depth);

static int array(parser *p, int depth) {
  int rc;
  if (depth > MW_JSON_MAX_DEPTH)
    return fail(p, "nesting deeper than %d at byte %zu", MW_JSON_MAX_DEPTH, p->i);
  p->i++;
  if ((rc = put(p->out, '['))) return rc;
  ws(p);
  if (p->i < p->n && p->s[p->i] == ']') {
    p->i++;
    return put(p->out, ']');
  }
  for (;;) {
    if ((rc = value(p, depth))) return rc;
    ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end of input at byte %zu", p->i);
    if (p->s[p->i] == ']') {
      p->i++;
      return put(p->out, ']');
    }
    if (p->s[p->i] != ',') return fail(p, "expected ',' or ']' at byte %zu", p->i);
    p->i++;
    if ((rc = put(p->out, ','))) return rc;
  }
}

static int cmp_member(const void *a, const void *b) {
  const member *x = a, *y = b;
  return mw__json_keycmp(x->kp, x->klen, y->kp, y->klen);
}

static int duplicate(parser *p, const member *a, const member *b) {
  return fail(p, "duplicate key \"%.*s\" at byte %zu", (int)(a->klen < 40 ? a->klen : 40), a->kp,
              a->at > b->at ? a->at : b->at);
}

/* Sorts the members of the object just closed (from m[base]) and rewrites
 * them in that order; equal keys end up adjacent. */
static int order(parser *p, size_t base) {
  member *m = p->m + base;
  size_t k = p->mlen - base, j;
  for (j = 0; j < k; j++) m[j].kp = p->keys.p + m[j].key;
  for (j = 1; j < k; j++) { /* input that is already canonical costs one pass */
    int c = cmp_member(m + j - 1, m + j);
    if (c == 0) return duplicate(p, m + j - 1, m + j);
    if (c > 0) break;
  }
  if (j >= k) return 0;
  size_t s0 = m[0].start;
  char *w = p->out->p + s0;
  p->tmp.len = 0;
  if (mw__buf_add(&p->tmp, w, m[k - 1].end - s0)) return MW_ENOMEM;
  qsort(m, k, sizeof *m, cmp_member);
  for (j = 1; j < k; j++)
    if (cmp_member(m + j - 1, m + j) == 0) return duplicate(p, m + j - 1, m + j);
  for (j = 0; j < k; j++) {
    if (j) *w++ = ',';
    memcpy(w, p->tmp.p + (m[j].start - s0), m[j].end - m[j].start);
    w += m[j].end - m[j].start;
  }
  return 0;
}

static int object(parser *p, int depth) {
  size_t base = p->mlen, kbase = p->keys.len;
  int rc;
  if (depth > MW_JSON_MAX_DEPTH)
    return fail(p, "nesting deeper than %d at byte %zu", MW_JSON_MAX_DEPTH, p->i);
  p->i++;
  if ((rc = put(p->out, '{'))) return rc;
  ws(p);
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    return put(p->out, '}');
  }
  for (;;) {
    member m;
    ws(p);
    if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a string key at byte %zu", p->i);
    m.at = p->i;
    m.key = p->keys.len;
    m.start = p->out->len;
    if ((rc = lex_string(p, &p->keys))) return rc;
    m.klen = p->keys.len - m.key;
    if ((rc = mw__json_string(p->out, p->keys.p + m.key, m.klen))) return rc;
    ws(p);
    if (p->i >= p->n || p->s[p->i] != ':') return fail(p, "expected ':' at byte %zu", p->i);
    p->i++;
    if ((rc = put(p->out, ':')) || (rc = value(p, depth))) return rc;
    m.end = p->out->len;
    if (p->mlen == p->mcap) {
      size_t cap = p->mcap ? p->mcap * 2 : 32;
      member *nm = realloc(p->m, cap * sizeof *nm);
      if (!nm) return MW_ENOMEM;
      p->m = nm, p->mcap = cap;
    }
    p->m[p->mlen++] = m;
    ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end of input at byte %zu", p->i);
    if (p->s[p->i] == '}') break;
    if (p->s[p->i] != ',') return fail(p, "expected ',' or '}' at byte %zu", p->i);
    p->i++;
    if ((rc = put(p->out, ','))) return rc;
  }
  p->i++;
  if ((rc = order(p, base))) return rc;
  p->mlen = base;
  p->keys.len = kbase;
  return put(p->out, '}');
}

static int value(parser *p, int depth) {
  ws(p);
  if (p->i >= p->n) return fail(p, "unexpected end of input at byte %zu", p->i);
  switch (p->s[p->i]) {
  case '{': return object(p, depth + 1);
  case '[': return array(p, depth + 1);
  case '"': return string(p);
  case 't': return literal(p, "true", 4);
  case 'f': return literal(p, "false", 5);
  case 'n': return literal(p, "null", 4);
  default: return number(p);
  }
}

int mw__json_canon(const char *in, size_t n, mw_buf *out, char *err, size_t errlen) {
  parser p = {.s = (const unsigned char *)in, .n = n, .out = out, .err = err, .errlen = errlen};
  size_t len0 = out->len;
  int rc;
  if (n >= 3 && !memcmp(in, "\xEF\xBB\xBF", 3)) {
    rc = fail(&p, "byte order mark at byte 0");
  } else if (!(rc = value(&p, 0))) {
    ws(&p);
    if (p.i < n) rc = fail(&p, "trailing data at byte %zu", p.i);
  }
  mw__buf_free(&p.keys);
  mw__buf_free(&p.tmp);
  free(p.m);
  if (rc == MW_ENOMEM) fail(&p, "out of memory");
  if (rc) out->len = len0;
  if (out->p) out->p[out->len] = '\0';
  return rc;
}

int mw__json_string(mw_buf *out, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t len0 = out->len, i = 0, st = 0;
  int rc = MW_ENOMEM;
  if (mw__buf_reserve(out, n + 2)) return MW_ENOMEM;
  out->p[out->len++] = '"';
  while (i < n) {
    unsigned c = s[i];
    char u[8];
    const char *e = u;
    if (c >= 0x80) {
      size_t l = mw__utf8_len(s + i, n - i);
      if (!l) {
        rc = MW_EJSON;
        goto fail;
      }
      i += l;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      i++;
      continue;
    }
    switch (c) {
    case '"': e = "\\\""; break;
    case '\\': e = "\\\\"; break;
    case '\b': e = "\\b"; break;
    case '\t': e = "\\t"; break;
    case '\n': e = "\\n"; break;
    case '\f': e = "\\f"; break;
    case '\r': e = "\\r"; break;
    default: snprintf(u, sizeof u, "\\u%04x", c);
    }
    if ((i > st && mw__buf_add(out, s + st, i - st)) || mw__buf_addstr(out, e)) goto fail;
    st = ++i;
  }
  if ((i > st && mw__buf_add(out, s + st, i - st)) || mw__buf_addc(out, '"')) goto fail;
  return 0;
fail:
  out->len = len0;
  out->p[len0] = '\0';
  return rc;
}

int mw__json_double(mw_buf *out, double d) {
  char t[40], dig[20];
  int prec, k = 0;
  const char *q = t;
  if (!isfinite(d)) return MW_EJSON;
  if (d == 0) return mw__buf_add(out, "0", 1); /* also -0 */
  /* 17 significant digits always round-trip.  For a normal double, if 15 do,
   * the shortest form is those 15 less trailing zeros (DBL_DIG), so the
   * search can start there; subnormals have fewer digits to spare. */
  for (prec = fabs(d) >= DBL_MIN ? 15 : 1;; prec++) {
    snprintf(t, sizeof t, "%.*e", prec - 1, d);
    if (prec == 17 || strtod(t, NULL) == d) break;
  }
  /* t is [-]d[<locale point>ddd]e(+|-)xx; take the digits whatever the point */
  q += *q == '-';
  for (; *q != 'e'; q++)
    if (mw__isdigit((unsigned char)*q)) dig[k++] = *q;
  while (k > 1 && dig[k - 1] == '0') k--;
  return es_format(out, d < 0, dig, k, atoi(q + 1) + 1);
}

/* The UTF-16 order of the code point at s, as one integer: UTF-8 bytes sort
 * by code point, and UTF-16 differs only in putting U+10000.. (lead
 * surrogates D800..DBFF) before U+E000..U+FFFF. */
static uint32_t utf16_rank(const unsigned char *s, size_t n) {
  uint32_t c = s[0];
  if (c >= 0xF0 && n >= 4)
    c = (c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
  else if (c >= 0xE0 && n >= 3)
    c = (c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
  else if (c >= 0xC0 && n >= 2)
    c = (c & 0x1F) << 6 | (s[1] & 0x3F);
  if (c >= 0x10000) return c - 0x10000 + 0xD800;
  if (c >= 0xE000) return c + 0x100000;
  return c;
}

int mw__json_keycmp(const char *a, size_t an, const char *b, size_t bn) {
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  size_t n = an < bn ? an : bn, i = 0;
  uint32_t rx, ry;
  while (i < n && x[i] == y[i]) i++;
  if (i == n) return an < bn ? -1 : an > bn;
  while (i > 0 && (x[i] & 0xC0) == 0x80) i--; /* same prefix, so the same code point start */
  rx = utf16_rank(x + i, an - i);
  ry = utf16_rank(y + i, bn - i);
  return rx < ry ? -1 : rx > ry;
}
