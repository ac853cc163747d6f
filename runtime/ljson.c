/* ljson.c -- JSON text straight to Lua values, and Lua values to canonical
 * JSON.  The metatables mw.array and mw.object keep [] and {} apart; all
 * scratch memory is Lua's, so a memory error raised midway leaks nothing. */
#include "ljson.h"
#include "jlex.h"
#include "json.h"
#include "mw.h"
#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_MT "mw.array"
#define OBJECT_MT "mw.object"

void mw__ljson_init(lua_State *L) {
  luaL_newmetatable(L, ARRAY_MT);
  luaL_newmetatable(L, OBJECT_MT);
  lua_pop(L, 2);
}

static void vmsg(char *err, size_t errlen, const char *fmt, va_list ap) {
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
}

/* ---- decode ------------------------------------------------------------- */

typedef struct dec {
  lua_State *L;
  const unsigned char *s;
  size_t n, i;
  int amt, omt; /* stack slots of the two metatables */
  char *err;
  size_t errlen;
} dec;

static int dfail(dec *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg(d->err, d->errlen, fmt, ap);
  va_end(ap);
  return MW_EJSON;
}

static void dws(dec *d) {
  while (d->i < d->n) {
    unsigned char c = d->s[d->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    d->i++;
  }
}

/* Pushes the string whose quote is at d->i. */
static int dstring(dec *d) {
  lua_State *L = d->L;
  const unsigned char *s = d->s;
  size_t n = d->n, i = d->i + 1, j = mw__json_plain(s, i, n);
  luaL_Buffer b;
  if (j < n && s[j] == '"') {
    lua_pushlstring(L, (const char *)s + i, j - i);
    d->i = j + 1;
    return 0;
  }
  luaL_buffinit(L, &b);
  for (;;) {
    unsigned cp, lo;
    luaL_addlstring(&b, (const char *)s + i, j - i);
    if (j >= n) return dfail(d, "unterminated string at byte %zu", d->i);
    if (s[j] == '"') {
      luaL_pushresult(&b);
      d->i = j + 1;
      return 0;
    }
    if (s[j] < 0x20) return dfail(d, "control character in string at byte %zu", j);
    if (s[j] != '\\') return dfail(d, "invalid UTF-8 at byte %zu", j);
    if (j + 1 >= n) return dfail(d, "unterminated string at byte %zu", d->i);
    i = j + 2;
    switch (s[j + 1]) {
    case '"': luaL_addchar(&b, '"'); break;
    case '\\': luaL_addchar(&b, '\\'); break;
    case '/': luaL_addchar(&b, '/'); break;
    case 'b': luaL_addchar(&b, '\b'); break;
    case 'f': luaL_addchar(&b, '\f'); break;
    case 'n': luaL_addchar(&b, '\n'); break;
    case 'r': luaL_addchar(&b, '\r'); break;
    case 't': luaL_addchar(&b, '\t'); break;
    case 'u':
      if (n - i < 4 || mw__hex4(s + i, &cp)) return dfail(d, "bad \\u escape at byte %zu", j);
      i += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return dfail(d, "lone surrogate at byte %zu", j);
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (n - i < 6 || s[i] != '\\' || s[i + 1] != 'u' || mw__hex4(s + i + 2, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF)
          return dfail(d, "lone surrogate at byte %zu", j);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        i += 6;
      }
      if (cp < 0x80) {
        luaL_addchar(&b, (char)cp);
      } else if (cp < 0x800) {
        luaL_addchar(&b, (char)(0xC0 | cp >> 6));
        luaL_addchar(&b, (char)(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        luaL_addchar(&b, (char)(0xE0 | cp >> 12));
        luaL_addchar(&b, (char)(0x80 | (cp >> 6 & 0x3F)));
        luaL_addchar(&b, (char)(0x80 | (cp & 0x3F)));
      } else {
        luaL_addchar(&b, (char)(0xF0 | cp >> 18));
        luaL_addchar(&b, (char)(0x80 | (cp >> 12 & 0x3F)));
        luaL_addchar(&b, (char)(0x80 | (cp >> 6 & 0x3F)));
        luaL_addchar(&b, (char)(0x80 | (cp & 0x3F)));
      }
      break;
    default: return dfail(d, "bad escape at byte %zu", j);
    }
    j = mw__json_plain(s, i, n);
  }
}

/* Validates the literal against JSON's grammar, then lets Lua convert it:
 * Lua's numeral rules give an integer exactly when it is one within int64. */
static int dnumber(dec *d) {
  lua_State *L = d->L;
  const unsigned char *s = d->s;
  size_t n = d->n, st = d->i, i = st, len;
  char t[64];
  const char *lit = t;
  if (i < n && s[i] == '-') i++;
  if (i >= n || !mw__isdigit(s[i])) return dfail(d, "unexpected character at byte %zu", i);
  if (s[i++] != '0')
    while (i < n && mw__isdigit(s[i])) i++;
  if (i < n && s[i] == '.') {
    if (++i >= n || !mw__isdigit(s[i])) return dfail(d, "bad number at byte %zu", st);
    while (i < n && mw__isdigit(s[i])) i++;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || !mw__isdigit(s[i])) return dfail(d, "bad number at byte %zu", st);
    while (i < n && mw__isdigit(s[i])) i++;
  }
  d->i = i;
  len = i - st;
  if (len < sizeof t) {
    memcpy(t, s + st, len);
    t[len] = '\0';
  } else {
    lit = lua_pushlstring(L, (const char *)s + st, len);
  }
  if (!lua_stringtonumber(L, lit)) return dfail(d, "bad number at byte %zu", st);
  if (lit != t) lua_remove(L, -2);
  if (!lua_isinteger(L, -1) && isinf(lua_tonumber(L, -1)))
    return dfail(d, "number out of range at byte %zu", st);
  return 0;
}

static int dliteral(dec *d, const char *w, size_t n) {
  if (d->n - d->i < n || memcmp(d->s + d->i, w, n))
    return dfail(d, "unexpected character at byte %zu", d->i);
  d->i += n;
  return 0;
}

static int dvalue(dec *d, int depth);

static int dcontainer(dec *d, int depth, int mt) {
  lua_State *L = d->L;
  if (depth > MW_JSON_MAX_DEPTH)
    return dfail(d, "nesting deeper than %d at byte %zu", MW_JSON_MAX_DEPTH, d->i);
  lua_newtable(L);
  lua_pushvalue(L, mt);
  lua_setmetatable(L, -2);
  d->i++;
  dws(d);
  if (d->i < d->n && d->s[d->i] == (mt == d->amt ? ']' : '}')) {
    d->i++;
    return 0;
  }
  for (lua_Integer k = 1;; k++) {
    int rc;
    if (mt == d->amt) {
      if ((rc = dvalue(d, depth))) return rc;
      lua_rawseti(L, -2, k);
    } else {
      size_t at;
      dws(d);
      at = d->i;
      if (d->i >= d->n || d->s[d->i] != '"') return dfail(d, "expected a string key at byte %zu", d->i);
      if ((rc = dstring(d))) return rc;
      lua_pushvalue(L, -1);
      if (lua_rawget(L, -3) != LUA_TNIL) {
        size_t kn;
        const char *key = lua_tolstring(L, -2, &kn);
        return dfail(d, "duplicate key \"%.*s\" at byte %zu", (int)(kn < 40 ? kn : 40), key, at);
      }
      lua_pop(L, 1);
      dws(d);
      if (d->i >= d->n || d->s[d->i] != ':') return dfail(d, "expected ':' at byte %zu", d->i);
      d->i++;
      if ((rc = dvalue(d, depth))) return rc;
      lua_rawset(L, -3);
    }
    dws(d);
    if (d->i >= d->n) return dfail(d, "unexpected end of input at byte %zu", d->i);
    if (d->s[d->i] == (mt == d->amt ? ']' : '}')) {
      d->i++;
      return 0;
    }
    if (d->s[d->i] != ',')
      return dfail(d, mt == d->amt ? "expected ',' or ']' at byte %zu" : "expected ',' or '}' at byte %zu",
                   d->i);
    d->i++;
  }
}

static int dvalue(dec *d, int depth) {
  lua_State *L = d->L;
  int rc;
  dws(d);
  if (d->i >= d->n) return dfail(d, "unexpected end of input at byte %zu", d->i);
  if (!lua_checkstack(L, 4)) return MW_ENOMEM;
  switch (d->s[d->i]) {
  case '{': return dcontainer(d, depth + 1, d->omt);
  case '[': return dcontainer(d, depth + 1, d->amt);
  case '"': return dstring(d);
  case 't':
    if (!(rc = dliteral(d, "true", 4))) lua_pushboolean(L, 1);
    return rc;
  case 'f':
    if (!(rc = dliteral(d, "false", 5))) lua_pushboolean(L, 0);
    return rc;
  case 'n':
    if (!(rc = dliteral(d, "null", 4))) lua_pushlightuserdata(L, NULL);
    return rc;
  default: return dnumber(d);
  }
}

int mw__ljson_decode(lua_State *L, const char *s, size_t n, char *err, size_t errlen) {
  dec d = {.L = L, .s = (const unsigned char *)s, .n = n, .err = err, .errlen = errlen};
  int top = lua_gettop(L), rc;
  if (!lua_checkstack(L, 8)) {
    rc = MW_ENOMEM;
  } else {
    luaL_newmetatable(L, ARRAY_MT);
    luaL_newmetatable(L, OBJECT_MT);
    d.amt = top + 1;
    d.omt = top + 2;
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
      rc = dfail(&d, "byte order mark at byte 0");
    } else if (!(rc = dvalue(&d, 0))) {
      dws(&d);
      if (d.i < n) rc = dfail(&d, "trailing data at byte %zu", d.i);
    }
  }
  if (rc) {
    if (rc == MW_ENOMEM && err && errlen) snprintf(err, errlen, "out of memory");
    lua_settop(L, top);
    return rc;
  }
  lua_replace(L, top + 1);
  lua_settop(L, top + 1);
  return 0;
}

/* ---- encode ------------------------------------------------------------- */

typedef struct key {
  const char *s; /* a string the table being encoded keeps alive */
  size_t n;
} key;

typedef struct enc {
  lua_State *L;
  mw_buf *out;
  int amt, omt, kslot; /* stack slots: the metatables, the userdata holding k */
  key *k;              /* keys of the open objects, a stack */
  size_t klen, kcap;
  struct {
    const char *k; /* NULL for an array step */
    size_t kn;
    lua_Integer i;
  } path[MW_JSON_MAX_DEPTH];
  char *err;
  size_t errlen;
} enc;

/* Appends to buf[0..lim); *w passes lim - 1 once something did not fit. */
static void app(char *buf, size_t lim, size_t *w, const char *fmt, ...) {
  va_list ap;
  int r;
  if (*w + 1 >= lim) {
    *w = lim;
    return;
  }
  va_start(ap, fmt);
  r = vsnprintf(buf + *w, lim - *w, fmt, ap);
  va_end(ap);
  if (r > 0) *w += (size_t)r;
}

static int ident(const char *s, size_t n) {
  if (!n || mw__isdigit((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '_' || mw__isdigit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))) return 0;
  }
  return 1;
}

