/* skillcall.c -- a helper of bench/triggers.sh: the cost of one sandboxed skill
 * call (mw__tenant_run) beside a bare lua_pcall of the same Lua function, in
 * the same process, and the steps between them.  A bench helper only: never
 * linked into MW.
 *
 *   skillcall SCRIPTS_DIR N ROUNDS
 *
 * Writes a trivial skill (`run = function(ctx, input) return 1 end`) into a
 * fresh mkdtemp directory, builds a tenant on it with mw__tenant_new (the
 * shared scripts from SCRIPTS_DIR, no home), and times N calls per round,
 * ROUNDS rounds, the variants taking turns, best round of each:
 *
 *   bare          plain lua_State (luaL_openlibs, default allocator); the same
 *                 file's run, called with a ctx table made once and nil
 *   +decode       + a fresh ctx table each call and mw__ljson_decode of the
 *                 state "{}" (into ctx.state) and of the input "null"
 *   +ctx          + the ctx fields push_run sets (5 strings/integers, 8 C
 *                 functions, the cortex table), the skill found through a
 *                 registry table, all inside a protected call
 *   +coroutine    + a new coroutine per call (lua_newthread, luaL_ref/unref),
 *                 lua_resume under a count hook, two clock_gettime
 *   +encode       + mw__ljson_encode of the result into a reused buffer
 *   +gc step      + lua_gc(L, LUA_GCSTEP, 0), as run_step does after each run
 *   tenant_run    mw__tenant_run + mw__run_out_free on the tenant (the
 *                 sandbox, its allocator with its cap, its budgets)
 *
 * Also times mw__tenant_new itself (what a hot reload rebuilds), best and
 * median of 20, and prints `key value` lines. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "ljson.h"
#include "tenant.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "skillcall: %s: %s\n", what, why ? why : "failed");
  exit(1);
}

static const char STATE[] = "{}", INPUT[] = "null";
static const char SKILL[] =
    "return {\n"
    "  name = \"triv\",\n"
    "  description = \"the trivial skill of bench/triggers.sh\",\n"
    "  run = function(ctx, input) return 1 end,\n"
    "}\n";

/* ---- the bare side ---------------------------------------------------------------- */

static lua_State *B;      /* plain state */
static int run_ref, ctx_ref, skills_ref, cortex_ref;

static int dummy(lua_State *L) { (void)L; return 0; }
static void hook(lua_State *L, lua_Debug *ar) { (void)L; (void)ar; }

static void bare_setup(const char *path) {
  B = luaL_newstate();
  luaL_openlibs(B);
  mw__ljson_init(B);
  if (luaL_dofile(B, path) != LUA_OK) die("bare load", lua_tostring(B, -1));
  /* registry.skills = {triv = <the table>} for the +ctx variants */
  lua_newtable(B);
  lua_pushvalue(B, -2);
  lua_setfield(B, -2, "triv");
  skills_ref = luaL_ref(B, LUA_REGISTRYINDEX);
  lua_getfield(B, -1, "run");
  run_ref = luaL_ref(B, LUA_REGISTRYINDEX);
  lua_pop(B, 1);
  lua_newtable(B);
  ctx_ref = luaL_ref(B, LUA_REGISTRYINDEX);
  lua_newtable(B);
  cortex_ref = luaL_ref(B, LUA_REGISTRYINDEX);
}

static long checksum;

/* bare: run(ctx, nil) with a ctx made once */
static void v_bare(int n) {
  lua_State *L = B;
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, run_ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ctx_ref);
    lua_pushnil(L);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) die("bare call", lua_tostring(L, -1));
    checksum += lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
}

/* +decode: a fresh ctx with the decoded state, and the decoded input */
static void v_decode(int n) {
  lua_State *L = B;
  char err[256];
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, run_ref);
    lua_createtable(L, 0, 8);
    if (mw__ljson_decode(L, STATE, sizeof STATE - 1, err, sizeof err)) die("decode", err);
    lua_setfield(L, -2, "state");
    if (mw__ljson_decode(L, INPUT, sizeof INPUT - 1, err, sizeof err)) die("decode", err);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) die("decode call", lua_tostring(L, -1));
    checksum += lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
}

/* the ctx as push_run builds it, pushed inside a protected call: [run ctx input] */
static int push_ctx(lua_State *L) {
  char err[256];
  lua_rawgeti(L, LUA_REGISTRYINDEX, skills_ref);
  lua_getfield(L, -1, "triv");
  lua_getfield(L, -1, "run");
  lua_createtable(L, 0, 8);
  lua_pushstring(L, "actor"); lua_setfield(L, -2, "actor_id");
  lua_pushstring(L, "ses_0123456789abcdef0123456789abcdef"); lua_setfield(L, -2, "session_id");
  lua_pushstring(L, "agent"); lua_setfield(L, -2, "profile");
  lua_pushstring(L, "triv"); lua_setfield(L, -2, "skill");
  lua_pushinteger(L, 0); lua_setfield(L, -2, "cursor");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "stage");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "remember");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "fact");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "secret");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "feedback");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "delta");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "call");
  lua_pushcfunction(L, dummy); lua_setfield(L, -2, "promote");
  lua_rawgeti(L, LUA_REGISTRYINDEX, cortex_ref); lua_setfield(L, -2, "cortex");
  if (mw__ljson_decode(L, STATE, sizeof STATE - 1, err, sizeof err)) return luaL_error(L, "state: %s", err);
  lua_setfield(L, -2, "state");
  if (mw__ljson_decode(L, INPUT, sizeof INPUT - 1, err, sizeof err)) return luaL_error(L, "input: %s", err);
  return 3;
}

