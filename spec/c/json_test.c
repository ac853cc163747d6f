/* json_test.c -- checks canonical JSON (runtime/json.c) and its Lua bridge
 * (runtime/ljson.c).  Prints TAP-style lines; exits 0 only if every case
 * passes. */
#include "json.h"
#include "ljson.h"
#include "mw.h"
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

static void report(int ok, const char *name, const char *got) {
  printf("%sok %d - %s\n", ok ? "" : "not ", passed + failed + 1, name);
  if (!ok && got) printf("#   got: %s\n", got);
  if (ok) passed++;
  else failed++;
}

/* The canonical form is appended after what out already holds, and is a
 * fixed point. */
static void ok_canon_n(const char *name, const char *in, size_t n, const char *want) {
  mw_buf out = {0}, again = {0};
  char err[128] = "";
  int rc;
  mw__buf_addstr(&out, "pre");
  rc = mw__json_canon(in, n, &out, err, sizeof err);
  int ok = rc == 0 && out.len == 3 + strlen(want) && !memcmp(out.p, "pre", 3) &&
           !memcmp(out.p + 3, want, strlen(want)) && out.p[out.len] == '\0';
  if (ok) ok = !mw__json_canon(want, strlen(want), &again, err, sizeof err) && again.len == strlen(want) &&
               !memcmp(again.p, want, again.len);
  report(ok, name, rc ? err : out.p + 3);
  mw__buf_free(&out);
  mw__buf_free(&again);
}

static void ok_canon(const char *name, const char *in, const char *want) {
  ok_canon_n(name, in, strlen(in), want);
}

/* Fails with MW_EJSON, err containing `part`, out left as it was. */
static void bad_canon_n(const char *name, const char *in, size_t n, const char *part) {
  mw_buf out = {0};
  char err[128] = "";
  int rc;
  mw__buf_addstr(&out, "pre");
  rc = mw__json_canon(in, n, &out, err, sizeof err);
  report(rc == MW_EJSON && out.len == 3 && !strcmp(out.p, "pre") && strstr(err, part), name,
         rc ? err : out.p);
  mw__buf_free(&out);
}

#define BAD(name, lit, part) bad_canon_n(name, lit, sizeof(lit) - 1, part)

static char *nest(int depth, const char *open, const char *mid, const char *close) {
  size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
  char *s = malloc(depth * (lo + lc) + lm + 1), *w = s;
  for (int i = 0; i < depth; i++) memcpy(w, open, lo), w += lo;
  memcpy(w, mid, lm), w += lm;
  for (int i = 0; i < depth; i++) memcpy(w, close, lc), w += lc;
  *w = '\0';
  return s;
}