/* "$.a[2].b: <why>", the path being the first `depth` steps (0-based
 * indices, as in the JSON written); a path too long for err loses its tail to
 * "..." rather than the reason losing its place. */
static int efail(enc *e, int depth, const char *fmt, ...) {
  char why[96];
  size_t w = 0, lim;
  va_list ap;
  if (!e->err || !e->errlen) return MW_EJSON;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  lim = e->errlen > strlen(why) + 3 ? e->errlen - strlen(why) - 2 : 1;
  app(e->err, lim, &w, "$");
  for (int i = 0; i < depth; i++) {
    int kn = (int)(e->path[i].kn < 40 ? e->path[i].kn : 40);
    if (!e->path[i].k) app(e->err, lim, &w, "[%lld]", (long long)e->path[i].i - 1);
    else if (ident(e->path[i].k, e->path[i].kn)) app(e->err, lim, &w, ".%.*s", kn, e->path[i].k);
    else app(e->err, lim, &w, "[\"%.*s\"]", kn, e->path[i].k);
  }
  if (w >= lim) {
    w = lim - 1;
    if (w >= 3) memcpy(e->err + w - 3, "...", 3);
  }
  snprintf(e->err + w, e->errlen - w, ": %s", why);
  return MW_EJSON;
}

static int valid_utf8(const char *s, size_t n) {
  for (size_t i = 0, l; i < n; i += l)
    if (!(l = mw__utf8_len((const unsigned char *)s + i, n - i))) return 0;
  return 1;
}

