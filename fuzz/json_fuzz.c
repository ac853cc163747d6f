/* json_fuzz.c -- libFuzzer target for canonical JSON (runtime/json.c) and its
 * Lua bridge (runtime/ljson.c).  Built and run by fuzz/run.sh.
 *
 * For every input:
 *   1. mw__json_canon and mw__ljson_decode must agree on accepting it: both
 *      validate the same grammar (RFC 8259 + the refusals listed in json.h).
 *   2. When it is accepted, the output is NUL-terminated and a fixed point:
 *      canonicalising it again gives the same bytes.
 *   3. The canonical text decoded into Lua and encoded again gives the same
 *      bytes (the store hashes text canon; folds and skills re-encode from
 *      Lua, so the two must meet).
 *   4. The input itself decoded into Lua and encoded gives the text canon's
 *      bytes, except for the documented float case (see float_exempt).
 * Any disagreement calls abort() after printing both sides, so libFuzzer
 * records the input as a crash. */
#include "json.h"
#include "ljson.h"
#include "mw.h"

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lua_State *L;

static void show(const char *what, const char *p, size_t n) {
  fprintf(stderr, "%s (%zu bytes): ", what, n);
  for (size_t i = 0; i < n && i < 400; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') fputc(c, stderr);
    else fprintf(stderr, "\\x%02x", c);
  }
  fputs(n > 400 ? "...\n" : "\n", stderr);
}

static void die(const char *why, const uint8_t *in, size_t n, const mw_buf *a, const mw_buf *b) {
  fprintf(stderr, "\njson_fuzz: %s\n", why);
  show("input", (const char *)in, n);
  if (a) show("text canon", a->p, a->len);
  if (b) show("other", b->p, b->len);
  abort();
}

/* ---- protected Lua calls (decode/encode raise only on memory errors) ---- */

typedef struct lcall {
  const char *s;
  size_t n;
  mw_buf *out;
  int rc, stage; /* stage: 1 decode failed, 2 encode failed */
  char err[256];
} lcall;

static int p_roundtrip(lua_State *l) {
  lcall *c = lua_touserdata(l, 1);
  c->stage = 1;
  c->rc = mw__ljson_decode(l, c->s, c->n, c->err, sizeof c->err);
  if (c->rc) return 0;
  c->stage = 2;
  c->rc = mw__ljson_encode(l, -1, c->out, c->err, sizeof c->err);
  return 0;
}

/* Decodes s[0..n) into Lua and encodes it into out; returns the first
 * failing step's code (MW_EJSON for a refused text). */
static int lua_roundtrip(const char *s, size_t n, mw_buf *out, char *err, size_t errlen, int *stage) {
  lcall c = {.s = s, .n = n, .out = out, .rc = 0};
  lua_settop(L, 0);
  lua_pushcfunction(L, p_roundtrip);
  lua_pushlightuserdata(L, &c);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "json_fuzz: Lua raised: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_settop(L, 0);
  snprintf(err, errlen, "%s", c.err);
  *stage = c.stage;
  return c.rc;
}

/* The documented float case.  ljson.c's encoder writes a Lua float that is
 * integral and within [-2^63, 2^63) as an integer with "%lld" ("3.0 is 3,
 * exactly"), which prints every digit of the double, while json.c writes a
 * non-int64 literal through mw__json_double: the shortest round-trip digits,
 * padded with zeros.  The two agree below 2^53 (every integral double there
 * prints exactly in its shortest form) and differ above: "1152921504606846976.0"
 * (2^60) is 1152921504606847000 in text canon and 1152921504606846976 from
 * Lua.  So a text holding a literal with a fraction or an exponent -- the
 * only way to get a Lua float from the decoder short of overflowing int64 --
 * whose magnitude lies in [2^53, 2^63] may legitimately differ between
 * text canon and decode+encode.  Returns 1 when s holds such a literal.
 * Applied to the canonical text (check 3) it never fires: es_format writes
 * every integral value below 1e21 as plain digits, never with '.' or 'e'. */