static void test_canon(void) {
  char *s;
  ok_canon("sorted keys", "{\"b\":1,\"a\":2,\"c\":3}", "{\"a\":2,\"b\":1,\"c\":3}");
  ok_canon("prefix sorts first", "{\"ab\":1,\"a\":2}", "{\"a\":2,\"ab\":1}");
  ok_canon("UTF-16 order: U+1F600 before U+FF61", "{\"\\uff61\":1,\"\\ud83d\\ude00\":2}",
           "{\"\xf0\x9f\x98\x80\":2,\"\xef\xbd\xa1\":1}");
  ok_canon("UTF-16 order, raw UTF-8 keys", "{\"\xef\xbd\xa1\":1,\"\xf0\x9f\x98\x80\":2}",
           "{\"\xf0\x9f\x98\x80\":2,\"\xef\xbd\xa1\":1}");
  ok_canon("RFC 8785 sorting example",
           "{\"\\u20ac\":1,\"\\r\":2,\"\\ufb33\":3,\"1\":4,\"\\ud83d\\ude00\":5,\"\\u0080\":6,\"\\u00f6\":7}",
           "{\"\\r\":2,\"1\":4,\"\xc2\x80\":6,\"\xc3\xb6\":7,\"\xe2\x82\xac\":1,\"\xf0\x9f\x98\x80\":5,"
           "\"\xef\xac\xb3\":3}");
  report(mw__json_keycmp("\xef\xbd\xa1", 3, "\xf0\x9f\x98\x80", 4) > 0 &&
             mw__json_keycmp("\xf0\x9f\x98\x80", 4, "\xef\xbd\xa1", 3) < 0 &&
             mw__json_keycmp("\xed\x9f\xbf", 3, "\xf0\x9f\x98\x80", 4) < 0 &&
             mw__json_keycmp("a", 1, "a", 1) == 0 && mw__json_keycmp("a", 1, "ab", 2) < 0,
         "keycmp by UTF-16 code units", NULL);
  ok_canon("nested objects sorted, members moved whole",
           "{\"b\":[1,{\"y\":1,\"x\":[2,{\"q\":0,\"p\":\"}\"}]}],\"a\":\"s,\"}",
           "{\"a\":\"s,\",\"b\":[1,{\"x\":[2,{\"p\":\"}\",\"q\":0}],\"y\":1}]}");
  ok_canon("whitespace removed", " \t\n\r{ \"a\" : [ 1 , 2 ] ,\n \"b\" : { } , \"c\" : \" x \" } \n",
           "{\"a\":[1,2],\"b\":{},\"c\":\" x \"}");
  ok_canon("RFC 8785 example",
           "{\n  \"numbers\": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n"
           "  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n"
           "  \"literals\": [null, true, false]\n}",
           "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
           "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");

  ok_canon("escapes: short forms kept", "\"\\b\\f\\n\\r\\t\\\"\\\\\"", "\"\\b\\f\\n\\r\\t\\\"\\\\\"");
  ok_canon("escapes: \\u forms of short ones", "\"\\u0008\\u0009\\u000A\\u000C\\u000D\\u0022\\u005C\"",
           "\"\\b\\t\\n\\f\\r\\\"\\\\\"");
  ok_canon("escapes: other controls lowercase \\u00xx", "\"\\u0000\\u001F\\u000b\"", "\"\\u0000\\u001f\\u000b\"");
  ok_canon("escapes: DEL, U+2028, non-ASCII raw", "\"\\u007f\\u2028\\u00e9\\u0041\\/\"",
           "\"\x7f\xe2\x80\xa8\xc3\xa9" "A/\"");
  ok_canon("raw UTF-8 kept", "\"h\xc3\xa9llo \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"",
           "\"h\xc3\xa9llo \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"");
  ok_canon("surrogate pair to raw UTF-8", "\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"");
  ok_canon("surrogate pair, upper-case hex", "[\"\\uD83D\\uDE00\"]", "[\"\xf0\x9f\x98\x80\"]");
  ok_canon("escaped key", "{\"\\u0061\\n\":1}", "{\"a\\n\":1}");

  ok_canon("number 0", "0", "0");
  ok_canon("number -0", "-0", "0");
  ok_canon("number -0.0", "-0.0", "0");
  ok_canon("number 1.0", "1.0", "1");
  ok_canon("number 1E2", "1E2", "100");
  ok_canon("number 1e20", "1e20", "100000000000000000000");
  ok_canon("number 1e21", "1e21", "1e+21");
  ok_canon("number 1e-7", "1e-7", "1e-7");
  ok_canon("number 0.000001", "0.000001", "0.000001");
  ok_canon("number 123e-20", "123e-20", "1.23e-18");
  ok_canon("number 123456789012345678", "123456789012345678", "123456789012345678");
  ok_canon("number int64 max", "9223372036854775807", "9223372036854775807");
  ok_canon("number int64 min", "-9223372036854775808", "-9223372036854775808");
  ok_canon("number 2^63 becomes a double", "9223372036854775808", "9223372036854776000");
  ok_canon("number -2^63-1 becomes a double", "-9223372036854775809", "-9223372036854776000");
  ok_canon("number 0.1", "0.1", "0.1");
  ok_canon("number 0.30000000000000004", "0.30000000000000004", "0.30000000000000004");
  ok_canon("number 1.5e300", "1.5e300", "1.5e+300");
  ok_canon("number -1.5", "-1.5E+0", "-1.5");
  ok_canon("number 5e-324", "5e-324", "5e-324");
  ok_canon("number max double", "1.7976931348623157e308", "1.7976931348623157e+308");
  ok_canon("number underflow to 0", "1e-400", "0");
  ok_canon("number 2^53+1 as integer, exact", "9007199254740993", "9007199254740993");
  s = nest(1, "", "1", "e-400");
  s = realloc(s, 420);
  memmove(s + 401, s + 1, strlen(s + 1) + 1);
  memset(s + 1, '0', 400);
  ok_canon("number long literal 1(400 zeros)e-400", s, "1");
  free(s);
  ok_canon("number 4.35", "[4.35,0.5,-2.5e-8]", "[4.35,0.5,-2.5e-8]");
  mw_buf b = {0};
  report(mw__json_double(&b, 1.0 / 0.0) == MW_EJSON && mw__json_double(&b, 0.0 / 0.0) == MW_EJSON &&
             !mw__json_double(&b, -0.0) && !strcmp(b.p, "0"),
         "double: NaN, infinity refused, -0 is 0", b.p);
  mw__buf_free(&b);
  BAD("number overflow", "1e400", "out of range");
  BAD("number -overflow", "[-1e400]", "out of range");
  BAD("number leading zero", "01", "trailing data at byte 1");
  BAD("number 1.", "1.", "bad number");
  BAD("number .5", ".5", "unexpected character at byte 0");
  BAD("number -", "-", "unexpected character");
  BAD("number +1", "+1", "unexpected character");
  BAD("number 1e", "1e", "bad number");
  BAD("number 1e+", "[1e+]", "bad number");
  BAD("number NaN", "NaN", "unexpected character");

  BAD("duplicate key", "{\"a\":1,\"a\":2}", "duplicate key \"a\" at byte 7");
  BAD("duplicate key, unsorted", "{\"b\":1,\"a\":2,\"b\":3}", "duplicate key \"b\" at byte 13");
  BAD("duplicate key after unescaping", "{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\"");
  BAD("duplicate key, nested", "[{\"x\":{\"k\":1,\"k\":1}}]", "duplicate key \"k\"");
  ok_canon("same key in different objects", "{\"b\":{\"a\":1},\"a\":{\"a\":2}}", "{\"a\":{\"a\":2},\"b\":{\"a\":1}}");

  BAD("lone high surrogate", "\"\\ud800\"", "lone surrogate at byte 1");
  BAD("lone low surrogate", "\"\\udc00\"", "lone surrogate at byte 1");
  BAD("high surrogate then non-low", "\"\\ud800\\u0041\"", "lone surrogate");
  BAD("pair reversed", "\"\\ude00\\ud83d\"", "lone surrogate");
  BAD("lone surrogate in key", "{\"\\udbff\":1}", "lone surrogate");
  BAD("UTF-8 overlong 2-byte", "\"\xc0\x80\"", "invalid UTF-8 at byte 1");
  BAD("UTF-8 overlong 3-byte", "\"\xe0\x80\xaf\"", "invalid UTF-8");
  BAD("UTF-8 overlong 4-byte", "\"\xf0\x80\x80\xaf\"", "invalid UTF-8");
  BAD("UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", "invalid UTF-8");
  BAD("UTF-8 above U+10FFFF", "\"\xf4\x90\x80\x80\"", "invalid UTF-8");
  BAD("UTF-8 truncated", "\"\xe2\x82\"", "invalid UTF-8");
  BAD("UTF-8 stray continuation", "[\"a\x80\"]", "invalid UTF-8 at byte 3");
  BAD("UTF-8 0xFF", "\"\xff\"", "invalid UTF-8");
  BAD("UTF-8 invalid in key", "{\"\xc3\":1}", "invalid UTF-8");
  BAD("invalid byte outside strings", "\xff", "unexpected character");
  BAD("raw control character in string", "\"a\x01\"", "control character");
  BAD("raw newline in string", "\"a\nb\"", "control character");
  BAD("bad escape", "\"\\x\"", "bad escape");
  BAD("bad \\u escape", "\"\\u12G4\"", "bad \\u escape");
  BAD("short \\u escape", "\"\\u12\"", "bad \\u escape");
  BAD("unterminated string", "\"abc", "unterminated string");
  BAD("unterminated after escape", "\"abc\\", "unterminated string");

  BAD("empty input", "", "unexpected end of input at byte 0");
  BAD("only whitespace", "  \n", "unexpected end of input");
  BAD("BOM", "\xef\xbb\xbf{}", "byte order mark");
  BAD("trailing data", "{}  x", "trailing data at byte 4");
  BAD("two values", "1 2", "trailing data at byte 2");
  BAD("trailing bracket", "[]]", "trailing data at byte 2");
  BAD("trailing comma in array", "[1,]", "unexpected character at byte 3");
  BAD("trailing comma in object", "{\"a\":1,}", "expected a string key at byte 7");
  BAD("missing comma", "[1 2]", "expected ',' or ']'");
  BAD("missing colon", "{\"a\" 1}", "expected ':'");
  BAD("bare key", "{a:1}", "expected a string key");
  BAD("unclosed array", "[1", "unexpected end of input");
  BAD("unclosed object", "{\"a\":1", "unexpected end of input");
  BAD("truncated literal", "tru", "unexpected character");
  BAD("NUL byte after value", "null\0", "trailing data at byte 4");
  ok_canon("literals", " [true,false,null] ", "[true,false,null]");
  ok_canon_n("input need not be NUL-terminated", "[1]]]", 3, "[1]");

  ok_canon("{} preserved", "{}", "{}");
  ok_canon("[] preserved", "[ ]", "[]");
  ok_canon("[[[]]] preserved", "[[[]]]", "[[[]]]");
  ok_canon("{\"a\":{}} preserved", "{\"a\":{ }}", "{\"a\":{}}");
  ok_canon("[{},[]] preserved", "[{},[]]", "[{},[]]");

  s = nest(256, "[", "", "]");
  ok_canon("depth 256 arrays accepted", s, s);
  free(s);
  s = nest(257, "[", "", "]");
  bad_canon_n("depth 257 arrays refused", s, strlen(s), "nesting deeper than 256");
  free(s);
  s = nest(257, "{\"a\":", "1", "}");
  bad_canon_n("depth 257 objects refused", s, strlen(s), "nesting deeper than 256");
  free(s);

  /* a wide object in reverse order, to exercise sorting and the scratch stack */
  mw_buf in = {0}, want = {0};
  char kv[32];
  mw__buf_addc(&in, '{');
  mw__buf_addc(&want, '{');
  for (int i = 0; i < 2000; i++) {
    snprintf(kv, sizeof kv, "%s\"k%04d\":[%d]", i ? "," : "", 1999 - i, 1999 - i);
    mw__buf_addstr(&in, kv);
    snprintf(kv, sizeof kv, "%s\"k%04d\":[%d]", i ? "," : "", i, i);
    mw__buf_addstr(&want, kv);
  }
  mw__buf_addc(&in, '}');
  mw__buf_addc(&want, '}');
  ok_canon("2000 members reversed", in.p, want.p);
  mw__buf_free(&in);
  mw__buf_free(&want);

  report(mw__json_string(&b, "a\x01\"\\\xe2\x80\xa8", 7) == 0 && !strcmp(b.p, "\"a\\u0001\\\"\\\\\xe2\x80\xa8\"") &&
             mw__json_string(&b, "ok\xc0\x80", 4) == MW_EJSON && b.len == 16,
         "json_string escapes, refuses invalid UTF-8 and restores", b.p);
  mw__buf_free(&b);
}

/* ---- Lua ---------------------------------------------------------------- */

static void lua_roundtrip(lua_State *L, const char *name, const char *json) {
  mw_buf want = {0}, out = {0};
  char err[128] = "";
  int top = lua_gettop(L), ok;
  ok = !mw__json_canon(json, strlen(json), &want, err, sizeof err) &&
       !mw__ljson_decode(L, json, strlen(json), err, sizeof err) && lua_gettop(L) == top + 1 &&
       !mw__ljson_encode(L, -1, &out, err, sizeof err) && lua_gettop(L) == top + 1 && out.len == want.len &&
       !memcmp(out.p, want.p, out.len);
  report(ok, name, out.len ? out.p : err);
  lua_settop(L, top);
  mw__buf_free(&want);
  mw__buf_free(&out);
}

/* Encodes what chunk returns; want "!part" expects MW_EJSON with err
 * containing part, and out left alone. */
static void lua_encode(lua_State *L, const char *name, const char *chunk, const char *want) {
  mw_buf out = {0};
  char err[256] = "";
  int top = lua_gettop(L), rc, ok;
  if (luaL_dostring(L, chunk)) {
    report(0, name, lua_tostring(L, -1));
    lua_settop(L, top);
    return;
  }
  mw__buf_addstr(&out, "pre");
  rc = mw__ljson_encode(L, -1, &out, err, sizeof err);
  if (want[0] == '!')
    ok = rc == MW_EJSON && strstr(err, want + 1) && out.len == 3 && !strcmp(out.p, "pre");
  else
    ok = rc == 0 && !strcmp(out.p + 3, want);
  ok = ok && lua_gettop(L) == top + 1;
  report(ok, name, rc ? err : out.p + 3);
  lua_settop(L, top);
  mw__buf_free(&out);
}

static void lua_bad_decode(lua_State *L, const char *name, const char *json, size_t n, const char *part) {
  char err[128] = "";
  int top = lua_gettop(L), rc = mw__ljson_decode(L, json, n, err, sizeof err);
  report(rc == MW_EJSON && lua_gettop(L) == top && strstr(err, part), name, err);
  lua_settop(L, top);
}

static void test_lua(void) {
  lua_State *L = luaL_newstate();
  char err[128] = "";
  luaL_openlibs(L);
  mw__ljson_init(L);

  lua_roundtrip(L, "Lua round trip: [] {} int64 bounds",
                "{\"a\":[],\"b\":{},\"c\":[[],{}],\"n\":9223372036854775807,\"m\":-9223372036854775808,\"f\":0.5}");
  lua_roundtrip(L, "Lua round trip: scalars",
                "[null,true,false,\"x\\u0000y\\\"\",1e300,-0.0,1.0,-0,9223372036854775808,1e-7,0.1,\"\"]");
  lua_roundtrip(L, "Lua round trip: keys in UTF-16 order",
                "{\"\\uff61\":1,\"\\ud83d\\ude00\":{\"z\":[{}],\"\\n\":null},\"\":\"\xc3\xa9\"}");
  lua_roundtrip(L, "Lua round trip: RFC 8785 example",
                "{\"numbers\":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"
                "\"string\":\"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\"literals\":[null,true,false]}");
  char *s = nest(255, "[", "{}", "]");
  lua_roundtrip(L, "Lua round trip: depth 256", s);
  free(s);
  s = nest(257, "[", "", "]");
  lua_bad_decode(L, "Lua decode: depth 257 refused", s, strlen(s), "nesting deeper than 256");
  free(s);

  int top = lua_gettop(L);
  const char *j = "[1,2.5,9223372036854775807,9223372036854775808,-0,1.0,null,\"a\\u0000b\"]";
  int ok = !mw__ljson_decode(L, j, strlen(j), err, sizeof err);
  if (ok) {
    size_t n;
    ok = lua_rawgeti(L, -1, 1) == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) == 1;
    ok = ok && lua_rawgeti(L, -2, 2) == LUA_TNUMBER && !lua_isinteger(L, -1) && lua_tonumber(L, -1) == 2.5;
    ok = ok && lua_rawgeti(L, -3, 3) == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) == INT64_MAX;
    ok = ok && lua_rawgeti(L, -4, 4) == LUA_TNUMBER && !lua_isinteger(L, -1);
    ok = ok && lua_rawgeti(L, -5, 5) == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) == 0;
    ok = ok && lua_rawgeti(L, -6, 6) == LUA_TNUMBER && !lua_isinteger(L, -1);
    ok = ok && lua_rawgeti(L, -7, 7) == LUA_TLIGHTUSERDATA && lua_touserdata(L, -1) == NULL;
    ok = ok && lua_rawgeti(L, -8, 8) == LUA_TSTRING && lua_tolstring(L, -1, &n) && n == 3;
  }
  report(ok, "Lua decode: integer / float / null / string types", err);
  lua_settop(L, top);

  ok = !mw__ljson_decode(L, "[{}]", 4, err, sizeof err) && lua_getmetatable(L, -1) &&
       luaL_getmetatable(L, "mw.array") && lua_rawequal(L, -1, -2) && lua_rawgeti(L, -3, 1) == LUA_TTABLE &&
       lua_getmetatable(L, -1) && luaL_getmetatable(L, "mw.object") && lua_rawequal(L, -1, -2);
  report(ok, "Lua decode: metatables mw.array and mw.object", err);
  lua_settop(L, top);

  j = "[0.0000000000000000000000000000000000000000000000000000000000000000000000000001]";
  ok = !mw__ljson_decode(L, j, strlen(j), err, sizeof err) && lua_rawgeti(L, -1, 1) == LUA_TNUMBER &&
       lua_tonumber(L, -1) == 1e-76;
  report(ok, "Lua decode: long number literal", err);
  lua_settop(L, top);

  lua_bad_decode(L, "Lua decode: duplicate key", "{\"a\":1,\"a\":2}", 13, "duplicate key \"a\" at byte 7");
  lua_bad_decode(L, "Lua decode: lone surrogate", "[\"\\udc00\"]", 10, "lone surrogate at byte 2");
  lua_bad_decode(L, "Lua decode: invalid UTF-8", "[\"\xed\xa0\x80\"]", 7, "invalid UTF-8 at byte 2");
  lua_bad_decode(L, "Lua decode: trailing data", "[] 1", 4, "trailing data at byte 3");
  lua_bad_decode(L, "Lua decode: empty", "", 0, "unexpected end of input");
  lua_bad_decode(L, "Lua decode: BOM", "\xef\xbb\xbf[]", 5, "byte order mark");
  lua_bad_decode(L, "Lua decode: overflow", "{\"a\":[1e400]}", 13, "out of range");
  lua_bad_decode(L, "Lua decode: syntax", "{\"a\":[1,]}", 10, "unexpected character at byte 8");

  lua_encode(L, "Lua encode {1,2,3}", "return {1,2,3}", "[1,2,3]");
  lua_encode(L, "Lua encode {}", "return {}", "{}");
  lua_encode(L, "Lua encode {a=1,b={}}", "return {a=1,b={}}", "{\"a\":1,\"b\":{}}");
  lua_encode(L, "Lua encode sorts keys", "return {b=2,a={3.0,0.5,-0.0,1e21,2^53}}",
             "{\"a\":[3,0.5,0,1e+21,9007199254740992],\"b\":2}");
  lua_encode(L, "Lua encode float 2^63 (outside int64)", "return 2^63", "9223372036854776000");
  lua_encode(L, "Lua encode integers exact", "return {math.mininteger, math.maxinteger}",
             "[-9223372036854775808,9223372036854775807]");
  lua_encode(L, "Lua encode strings escaped", "return 'a\\0b\"\\n\\u{2028}'", "\"a\\u0000b\\\"\\n\xe2\x80\xa8\"");
  lua_encode(L, "Lua encode UTF-16 key order", "return {['\\u{FF61}']=1, ['\\u{1F600}']=2}",
             "{\"\xf0\x9f\x98\x80\":2,\"\xef\xbd\xa1\":1}");
  lua_encode(L, "Lua encode mw.array empty", "return setmetatable({}, debug.getregistry()['mw.array'])", "[]");
  lua_encode(L, "Lua encode mw.object empty", "return setmetatable({}, debug.getregistry()['mw.object'])", "{}");
  lua_encode(L, "Lua encode mw.object with string keys",
             "return setmetatable({['1']=true}, debug.getregistry()['mw.object'])", "{\"1\":true}");
  lua_encode(L, "Lua encode foreign metatable ignored", "return setmetatable({'x'}, {__index=print})", "[\"x\"]");
  lua_encode(L, "Lua encode many keys", "local t = {} for i = 1, 100 do t['k' .. (100 - i)] = {[i % 7 .. '']=i} end "
             "local u = {} for i = 0, 99 do u[#u+1] = t['k' .. i] end return {u[1], u[100], t.k5}",
             "[{\"2\":100},{\"1\":1},{\"4\":95}]");
  lua_encode(L, "Lua encode depth 256", "local t = {} for i = 1, 255 do t = {t} end return t",
             (s = nest(255, "[", "{}", "]")));
  free(s);
  lua_encode(L, "Lua encode depth 257 refused", "local t = {} for i = 1, 256 do t = {t} end return t",
             "!nesting deeper than 256");
  lua_encode(L, "Lua encode cycle refused", "local t = {} t.a = t return t", "!$.a.a.a");
  lua_encode(L, "Lua encode function refused with path", "return {a={1,2,{b=function() end}}}",
             "!$.a[2].b: cannot encode function");
  lua_encode(L, "Lua encode mixed keys refused", "return {x={[1]=1, y=2}}", "!$.x: mixed or non-string keys");
  lua_encode(L, "Lua encode sparse plain table refused", "return {[2]=1}", "!$: mixed or non-string keys");
  lua_encode(L, "Lua encode non-string keys refused", "return {{[true]=1}}", "!$[0]: mixed or non-string keys");
  lua_encode(L, "Lua encode mw.array with holes refused",
             "return {['a b']=setmetatable({1,nil,3}, debug.getregistry()['mw.array'])}",
             "!$[\"a b\"]: array with holes");
  lua_encode(L, "Lua encode mw.object with integer keys refused",
             "return setmetatable({1}, debug.getregistry()['mw.object'])", "!$: non-string keys");
  lua_encode(L, "Lua encode NaN refused", "return {0/0}", "!$[0]: cannot encode NaN");
  lua_encode(L, "Lua encode infinity refused", "return {x=-math.huge}", "!$.x: cannot encode NaN or infinity");
  lua_encode(L, "Lua encode invalid UTF-8 string refused", "return {s='\\xff'}", "!$.s: invalid UTF-8");
  lua_encode(L, "Lua encode invalid UTF-8 key refused", "return {['\\xc0\\x80']=1}", "!$: invalid UTF-8 in a key");
  lua_encode(L, "Lua encode nil refused", "return nil", "!$: cannot encode nil");
  lua_encode(L, "Lua encode thread refused", "return coroutine.create(print)", "!cannot encode thread");
  lua_encode(L, "Lua encode userdata refused", "return io.stdout", "!cannot encode userdata");
  lua_close(L);
}

int main(void) {
  test_canon();
  test_lua();
  printf("# passed %d failed %d\n", passed, failed);
  return failed != 0;
}