static int cmp_key(const void *a, const void *b) {
  const key *x = a, *y = b;
  return mw__json_keycmp(x->s, x->n, y->s, y->n);
}

static void kpush(enc *e, const char *s, size_t n) {
  if (e->klen == e->kcap) { /* a bigger userdata replaces the old one in its slot */
    key *k = lua_newuserdatauv(e->L, 2 * e->kcap * sizeof *k, 0);
    memcpy(k, e->k, e->klen * sizeof *k);
    lua_replace(e->L, e->kslot);
    e->k = k;
    e->kcap *= 2;
  }
  e->k[e->klen].s = s;
  e->k[e->klen++].n = n;
}

static int evalue(enc *e, int idx, int depth);

static int etable(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  mw_buf *out = e->out;
  size_t base = e->klen, nstr = 0, other = 0;
  lua_Integer nint = 0, max = 0;
  int kind = 0, arr, rc; /* kind: 0 no metatable of ours, 1 mw.array, 2 mw.object */
  if (depth >= MW_JSON_MAX_DEPTH) return efail(e, depth, "nesting deeper than %d", MW_JSON_MAX_DEPTH);
  if (!lua_checkstack(L, 4)) return MW_ENOMEM;
  if (lua_getmetatable(L, idx)) {
    kind = lua_rawequal(L, -1, e->amt) ? 1 : lua_rawequal(L, -1, e->omt) ? 2 : 0;
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      size_t kn;
      const char *ks = lua_tolstring(L, -2, &kn);
      kpush(e, ks, kn);
      nstr++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2) && lua_tointeger(L, -2) > 0) {
      lua_Integer i = lua_tointeger(L, -2);
      nint++;
      if (i > max) max = i;
    } else {
      other++;
    }
    lua_pop(L, 1);
  }
  arr = kind == 1 || (kind == 0 && nint > 0);
  if (arr ? nstr || other || nint != max : nint || other)
    return efail(e, depth, kind == 1   ? "array with holes or non-index keys"
                           : kind == 2 ? "non-string keys in an object"
                                       : "mixed or non-string keys");
  if (arr) {
    if ((rc = mw__buf_addc(out, '['))) return rc;
    for (lua_Integer i = 1; i <= max; i++) {
      if (i > 1 && (rc = mw__buf_addc(out, ','))) return rc;
      lua_rawgeti(L, idx, i);
      e->path[depth].k = NULL;
      e->path[depth].i = i;
      rc = evalue(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
      if (rc) return rc;
    }
    return mw__buf_addc(out, ']');
  }
  for (size_t j = base; j < e->klen; j++)
    if (!valid_utf8(e->k[j].s, e->k[j].n)) return efail(e, depth, "invalid UTF-8 in a key");
  qsort(e->k + base, nstr, sizeof *e->k, cmp_key);
  if ((rc = mw__buf_addc(out, '{'))) return rc;
  for (size_t j = 0; j < nstr; j++) {
    key k = e->k[base + j]; /* e->k moves when a nested object grows it */
    if ((j && (rc = mw__buf_addc(out, ','))) || (rc = mw__json_string(out, k.s, k.n)) ||
        (rc = mw__buf_addc(out, ':')))
      return rc;
    lua_pushlstring(L, k.s, k.n);
    lua_rawget(L, idx);
    e->path[depth].k = k.s;
    e->path[depth].kn = k.n;
    rc = evalue(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
    if (rc) return rc;
  }
  e->klen = base;
  return mw__buf_addc(out, '}');
}

static int evalue(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  char t[32];
  size_t n;
  const char *s;
  double x;
  int rc;
  switch (lua_type(L, idx)) {
  case LUA_TBOOLEAN: return mw__buf_addstr(e->out, lua_toboolean(L, idx) ? "true" : "false");
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      snprintf(t, sizeof t, "%lld", (long long)lua_tointeger(L, idx));
      return mw__buf_addstr(e->out, t);
    }
    x = lua_tonumber(L, idx);
    if (!isfinite(x)) return efail(e, depth, "cannot encode NaN or infinity");
    if (x == floor(x) && x > -0x1p63 && x < 0x1p63) { /* 3.0 is 3, exactly */
      snprintf(t, sizeof t, "%lld", (long long)x);
      return mw__buf_addstr(e->out, t);
    }
    return mw__json_double(e->out, x);
  case LUA_TSTRING:
    s = lua_tolstring(L, idx, &n);
    rc = mw__json_string(e->out, s, n);
    return rc == MW_EJSON ? efail(e, depth, "invalid UTF-8 in a string") : rc;
  case LUA_TTABLE: return etable(e, idx, depth);
  case LUA_TLIGHTUSERDATA:
    if (!lua_touserdata(L, idx)) return mw__buf_addstr(e->out, "null");
    return efail(e, depth, "cannot encode userdata");
  default: return efail(e, depth, "cannot encode %s", luaL_typename(L, idx));
  }
}

int mw__ljson_encode(lua_State *L, int idx, mw_buf *out, char *err, size_t errlen) {
  enc e;
  size_t len0 = out->len;
  int top = lua_gettop(L), rc;
  e.L = L;
  e.out = out;
  e.err = err;
  e.errlen = errlen;
  idx = lua_absindex(L, idx);
  if (!lua_checkstack(L, 8)) {
    rc = MW_ENOMEM;
  } else {
    luaL_newmetatable(L, ARRAY_MT);
    luaL_newmetatable(L, OBJECT_MT);
    e.amt = top + 1;
    e.omt = top + 2;
    e.kcap = 16;
    e.klen = 0;
    e.k = lua_newuserdatauv(L, e.kcap * sizeof *e.k, 0);
    e.kslot = top + 3;
    rc = evalue(&e, idx, 0);
  }
  lua_settop(L, top);
  if (rc) {
    if (rc == MW_ENOMEM && err && errlen) snprintf(err, errlen, "out of memory");
    out->len = len0;
    if (out->p) out->p[len0] = '\0';
  }
  return rc;
}