static int float_exempt(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    char c = s[i];
    if (c == '"') { /* skip a string (s is valid JSON: it is terminated) */
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
      i++;
      continue;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t st = i;
      int fracexp = 0;
      while (i < n && (s[i] == '-' || s[i] == '+' || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                       (s[i] >= '0' && s[i] <= '9'))) {
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') fracexp = 1;
        i++;
      }
      if (fracexp) {
        char *t = malloc(i - st + 1);
        if (!t) abort();
        memcpy(t, s + st, i - st);
        t[i - st] = '\0';
        double x = fabs(strtod(t, NULL));
        free(t);
        if (x >= 0x1p53 && x <= 0x1p63) return 1;
      }
      continue;
    }
    i++;
  }
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  L = luaL_newstate();
  if (!L) abort();
  mw__ljson_init(L);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *in = (const char *)data;
  mw_buf canon = {0}, again = {0}, lua = {0}, direct = {0};
  char err[256] = "", lerr[256] = "";
  int stage;
  int rc = mw__json_canon(in, size, &canon, err, sizeof err);
  if (rc != 0 && rc != MW_EJSON) die("mw__json_canon: neither 0 nor MW_EJSON", data, size, NULL, NULL);
  if (rc == MW_EJSON && !err[0]) die("refusal without a message", data, size, NULL, NULL);

  /* 1. the Lua decoder accepts exactly what text canon accepts */
  int lrc = lua_roundtrip(in, size, &direct, lerr, sizeof lerr, &stage);
  if (lrc && stage == 2) {
    fprintf(stderr, "encode: %d %s\n", lrc, lerr);
    die("Lua encode refuses what the Lua decoder produced", data, size, rc ? NULL : &canon, NULL);
  }
  if ((rc == 0) != (lrc == 0)) {
    fprintf(stderr, "canon: %d %s\nlua: %d %s\n", rc, err, lrc, lerr);
    die("text canon and the Lua decoder disagree on validity", data, size, rc ? NULL : &canon, NULL);
  }
  if (rc) goto out;

  /* 2. NUL-terminated, and a fixed point */
  if (!canon.p || canon.p[canon.len] != '\0') die("output not NUL-terminated", data, size, &canon, NULL);
  if (mw__json_canon(canon.p, canon.len, &again, err, sizeof err) != 0) {
    fprintf(stderr, "re-canon error: %s\n", err);
    die("canonical output is refused by mw__json_canon", data, size, &canon, NULL);
  }
  if (again.len != canon.len || memcmp(again.p, canon.p, canon.len))
    die("mw__json_canon is not idempotent", data, size, &canon, &again);

  /* 3. canonical text -> Lua -> canonical text is the identity */
  if ((lrc = lua_roundtrip(canon.p, canon.len, &lua, lerr, sizeof lerr, &stage)) != 0) {
    fprintf(stderr, "lua: %d %s\n", lrc, lerr);
    die("the canonical text does not survive Lua decode+encode", data, size, &canon, NULL);
  }
  if ((lua.len != canon.len || memcmp(lua.p, canon.p, canon.len)) && !float_exempt(canon.p, canon.len))
    die("Lua decode+encode of the canonical text changes its bytes", data, size, &canon, &lua);

  /* 4. input -> Lua -> canonical text equals text canon of the input */
  if ((direct.len != canon.len || memcmp(direct.p, canon.p, canon.len)) && !float_exempt(in, size))
    die("Lua decode+encode of the input differs from its text canon", data, size, &canon, &direct);

out:
  /* Free the garbage now: libFuzzer runs a leak scan after any input that
   * malloc'd more than it freed, and Lua's garbage would trigger one each time. */
  lua_gc(L, LUA_GCCOLLECT, 0);
  mw__buf_free(&canon);
  mw__buf_free(&again);
  mw__buf_free(&lua);
  mw__buf_free(&direct);
  return 0;
}