static void push_args(lua_State *L) {
  int top = lua_gettop(L);
  lua_pushcfunction(L, push_ctx);
  if (lua_pcall(L, 0, 3, 0) != LUA_OK) die("push_ctx", lua_tostring(L, -1));
  /* push_ctx leaves [skills triv run ctx input] trimmed to its 3 results */
  (void)top;
}

/* +ctx: the full ctx, then a plain pcall */
static void v_ctx(int n) {
  lua_State *L = B;
  for (int i = 0; i < n; i++) {
    push_args(L);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) die("ctx call", lua_tostring(L, -1));
    checksum += lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
}

static volatile uint64_t sink;
static uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* one call in its own coroutine under a count hook; leaves the result on L */
static void coroutine_call(lua_State *L) {
  push_args(L);
  lua_State *co = lua_newthread(L);
  lua_insert(L, -4);
  lua_xmove(L, co, 3);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  sink += clock_ns();
  lua_sethook(co, hook, LUA_MASKCOUNT, 1000);
  int nres = 0, st = lua_resume(co, L, 2, &nres);
  lua_sethook(co, NULL, 0, 0);
  sink += clock_ns();
  if (st != LUA_OK || nres < 1) die("coroutine call", lua_tostring(co, -1));
  lua_xmove(co, L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, ref);
}

static void v_coroutine(int n) {
  lua_State *L = B;
  for (int i = 0; i < n; i++) {
    coroutine_call(L);
    checksum += lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
}

static void encode_loop(int n, int gc) {
  lua_State *L = B;
  mw_buf out = {0};
  char err[256];
  for (int i = 0; i < n; i++) {
    coroutine_call(L);
    out.len = 0;
    if (mw__ljson_encode(L, -1, &out, err, sizeof err)) die("encode", err);
    checksum += (long)out.len;
    lua_pop(L, 1);
    if (gc) lua_gc(L, LUA_GCSTEP, 0);
  }
  mw__buf_free(&out);
}
static void v_encode(int n) { encode_loop(n, 0); }
static void v_gc(int n) { encode_loop(n, 1); }

/* ---- the tenant side ---------------------------------------------------------------- */

static mw_tenant *T;
static void v_tenant(int n) {
  mw_run_in in = {.skill = "triv", .actor = "actor", .session_id = "ses_0123456789abcdef0123456789abcdef",
                  .profile = "agent", .cursor = 0, .state = STATE, .state_len = sizeof STATE - 1,
                  .input = INPUT, .input_len = sizeof INPUT - 1};
  mw_run_out out;
  for (int i = 0; i < n; i++) {
    int rc = mw__tenant_run(T, &in, &out);
    if (rc) die("mw__tenant_run", out.message);
    if (out.result.len != 1 || out.result.p[0] != '1') die("mw__tenant_run", "result is not 1");
    checksum += (long)out.result.len;
    mw__run_out_free(&out);
  }
}

typedef struct {
  const char *name;
  void (*fn)(int);
  double best;
} variant;

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: skillcall SCRIPTS_DIR N ROUNDS\n");
    return 2;
  }
  const char *scripts = argv[1];
  int n = atoi(argv[2]), rounds = atoi(argv[3]);
  if (n < 1 || rounds < 1) die("usage", "N and ROUNDS must be >= 1");
  char dir[] = "/tmp/mw-bench-skill.XXXXXX", path[600];
  if (!mkdtemp(dir)) die("mkdtemp", NULL);
  snprintf(path, sizeof path, "%s/triv.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(SKILL, f) < 0 || fclose(f)) die("write skill", path);

  /* the tenant: what a reload rebuilds, timed */
  mw_tenant_conf c = {scripts, dir, NULL, 0, 0, 0, 0, NULL, 0};
  char err[1024];
  double builds[20];
  for (int i = 0; i < 20; i++) {
    double t0 = now_s();
    if (mw__tenant_new("default", &c, &T, err, sizeof err)) die("mw__tenant_new", err);
    builds[i] = (now_s() - t0) * 1e3;
    if (i < 19) mw__tenant_free(T);
  }
  qsort(builds, 20, sizeof *builds, cmp_double);
  printf("tenant_new_best_ms %.3f\ntenant_new_p50_ms %.3f\ntenant_mem_bytes %zu\n", builds[0], builds[10],
         mw__tenant_mem(T));

  bare_setup(path);
  variant vs[] = {{"bare", v_bare, 1e9},           {"decode", v_decode, 1e9},
                  {"ctx", v_ctx, 1e9},             {"coroutine", v_coroutine, 1e9},
                  {"encode", v_encode, 1e9},       {"gcstep", v_gc, 1e9},
                  {"tenant", v_tenant, 1e9}};
  int nv = (int)(sizeof vs / sizeof *vs);
  for (int v = 0; v < nv; v++) vs[v].fn(n / 10 + 1);   /* warm-up */
  for (int r = 0; r < rounds; r++)
    for (int v = 0; v < nv; v++) {
      double t0 = now_s();
      vs[v].fn(n);
      double us = (now_s() - t0) * 1e6 / n;
      if (us < vs[v].best) vs[v].best = us;
    }
  printf("n %d\nrounds %d\n", n, rounds);
  for (int v = 0; v < nv; v++) printf("%s_us %.3f\n", vs[v].name, vs[v].best);
  printf("checksum %ld\n", checksum);
  mw__tenant_free(T);
  lua_close(B);
  unlink(path);
  rmdir(dir);
  return 0;
}
