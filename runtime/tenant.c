/* tenant.c -- a tenant's Lua state: Waking (scripts/waking.lua), profiles
 * (scripts/profiles.lua) and skills (skills/NAME.lua and the tenant's own), each
 * call protected, under instruction, wall-clock and memory budgets.  Nothing
 * here may exit or let a Lua error escape into C. */
#define _GNU_SOURCE   /* memmem */
#include "tenant.h"
#include "cortex.h"
#include "sources.h"
#include "json.h"
#include "ljson.h"
#include "lmw.h"

#include <dirent.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOOK_EVERY 1000
#define MAX_STAGED 256
#define MAX_STAGED_BYTES (256 * 1024)

struct mw_tenant {
  char name[65];
  lua_State *L;
  mw_fold *fold, *sweep;
  size_t mem, mem_limit;
  int64_t budget, used;
  uint64_t deadline_ns, time_ns;
  int over;                    /* 1: instructions, 2: time, 3: memory */
  int compose_ref, profiles_ref, skills_ref;
  mw_run_out *run;             /* the run in progress, for ctx.stage */
  lua_State *run_co;           /* its coroutine */
  int suspended;               /* runs waiting in ctx.delta: a reload waits for them */
  mw_cortex *cx;               /* NULL: dark */
  char cx_reason[256];
  mw_buf navigated;            /* what the current compose navigated */
  int composing;
  struct secret { char name[65]; char *value; size_t len; } *secrets;
  size_t nsecrets;
  mw_beat *beats;
  size_t nbeats;
  mw_source *sources;
  size_t nsources;
  int policies_ref, delta_ref;
  mw_quotas quotas;
};

#define MAX_SECRET_BYTES (64 * 1024)
#define MAX_PATTERN_SUBJECT (1 << 20)
#define MAX_PATTERN_LEN 512
#define MAX_PATTERN_STEPS 5e7
#define MAX_REP_BYTES (16u << 20)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The tenant's allocator: a hard cap on its Lua state's memory. */
static void *talloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mw_tenant *t = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    t->mem -= old;
    free(ptr);
    return NULL;
  }
  if (nsize > old && t->mem + (nsize - old) > t->mem_limit) {
    if (!t->over) t->over = 3;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p) t->mem = t->mem - old + nsize;
  return p;
}

static mw_tenant *tenant_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

/* Instruction and wall-clock budget.  Once spent, the hook fires on every
 * line and count so that a pcall in the script cannot swallow the stop. */
static void budget_hook(lua_State *L, lua_Debug *ar) {
  mw_tenant *t = tenant_of(L);
  if (ar->event == LUA_HOOKCOUNT) t->used += HOOK_EVERY;
  if (!t->over) {
    if (t->used > t->budget) t->over = 1;
    else if (now_ns() > t->deadline_ns) t->over = 2;
  }
  if (t->over == 1 || t->over == 2) {
    /* on whichever thread is running now (a skill's own coroutines inherit
     * the hook): from here on every line raises, so no pcall loop survives */
    lua_sethook(L, budget_hook, LUA_MASKCOUNT | LUA_MASKLINE, 1);
    luaL_error(L, t->over == 1 ? "instruction budget exceeded" : "time budget exceeded");
  }
}

/* The one protected entry into the tenant's Lua: calls the function under
 * nargs arguments with budgets set; leaves nres results, or the message
 * (with traceback) on failure.  Returns 0, MW_ESKILL, MW_ETIMEOUT, MW_ENOMEM. */
static int tcall(mw_tenant *t, int nargs, int nres) {
  lua_State *L = t->L;
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, mw__lua_msgh);
  lua_insert(L, base);
  t->used = 0;
  t->over = 0;
  t->deadline_ns = now_ns() + t->time_ns;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  int rc = lua_pcall(L, nargs, nres, base);
  lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  if (!t->over && now_ns() > t->deadline_ns) t->over = 2;
  int over = t->over;
  t->over = 0;
  if (rc == LUA_OK && !over) return 0;
  if (rc == LUA_OK) {   /* the script caught the stop: it stands all the same */
    lua_pop(L, nres);
    lua_pushstring(L, over == 3 ? "not enough memory" : "budget exceeded");
  }
  if (over == 1 || over == 2) return MW_ETIMEOUT;
  if (over == 3 || rc == LUA_ERRMEM) return MW_ENOMEM;
  return MW_ESKILL;
}

/* ---- the Cortex, from Lua ------------------------------------------------------ */

static const char *opt_field_string(lua_State *L, int t, const char *k, size_t max) {
  const char *v = NULL;
  if (lua_getfield(L, t, k) == LUA_TSTRING) {
    size_t n;
    v = lua_tolstring(L, -1, &n);
    if (n > max) luaL_error(L, "navigate: %s is longer than %d bytes", k, (int)max);
  } else if (!lua_isnil(L, -1)) {
    luaL_error(L, "navigate: %s must be a string", k);
  }
  lua_pop(L, 1);   /* the string stays referenced by the options table */
  return v;
}

/* cortex.navigate{hint=, from=, to=, depth=, limit=, rels={...}, history=}
 *   -> {status = "live", nodes = {...}, edges = {...}} | nil, message, "dark" */
static int l_navigate(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  lua_settop(L, 1);
  if (lua_isnil(L, 1)) lua_newtable(L), lua_replace(L, 1);
  luaL_checktype(L, 1, LUA_TTABLE);
  mw_nav nav = {0};
  nav.hint = opt_field_string(L, 1, "hint", 2000);
  nav.from = opt_field_string(L, 1, "from", 128);
  nav.to = opt_field_string(L, 1, "to", 128);
  lua_getfield(L, 1, "depth");
  nav.depth = (int)luaL_optinteger(L, -1, 1);
  lua_getfield(L, 1, "limit");
  nav.limit = (int)luaL_optinteger(L, -1, 20);
  lua_getfield(L, 1, "history");
  nav.history = lua_toboolean(L, -1);
  lua_pop(L, 3);
  const char *rels[16];
  if (lua_getfield(L, 1, "rels") == LUA_TTABLE) {
    int n = (int)lua_rawlen(L, -1);
    if (n > 16) return luaL_error(L, "navigate: at most 16 relations");
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, -1, i + 1);
      rels[i] = lua_tostring(L, -1);
      if (!rels[i] || lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "navigate: rels must be strings");
      lua_pop(L, 1);
    }
    nav.rels = rels;
    nav.nrels = n;
  }
  if (!t->cx) {
    luaL_pushfail(L);
    lua_pushstring(L, t->cx_reason[0] ? t->cx_reason : "the Cortex is dark");
    lua_pushliteral(L, "dark");
    return 3;
  }
  mw_buf out = {0};
  int rc = mw_cortex_navigate(t->cx, &nav, &out);
  if (rc) {
    mw__buf_free(&out);
    luaL_pushfail(L);
    lua_pushstring(L, mw_cortex_errmsg(t->cx));
    lua_pushstring(L, rc == MW_EUNAVAIL ? "dark" : mw_err_name(rc));
    return 3;
  }
  if (t->composing) {   /* kept with the session record, never in the log */
    mw__buf_addstr(&t->navigated, t->navigated.len ? "," : "");
    mw__buf_add(&t->navigated, out.p, out.len);
  }
  char err[256];
  rc = mw__ljson_decode(L, out.p, out.len, err, sizeof err);
  mw__buf_free(&out);
  if (rc) return luaL_error(L, "navigate: %s", err);
  lua_pushliteral(L, "live");
  lua_setfield(L, -2, "status");
  return 1;
}

/* cortex.status() -> "live" | "dark", reason */
static int l_cortex_status(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  lua_pushstring(L, t->cx ? "live" : "dark");
  if (t->cx) return 1;
  lua_pushstring(L, t->cx_reason);
  return 2;
}

void mw__tenant_set_cortex(mw_tenant *t, mw_cortex *cx, const char *reason) {
  t->cx = cx;
  snprintf(t->cx_reason, sizeof t->cx_reason, "%s", cx ? "" : (reason ? reason : "the Cortex is dark"));
}

const char *mw__tenant_navigated(mw_tenant *t, size_t *len) {
  *len = t->navigated.len;
  return t->navigated.p;
}

/* ---- bounded C functions -------------------------------------------------------
 * Count hooks never fire inside one C call, so the string functions that can
 * run long in one call are bounded by size instead. */

/* Counts the quantified items of a Lua pattern (*, +, -, ? after a single
 * character class); '-' inside a set is a range, not a quantifier. */
static int quantifiers(const char *p, size_t n) {
  int q = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '%') {
      i++;
    } else if (p[i] == '[') {   /* a set: skip to its closing bracket */
      size_t j = i + 1;
      if (j < n && p[j] == '^') j++;
      if (j < n && p[j] == ']') j++;
      while (j < n && p[j] != ']') j += p[j] == '%' ? 2 : 1;
      i = j;
    } else if ((p[i] == '*' || p[i] == '+' || p[i] == '-' || p[i] == '?') && i > 0) {
      q++;
    }
  }
  return q;
}

/* Lua's matcher backtracks: with q quantified items a match tries up to
 * n^q ways at each of n start positions (one, when anchored with ^).  The
 * call is refused when that worst case passes MAX_PATTERN_STEPS, so one call
 * stays well under a second; a plain search (no quantifier) is linear. */
static int pattern_guard(lua_State *L, int fn_upvalue) {
  size_t sn, pn;
  luaL_checklstring(L, 1, &sn);
  const char *p = luaL_checklstring(L, 2, &pn);
  if (sn > MAX_PATTERN_SUBJECT) return luaL_error(L, "pattern subject over %d bytes", MAX_PATTERN_SUBJECT);
  if (pn > MAX_PATTERN_LEN) return luaL_error(L, "pattern over %d bytes", MAX_PATTERN_LEN);
  int q = quantifiers(p, pn);
  int anchored = pn > 0 && p[0] == '^';
  double cost = 1, n = sn > 1 ? (double)sn : 1;
  for (int i = 0; i < q + !anchored && cost <= MAX_PATTERN_STEPS; i++) cost *= n;
  if (q > 0 && cost > MAX_PATTERN_STEPS)
    return luaL_error(L, "pattern with %d quantified items over a %d-byte subject could backtrack past 5e7 steps; "
                         "use a shorter subject or a simpler pattern", q, (int)sn);
  lua_pushvalue(L, lua_upvalueindex(fn_upvalue));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int bounded_pattern(lua_State *L) { return pattern_guard(L, 1); }

static int bounded_rep(lua_State *L) {
  size_t n, sepn = 0;
  luaL_checklstring(L, 1, &n);
  lua_Integer k = luaL_checkinteger(L, 2);
  if (!lua_isnoneornil(L, 3)) luaL_checklstring(L, 3, &sepn);
  if (k > 0 && (double)(n + sepn) * (double)k > (double)MAX_REP_BYTES)
    return luaL_error(L, "string.rep result over %d bytes", (int)MAX_REP_BYTES);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* load(chunk [, name [, mode [, env]]]): text only, and never the host's
 * globals: without env the chunk gets a fresh table reading the sandbox's. */
static int safe_load(lua_State *L) {
  size_t n;
  const char *src = luaL_checklstring(L, 1, &n);
  const char *name = luaL_optstring(L, 2, "=(load)");
  int has_env = !lua_isnone(L, 4);
  int rc = luaL_loadbufferx(L, src, n, name, "t");
  if (rc != LUA_OK) {
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
  }
  if (has_env) {
    lua_pushvalue(L, 4);
  } else {
    lua_newtable(L);
    lua_newtable(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "mw.sandbox");
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);   /* hidden: through it, __index would reach the shared globals */
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
  }
  lua_setupvalue(L, -2, 1);
  return 1;
}

static int readonly_newindex(lua_State *L) {
  return luaL_error(L, "attempt to change a read-only table (%s)", lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

/* rawset that cannot reach through a read-only view. */
static int safe_rawset(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lua_getmetatable(L, 1)) {
    int frozen = lua_getfield(L, -1, "__newindex") == LUA_TFUNCTION && lua_tocfunction(L, -1) == readonly_newindex;
    lua_pop(L, 2);
    if (frozen) return luaL_error(L, "attempt to change a read-only table");
  }
  luaL_checkany(L, 2);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  lua_rawset(L, 1);
  lua_settop(L, 1);
  return 1;
}

/* Replaces global `name` by a read-only view of it, so that one skill cannot
 * change what the others call (string.format, json.encode ...). */
static void freeze_global(lua_State *L, const char *name) {
  lua_getglobal(L, name);
  int lib = lua_gettop(L);
  lua_newtable(L);                       /* the proxy */
  lua_newtable(L);                       /* its metatable */
  lua_pushvalue(L, lib);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, readonly_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setglobal(L, name);
  lua_pop(L, 1);
}

/* ---- the sandbox ------------------------------------------------------------ */

static int open_sandbox(lua_State *L) {
  static const struct { const char *name; lua_CFunction open; } libs[] = {
    {LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table},
    {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8}, {LUA_COLIBNAME, luaopen_coroutine},
  };
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(L, libs[i].name, libs[i].open, 1);
    lua_pop(L, 1);
  }
  static const char *const drop[] = {"dofile", "loadfile", "load", "require", "collectgarbage", "print", NULL};
  for (int i = 0; drop[i]; i++) {
    lua_pushnil(L);
    lua_setglobal(L, drop[i]);
  }
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  static const char *const patterns[] = {"find", "match", "gmatch", "gsub", NULL};
  for (int i = 0; patterns[i]; i++) {
    lua_getfield(L, -1, patterns[i]);
    lua_pushcclosure(L, bounded_pattern, 1);
    lua_setfield(L, -2, patterns[i]);
  }
  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, bounded_rep, 1);
  lua_setfield(L, -2, "rep");
  lua_pop(L, 1);
  /* The string metatable is shared by every string: hide it. */
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
  lua_pushcfunction(L, safe_load);
  lua_setglobal(L, "load");
  /* a clock for skills; no os.execute, no os.exit, no files */
  lua_newtable(L);
  luaL_requiref(L, "mw.os", luaopen_os, 0);
  static const char *const os_keep[] = {"time", "clock", "date", "difftime", NULL};
  for (int i = 0; os_keep[i]; i++) {
    lua_getfield(L, -1, os_keep[i]);
    lua_setfield(L, -3, os_keep[i]);
  }
  lua_pop(L, 1);
  lua_setglobal(L, "os");
  /* sorted iteration: Waking's briefing must be the same bytes every time */
  lua_pushcfunction(L, mw__lua_sorted_pairs);
  lua_setglobal(L, "pairs");
  lua_pushcfunction(L, mw__lua_sorted_next);
  lua_setglobal(L, "next");
  mw__lua_open_json(L);
  lua_setglobal(L, "json");
  /* the array/object marks are shared by every skill and by Waking: hidden */
  static const char *const marks[] = {"mw.array", "mw.object", NULL};
  for (int i = 0; marks[i]; i++) {
    luaL_getmetatable(L, marks[i]);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_newtable(L);
  lua_pushcfunction(L, l_navigate);
  lua_setfield(L, -2, "navigate");
  lua_pushcfunction(L, l_cortex_status);
  lua_setfield(L, -2, "status");
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "mw.cortex");
  lua_setglobal(L, "cortex");
  static const char *const frozen[] = {"string", "table", "math", "utf8", "coroutine", "json", "cortex", "os", NULL};
  for (int i = 0; frozen[i]; i++) freeze_global(L, frozen[i]);
  lua_getglobal(L, "cortex");
  lua_setfield(L, LUA_REGISTRYINDEX, "mw.cortex");   /* ctx.cortex: the frozen view */
  lua_pushcfunction(L, safe_rawset);
  lua_setglobal(L, "rawset");
  lua_pushnil(L);
  lua_setglobal(L, "_G");   /* scripts see their own _ENV, never the shared globals */
  lua_pushglobaltable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "mw.sandbox");
  return 0;
}

/* Loads a script file as text into a fresh environment whose reads fall
 * through to the sandbox's globals; runs it; leaves its result.  Returns a
 * message or NULL. */
static int load_file(mw_tenant *t, const char *path, char *err, size_t errlen) {
  lua_State *L = t->L;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read %s", path);
    return MW_ENOENT;
  }
  mw_buf b = {0};
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) mw__buf_add(&b, chunk, n);
  fclose(f);
  char name[600];
  snprintf(name, sizeof name, "@%s", path);
  int rc = luaL_loadbufferx(L, b.p ? b.p : "", b.len, name, "t");
  mw__buf_free(&b);
  if (rc != LUA_OK) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return MW_ESKILL;
  }
  /* env = setmetatable({}, {__index = <sandbox globals>, __metatable = false}) */
  lua_newtable(L);
  lua_newtable(L);
  lua_pushglobaltable(L);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setupvalue(L, -2, 1);
  rc = tcall(t, 0, 1);
  if (rc) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return rc;
}

static void log_load_error(const mw_tenant *t, const char *what, const char *err) {
  mw_buf m = {0};
  mw__json_string(&m, err, strlen(err));
  fprintf(stderr, "{\"level\":\"error\",\"tenant\":\"%s\",\"msg\":\"%s\",\"error\":%s}\n", t->name, what,
          m.p ? m.p : "null");
  mw__buf_free(&m);
}

static int lua_file(const struct dirent *de) {
  size_t n = strlen(de->d_name);
  return n >= 5 && de->d_name[0] != '.' && strcmp(de->d_name + n - 4, ".lua") == 0;
}

/* Registers every skill file of dir (in name order) into the skills table on
 * top of the stack.  A skill is a table {name = <id>, description = <string>,
 * run = function(ctx, input)}.  Strict (a reload): the first bad file fails
 * the whole load with "file:line: message", so the old version keeps
 * serving.  Lenient (first load): a bad file is logged and skipped. */
static int load_skills(mw_tenant *t, const char *dir, int strict, char *err, size_t errlen) {
  struct dirent **names;
  int n = scandir(dir, &names, lua_file, alphasort);
  if (n < 0) return 0;   /* no such folder: no skills there */
  char path[1024], why[1200];
  lua_State *L = t->L;
  int base = lua_gettop(L), rc = 0;   /* the skills table */
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    int bad = load_file(t, path, why, sizeof why);
    if (!bad) {
      const char *problem = NULL;
      if (!lua_istable(L, -1)) {
        problem = "must return a table {name, description, run}";
      } else {
        int nm = lua_getfield(L, -1, "name") == LUA_TSTRING && mw_valid_id(lua_tostring(L, -1));
        int ds = lua_getfield(L, -2, "description") == LUA_TSTRING;
        int rn = lua_getfield(L, -3, "run") == LUA_TFUNCTION;
        lua_pop(L, 3);
        if (!nm) problem = "name must be 1-64 of A-Z a-z 0-9 _ . -";
        else if (!ds) problem = "description must be a string";
        else if (!rn) problem = "run must be a function(ctx, input)";
      }
      if (problem) {
        snprintf(why, sizeof why, "%s: skill %s", path, problem);
        bad = MW_EINVAL;
      } else {
        lua_getfield(L, -1, "name");
        lua_insert(L, -2);
        lua_settable(L, base);
      }
    }
    lua_settop(L, base);
    if (bad) {
      if (strict) {
        snprintf(err, errlen, "%s", why);
        rc = bad;
        break;
      }
      log_load_error(t, "a skill failed to load", why);
    }
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* Loads HOME/tenants/<tenant>/<file> (a tenant's optional configuration):
 * 1 with the table it returned pushed, 0 when the file does not exist, or
 * an error code with err filled ("<path>: must return <what>"). */
static int load_config(mw_tenant *t, const char *home, const char *file, const char *what, char *err,
                       size_t errlen) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tenants/%s/%s", home, t->name, file);
  FILE *probe = fopen(path, "rb");
  if (!probe) return 0;
  fclose(probe);
  int rc = load_file(t, path, err, errlen);
  if (rc) return rc;
  if (!lua_istable(t->L, -1)) {
    snprintf(err, errlen, "%s: must return %s", path, what);
    lua_pop(t->L, 1);
    return MW_EINVAL;
  }
  return 1;
}

/* Secrets: every regular file of HOME/tenants/<tenant>/secrets/ (at most
 * 64 KiB each), readable by this tenant's skills only, never logged. */
static int not_dot(const struct dirent *de) { return de->d_name[0] != '.'; }

static int load_secrets(mw_tenant *t, const char *home, char *err, size_t errlen) {
  char dir[1024], path[1400];
  snprintf(dir, sizeof dir, "%s/tenants/%s/secrets", home, t->name);
  struct dirent **names;
  int n = scandir(dir, &names, not_dot, alphasort);
  if (n < 0) return 0;
  int rc = 0;
  t->secrets = calloc((size_t)n + 1, sizeof *t->secrets);
  for (int i = 0; i < n; i++) {
    if (!rc && t->secrets && mw_valid_id(names[i]->d_name)) {
      snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
      FILE *f = fopen(path, "rb");
      char *buf = f ? malloc(MAX_SECRET_BYTES + 1) : NULL;
      size_t len = buf ? fread(buf, 1, MAX_SECRET_BYTES + 1, f) : 0;
      if (f) fclose(f);
      if (buf && len <= MAX_SECRET_BYTES) {
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) len--;   /* echo's newline */
        struct secret *sec = &t->secrets[t->nsecrets++];
        snprintf(sec->name, sizeof sec->name, "%.64s", names[i]->d_name);
        sec->value = buf;
        sec->len = len;
      } else {
        free(buf);
        if (f && len > MAX_SECRET_BYTES) {
          snprintf(err, errlen, "%s: a secret is at most %d bytes", path, MAX_SECRET_BYTES);
          rc = MW_EINVAL;
        }
      }
    }
    free(names[i]);
  }
  free(names);
  if (!t->secrets && n > 0) rc = MW_ENOMEM;
  return rc;
}

/* Heartbeats: HOME/tenants/<tenant>/heartbeat.lua returns a list of
 * {actor = <id>, every_ms = <n >= 10>, profile = <name>?, skill = <name>?}. */
static int load_beats(mw_tenant *t, const char *home, char *err, size_t errlen) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tenants/%s/heartbeat.lua", home, t->name);
  lua_State *L = t->L;
  int top = lua_gettop(L);
  int rc = load_config(t, home, "heartbeat.lua", "a list of heartbeats", err, errlen);
  if (rc <= 0) return rc;
  rc = 0;
  size_t n = (size_t)lua_rawlen(L, -1);
  t->beats = calloc(n + 1, sizeof *t->beats);
  if (!t->beats) {
    lua_settop(L, top);
    return MW_ENOMEM;
  }
  for (size_t i = 0; i < n && !rc; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    mw_beat *b = &t->beats[i];
    const char *problem = NULL;
    if (!lua_istable(L, -1)) problem = "each heartbeat must be a table";
    else {
      lua_getfield(L, -1, "actor");
      lua_getfield(L, -2, "every_ms");
      lua_getfield(L, -3, "profile");
      lua_getfield(L, -4, "skill");
      const char *actor = lua_tostring(L, -4), *profile = lua_tostring(L, -2), *skill = lua_tostring(L, -1);
      int isnum;
      lua_Integer every = lua_tointegerx(L, -3, &isnum);
      if (!actor || !mw_valid_id(actor)) problem = "actor must be an actor id";
      else if (!isnum || every < 10) problem = "every_ms must be an integer >= 10";
      else if (profile && strcmp(profile, "builder") && strcmp(profile, "companion") && strcmp(profile, "agent"))
        problem = "profile must be builder, companion or agent";
      else if (skill && !mw_valid_id(skill)) problem = "skill must be a skill name";
      else {
        snprintf(b->actor, sizeof b->actor, "%s", actor);
        snprintf(b->profile, sizeof b->profile, "%s", profile ? profile : "agent");
        snprintf(b->skill, sizeof b->skill, "%s", skill ? skill : "");
        b->every_ms = every;
      }
      lua_pop(L, 4);
    }
    lua_pop(L, 1);
    if (problem) {
      snprintf(err, errlen, "%s: heartbeat %zu: %s", path, i + 1, problem);
      rc = MW_EINVAL;
    }
  }
  if (!rc) t->nbeats = n;
  lua_settop(L, top);
  return rc;
}

static int encode_pop(mw_tenant *t, mw_buf *out, char *err, size_t errlen);

/* Policies: scripts/policies/NAME.lua and the tenant's policies/NAME.lua
 * (which override), each a table {filter = f(item, source)?, score =
 * f(item, source)?, subjects = f(item, source)?}; registered by file name. */
static int load_policies(mw_tenant *t, const char *dir, int strict, char *err, size_t errlen) {
  struct dirent **names;
  int n = scandir(dir, &names, lua_file, alphasort);
  if (n < 0) return 0;
  lua_State *L = t->L;
  int base = lua_gettop(L), rc = 0;
  char path[1024], why[1200];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    int bad = load_file(t, path, why, sizeof why);
    if (!bad && !lua_istable(L, -1)) {
      snprintf(why, sizeof why, "%s: a policy must return a table {filter?, score?, subjects?}", path);
      bad = MW_EINVAL;
    }
    if (!bad) {
      size_t len = strlen(names[i]->d_name) - 4;
      lua_pushlstring(L, names[i]->d_name, len);
      lua_insert(L, -2);
      lua_settable(L, base);
    }
    lua_settop(L, base);
    if (bad && strict) {
      snprintf(err, errlen, "%s", why);
      rc = bad;
      break;
    }
    if (bad) log_load_error(t, "a policy failed to load", why);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

/* The roster: HOME/tenants/<tenant>/roster.lua returns a list of
 * {id, locator, does, subjects = {"mundo"|"atividade", ...}, policy?, deadline_ms?}.
 * Every locator is checked against the operator's roots. */
static int load_roster(mw_tenant *t, const char *home, const mw_tenant_conf *c, char *err, size_t errlen) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tenants/%s/roster.lua", home, t->name);
  lua_State *L = t->L;
  int top = lua_gettop(L);
  int rc = load_config(t, home, "roster.lua", "a list of sources", err, errlen);
  if (rc <= 0) return rc;
  rc = 0;
  size_t n = (size_t)lua_rawlen(L, -1);
  t->sources = calloc(n + 1, sizeof *t->sources);
  if (!t->sources) {
    lua_settop(L, top);
    return MW_ENOMEM;
  }
  char why[600];
  for (size_t i = 0; i < n && !rc; i++) {
    mw_source *src = &t->sources[i];
    const char *problem = NULL;
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    if (!lua_istable(L, -1)) problem = "each source must be a table";
    else {
      lua_getfield(L, -1, "id");
      lua_getfield(L, -2, "locator");
      lua_getfield(L, -3, "does");
      lua_getfield(L, -4, "policy");
      lua_getfield(L, -5, "deadline_ms");
      const char *id = lua_tostring(L, -5), *loc = lua_tostring(L, -4), *does = lua_tostring(L, -3),
                 *policy = lua_tostring(L, -2);
      lua_Integer deadline = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
      if (!id || !mw_valid_id(id)) problem = "id must be 1-64 of A-Z a-z 0-9 _ . -";
      else if (!loc || strlen(loc) >= sizeof src->locator) problem = "locator must be a string";
      else if (!does || strlen(does) >= sizeof src->does || strchr(does, '\n')) problem = "does must be one line";
      else if (policy && !mw_valid_id(policy)) problem = "policy must be a policy name";
      else if (mw__locator_check(loc, c->roots, c->nroots, why, sizeof why)) problem = why;
      else {
        snprintf(src->id, sizeof src->id, "%s", id);
        snprintf(src->locator, sizeof src->locator, "%s", loc);
        snprintf(src->does, sizeof src->does, "%s", does);
        snprintf(src->policy, sizeof src->policy, "%s", policy ? policy : "default");
        src->deadline_ms = deadline > 0 ? deadline : 5000;
      }
      lua_pop(L, 5);
      if (!problem && lua_getfield(L, -1, "subjects") == LUA_TTABLE) {
        for (lua_Integer k = 1; lua_rawgeti(L, -1, k) != LUA_TNIL; k++) {
          const char *sub = lua_tostring(L, -1);
          if (sub && !strcmp(sub, "mundo")) src->subjects |= MW_MUNDO;
          else if (sub && !strcmp(sub, "atividade")) src->subjects |= MW_ATIVIDADE;
          else problem = "subjects are \"mundo\" and/or \"atividade\"";
          lua_pop(L, 1);
        }
        lua_pop(L, 2);   /* the nil that ended the list, and the list */
      } else if (!problem) {
        lua_pop(L, 1);
        problem = "subjects must list \"mundo\" and/or \"atividade\"";
      }
      if (!problem && !src->subjects) problem = "subjects must not be empty";
      for (size_t j = 0; !problem && j < i; j++)
        if (!strcmp(t->sources[j].id, src->id)) problem = "a source id appears twice";
      if (!problem) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->policies_ref);
        if (lua_getfield(L, -1, src->policy) != LUA_TTABLE) problem = "its policy is not defined";
        lua_pop(L, 2);
      }
    }
    lua_pop(L, 1);
    if (problem) {
      snprintf(err, errlen, "%s: source %zu: %.400s", path, i + 1, problem);
      rc = MW_EINVAL;
    }
  }
  if (!rc) t->nsources = n;
  lua_settop(L, top);
  return rc;
}

const mw_source *mw__tenant_sources(const mw_tenant *t, size_t *n) {
  *n = t->nsources;
  return t->sources;
}

const mw_source *mw__tenant_source(const mw_tenant *t, const char *id) {
  for (size_t i = 0; i < t->nsources; i++)
    if (!strcmp(t->sources[i].id, id)) return &t->sources[i];
  return NULL;
}

static void push_source(lua_State *L, const mw_source *src) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, src->id); lua_setfield(L, -2, "id");
  lua_pushstring(L, src->locator); lua_setfield(L, -2, "locator");
  lua_pushstring(L, src->does); lua_setfield(L, -2, "does");
  lua_createtable(L, 2, 0);
  int k = 0;
  if (src->subjects & MW_MUNDO) lua_pushliteral(L, "mundo"), lua_rawseti(L, -2, ++k);
  if (src->subjects & MW_ATIVIDADE) lua_pushliteral(L, "atividade"), lua_rawseti(L, -2, ++k);
  luaL_setmetatable(L, "mw.array");
  lua_setfield(L, -2, "subjects");
}

typedef struct { mw_tenant *t; const mw_source *src; const char *items; size_t len; } policy_args;

/* [-0, +4] pushes delta.apply, the source, the items and the policy. */
static int push_policy(lua_State *L) {
  policy_args *a = lua_touserdata(L, 1);
  char err[256];
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->t->delta_ref);
  push_source(L, a->src);
  if (mw__ljson_decode(L, a->items, a->len, err, sizeof err)) return luaL_error(L, "items: %s", err);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->t->policies_ref);
  lua_getfield(L, -1, a->src->policy);
  lua_remove(L, -2);
  return 4;
}

int mw__tenant_policy(mw_tenant *t, const mw_source *src, const char *items, size_t len, mw_buf *out,
                      char *err, size_t errlen) {
  lua_State *L = t->L;
  int top = lua_gettop(L);
  policy_args a = {t, src, items, len};
  lua_pushcfunction(L, push_policy);
  lua_pushlightuserdata(L, &a);
  int rc = tcall(t, 1, 4);
  if (!rc) rc = tcall(t, 3, 1);
  if (rc) {
    snprintf(err, errlen, "policy %s: %s", src->policy, lua_tostring(L, -1));
    lua_settop(L, top);
    return rc;
  }
  rc = encode_pop(t, out, err, errlen);
  lua_settop(L, top);
  return rc;
}

/* Quotas: HOME/tenants/<tenant>/quotas.lua returns {actors = n?, log_bytes = n?,
 * rps = n?}; absent or 0 means unlimited. */
static int load_quotas(mw_tenant *t, const char *home, char *err, size_t errlen) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tenants/%s/quotas.lua", home, t->name);
  lua_State *L = t->L;
  int top = lua_gettop(L);
  int rc = load_config(t, home, "quotas.lua", "{actors = n, log_bytes = n, rps = n}", err, errlen);
  if (rc <= 0) return rc;
  rc = 0;
  static const char *const keys[] = {"actors", "log_bytes", "rps", NULL};
  int64_t *slots[] = {&t->quotas.actors, &t->quotas.log_bytes, &t->quotas.rps};
  for (int i = 0; keys[i] && !rc; i++) {
    int isnum = 1;
    lua_getfield(L, -1, keys[i]);
    lua_Integer v = lua_isnil(L, -1) ? 0 : lua_tointegerx(L, -1, &isnum);
    lua_pop(L, 1);
    if (!isnum || v < 0) rc = MW_EINVAL;
    else *slots[i] = v;
  }
  if (rc) snprintf(err, errlen, "%s: must return {actors = n, log_bytes = n, rps = n} (integers >= 0)", path);
  lua_settop(L, top);
  return rc;
}

const mw_quotas *mw__tenant_quotas(const mw_tenant *t) { return &t->quotas; }

const mw_beat *mw__tenant_beats(const mw_tenant *t, size_t *n) {
  *n = t->nbeats;
  return t->beats;
}

int mw__tenant_new(const char *name, const mw_tenant_conf *c, mw_tenant **out, char *err, size_t errlen) {
  *out = NULL;
  mw_tenant *t = calloc(1, sizeof *t);
  if (!t) return MW_ENOMEM;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->mem_limit = c->mem_limit ? c->mem_limit : (64u << 20);
  t->budget = c->budget > 0 ? c->budget : 50000000;
  t->time_ns = (uint64_t)(c->time_ms > 0 ? c->time_ms : 2000) * 1000000u;
  t->compose_ref = t->profiles_ref = t->skills_ref = t->policies_ref = t->delta_ref = LUA_NOREF;
  char path[1024];
  snprintf(path, sizeof path, "%s/fold.lua", c->scripts_dir);
  int rc = mw_fold_open(path, NULL, &t->fold, err, errlen);
  if (rc) goto fail;
  snprintf(path, sizeof path, "%s/sweep.lua", c->scripts_dir);
  if ((rc = mw_fold_open(path, NULL, &t->sweep, err, errlen))) goto fail;
  t->L = lua_newstate(talloc, t);
  if (!t->L) { rc = MW_ENOMEM; snprintf(err, errlen, "out of memory"); goto fail; }
  lua_State *L = t->L;
  lua_pushcfunction(L, open_sandbox);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    snprintf(err, errlen, "sandbox: %s", lua_tostring(L, -1));
    rc = MW_ENOMEM;
    goto fail;
  }
  snprintf(path, sizeof path, "%s/waking.lua", c->scripts_dir);
  if ((rc = load_file(t, path, err, errlen))) goto fail;
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "compose");
    lua_remove(L, -2);
  }
  if (!lua_isfunction(L, -1)) {
    snprintf(err, errlen, "%s must return a compose function", path);
    rc = MW_EINVAL;
    goto fail;
  }
  t->compose_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  snprintf(path, sizeof path, "%s/profiles.lua", c->scripts_dir);
  if ((rc = load_file(t, path, err, errlen))) goto fail;
  if (!lua_istable(L, -1)) {
    snprintf(err, errlen, "%s must return a table of profiles", path);
    rc = MW_EINVAL;
    goto fail;
  }
  t->profiles_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_newtable(L);
  if (c->skills_dir && (rc = load_skills(t, c->skills_dir, c->strict, err, errlen))) goto fail;
  if (c->home) {
    snprintf(path, sizeof path, "%s/tenants/%s/skills", c->home, name);
    /* the tenant's own skills override the shared ones */
    if ((rc = load_skills(t, path, c->strict, err, errlen))) goto fail;
  }
  t->skills_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  snprintf(path, sizeof path, "%s/delta.lua", c->scripts_dir);
  if ((rc = load_file(t, path, err, errlen))) goto fail;
  if (!lua_isfunction(L, -1)) {
    snprintf(err, errlen, "%s must return a function(source, items, policy)", path);
    rc = MW_EINVAL;
    goto fail;
  }
  t->delta_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_newtable(L);
  snprintf(path, sizeof path, "%s/policies", c->scripts_dir);
  if ((rc = load_policies(t, path, c->strict, err, errlen))) goto fail;
  if (c->home) {
    snprintf(path, sizeof path, "%s/tenants/%s/policies", c->home, name);
    if ((rc = load_policies(t, path, c->strict, err, errlen))) goto fail;
  }
  t->policies_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (c->home) {
    /* The tenant's own configuration files: on a reload any error keeps the
     * old version serving; on a first load a bad file is logged and left out,
     * so that one broken roster does not stop the tenant's wakes. */
    if ((rc = load_roster(t, c->home, c, err, errlen)) && !c->strict) {
      log_load_error(t, "the roster failed to load; no sources are declared", err);
      free(t->sources);
      t->sources = NULL;
      t->nsources = 0;
      rc = 0;
    }
    if (rc) goto fail;
    if ((rc = load_quotas(t, c->home, err, errlen)) && !c->strict) {
      log_load_error(t, "quotas.lua failed to load; no quotas apply", err);
      memset(&t->quotas, 0, sizeof t->quotas);
      rc = 0;
    }
    if (rc) goto fail;
    if ((rc = load_secrets(t, c->home, err, errlen))) goto fail;
    if ((rc = load_beats(t, c->home, err, errlen)) && !c->strict) {
      log_load_error(t, "heartbeat.lua failed to load; no heartbeats run", err);
      free(t->beats);
      t->beats = NULL;
      t->nbeats = 0;
      rc = 0;
    }
    if (rc) goto fail;
  }
  *out = t;
  return 0;
fail:
  mw__tenant_free(t);
  return rc;
}

void mw__tenant_free(mw_tenant *t) {
  if (!t) return;
  if (t->L) lua_close(t->L);
  mw_fold_close(t->fold);
  mw_fold_close(t->sweep);
  mw__buf_free(&t->navigated);
  for (size_t i = 0; i < t->nsecrets; i++) {
    memset(t->secrets[i].value, 0, t->secrets[i].len);
    free(t->secrets[i].value);
  }
  free(t->secrets);
  free(t->beats);
  free(t->sources);
  free(t);
}

const char *mw__tenant_name(const mw_tenant *t) { return t->name; }
mw_fold *mw__tenant_fold(mw_tenant *t) { return t->fold; }
mw_fold *mw__tenant_sweep(mw_tenant *t) { return t->sweep; }
size_t mw__tenant_mem(const mw_tenant *t) { return t->mem; }

int mw__tenant_profile(mw_tenant *t, const char *profile, char skill[65]) {
  lua_State *L = t->L;
  int top = lua_gettop(L), rc = MW_ENOENT;
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->profiles_ref);
  if (lua_getfield(L, -1, profile) == LUA_TTABLE) {
    rc = 0;
    skill[0] = '\0';
    if (lua_getfield(L, -1, "skill") == LUA_TSTRING) snprintf(skill, 65, "%s", lua_tostring(L, -1));
  }
  lua_settop(L, top);
  return rc;
}

int mw__tenant_has_skill(mw_tenant *t, const char *name) {
  lua_State *L = t->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->skills_ref);
  int has = lua_getfield(L, -1, name) == LUA_TTABLE;
  lua_pop(L, 2);
  return has;
}

/* ---- compose ------------------------------------------------------------------ */

typedef struct { mw_tenant *t; const mw_compose_in *in; } compose_args;

/* [-0, +2] pushes compose and its request table; runs protected. */
static int push_compose(lua_State *L) {
  compose_args *a = lua_touserdata(L, 1);
  const mw_compose_in *in = a->in;
  char err[256];
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->t->compose_ref);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, in->actor); lua_setfield(L, -2, "actor_id");
  lua_pushstring(L, in->profile); lua_setfield(L, -2, "profile");
  lua_pushstring(L, in->trigger); lua_setfield(L, -2, "trigger");
  if (in->context_hint) { lua_pushstring(L, in->context_hint); lua_setfield(L, -2, "context_hint"); }
  lua_pushinteger(L, in->cursor); lua_setfield(L, -2, "cursor");
  lua_pushinteger(L, in->head_cursor); lua_setfield(L, -2, "head_cursor");
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->t->profiles_ref);
  lua_getfield(L, -1, in->profile);
  lua_setfield(L, -3, "profile_config");
  lua_pop(L, 1);
  if (mw__ljson_decode(L, in->state, in->state_len, err, sizeof err)) return luaL_error(L, "state: %s", err);
  lua_setfield(L, -2, "state");
  if (in->corpus && in->corpus_len) {
    if (mw__ljson_decode(L, in->corpus, in->corpus_len, err, sizeof err)) return luaL_error(L, "corpus: %s", err);
    lua_setfield(L, -2, "corpus");
  }
  lua_createtable(L, (int)a->t->nsources, 0);
  for (size_t i = 0; i < a->t->nsources; i++) {
    push_source(L, &a->t->sources[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  luaL_setmetatable(L, "mw.array");
  lua_setfield(L, -2, "roster");
  return 2;
}

typedef struct { mw_buf *out; int idx; char err[256]; int rc; } encode_args;

static int encode_top(lua_State *L) {
  encode_args *a = lua_touserdata(L, 1);
  a->rc = mw__ljson_encode(L, 2, a->out, a->err, sizeof a->err);
  return 0;
}

/* Encodes the value on top (and pops it), protected; 0 or MW_EJSON/MW_ENOMEM. */
static int encode_pop(mw_tenant *t, mw_buf *out, char *err, size_t errlen) {
  lua_State *L = t->L;
  encode_args a = {out, 0, "", 0};
  lua_pushcfunction(L, encode_top);
  lua_insert(L, -2);
  lua_pushlightuserdata(L, &a);
  lua_insert(L, -2);
  int rc = tcall(t, 2, 0);
  if (rc) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return rc;
  }
  if (a.rc) snprintf(err, errlen, "%s", a.err);
  return a.rc;
}

int mw__tenant_compose(mw_tenant *t, const mw_compose_in *in, mw_buf *briefing, char *err, size_t errlen) {
  lua_State *L = t->L;
  int top = lua_gettop(L);
  compose_args a = {t, in};
  t->navigated.len = 0;
  t->composing = 1;
  lua_pushcfunction(L, push_compose);
  lua_pushlightuserdata(L, &a);
  int rc = tcall(t, 1, 2);
  if (!rc) rc = tcall(t, 1, 1);
  t->composing = 0;
  if (rc) {
    snprintf(err, errlen, "waking: %s", lua_tostring(L, -1));
    lua_settop(L, top);
    return rc;
  }
  if (!lua_istable(L, -1)) {
    snprintf(err, errlen, "waking: compose must return the briefing table");
    lua_settop(L, top);
    return MW_ESKILL;
  }
  briefing->len = 0;
  rc = encode_pop(t, briefing, err, errlen);
  lua_settop(L, top);
  return rc;
}

/* ---- skills ------------------------------------------------------------------- */

/* The guard: a staged body never carries a secret's value (as is, or as it
 * reads escaped inside a JSON string). */
static const char *leaks_secret(mw_tenant *t, const mw_buf *body) {
  for (size_t i = 0; i < t->nsecrets; i++) {
    const struct secret *sec = &t->secrets[i];
    if (sec->len < 4) continue;
    if (memmem(body->p, body->len, sec->value, sec->len)) return sec->name;
    mw_buf esc = {0};
    if (mw__json_string(&esc, sec->value, sec->len) == 0 && esc.len > 2 &&
        memmem(body->p, body->len, esc.p + 1, esc.len - 2)) {
      mw__buf_free(&esc);
      return sec->name;
    }
    mw__buf_free(&esc);
  }
  return NULL;
}

/* ctx.stage(kind, body): the guard checks kind and body now, so a skill
 * learns at the line that staged it; the entries commit only with the run. */
static int ctx_stage(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  mw_run_out *o = t->run;
  const char *kind = luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  if (!o) return luaL_error(L, "stage called outside a run");
  if (!mw_valid_id(kind)) return luaL_error(L, "stage: kind must be 1-64 of A-Z a-z 0-9 _ . -");
  if (!strcmp(kind, "run") || !strcmp(kind, "handover") || !strcmp(kind, "direction"))
    return luaL_error(L, "stage: kind '%s' is written by the host only", kind);
  if (mw__tenant_secret_in(t, kind, strlen(kind)))
    return luaL_error(L, "stage: the kind is the value of a secret; secrets never enter the log");
  if (o->nstaged >= MAX_STAGED) return luaL_error(L, "stage: more than %d entries in one run", MAX_STAGED);
  mw_staged *s = realloc(o->staged, (o->nstaged + 1) * sizeof *s);
  if (!s) return luaL_error(L, "not enough memory");
  o->staged = s;
  s = &o->staged[o->nstaged];
  memset(s, 0, sizeof *s);
  char err[256];
  if (mw__ljson_encode(L, 2, &s->body, err, sizeof err)) {
    mw__buf_free(&s->body);
    return luaL_error(L, "stage: body is not JSON: %s", err);
  }
  if (!strcmp(kind, "fact") && mw_cortex_validate(s->body.p, s->body.len, err, sizeof err)) {
    mw__buf_free(&s->body);
    return luaL_error(L, "stage: %s", err);
  }
  const char *leaked = leaks_secret(t, &s->body);
  if (leaked) {
    mw__buf_free(&s->body);
    return luaL_error(L, "stage: the body contains the value of secret '%s'; secrets never enter the log", leaked);
  }
  if (s->body.len > MAX_STAGED_BYTES) {
    mw__buf_free(&s->body);
    return luaL_error(L, "stage: body of %d bytes is over the %d byte limit", (int)s->body.len,
                      MAX_STAGED_BYTES);
  }
  snprintf(s->kind, sizeof s->kind, "%s", kind);
  o->nstaged++;
  return 0;
}

const char *mw__tenant_secret_in(mw_tenant *t, const char *p, size_t n) {
  mw_buf b = {(char *)p, n, n};
  return leaks_secret(t, &b);
}

/* ctx.secret(name) -> the value of HOME/tenants/<tenant>/secrets/<name>, or nil. */
static int ctx_secret(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  const char *name = luaL_checkstring(L, 1);
  for (size_t i = 0; i < t->nsecrets; i++)
    if (!strcmp(t->secrets[i].name, name)) {
      lua_pushlstring(L, t->secrets[i].value, t->secrets[i].len);
      return 1;
    }
  lua_pushnil(L);
  return 1;
}

/* ctx.call(actor, skill, input): another actor's skill, run after this run
 * commits (a failing caller commits nothing anywhere). */
static int ctx_call(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  mw_run_out *o = t->run;
  const char *actor = luaL_checkstring(L, 1), *skill = luaL_checkstring(L, 2);
  if (!o) return luaL_error(L, "call outside a run");
  if (!mw_valid_id(actor)) return luaL_error(L, "call: actor must be 1-64 of A-Z a-z 0-9 _ . -");
  if (!mw_valid_id(skill)) return luaL_error(L, "call: skill must be a skill name");
  if (o->ncalls >= 16) return luaL_error(L, "call: at most 16 calls per run");
  mw_enqueued *c = realloc(o->calls, (o->ncalls + 1) * sizeof *c);
  if (!c) return luaL_error(L, "not enough memory");
  o->calls = c;
  c = &o->calls[o->ncalls];
  memset(c, 0, sizeof *c);
  char err[256];
  if (lua_isnoneornil(L, 3)) mw__buf_addstr(&c->input, "null");
  else if (mw__ljson_encode(L, 3, &c->input, err, sizeof err)) {
    mw__buf_free(&c->input);
    return luaL_error(L, "call: input is not JSON: %s", err);
  }
  const char *leaked = mw__tenant_secret_in(t, c->input.p, c->input.len);
  if (leaked) {
    mw__buf_free(&c->input);
    return luaL_error(L, "call: the input contains the value of secret '%s'; secrets never enter the log", leaked);
  }
  snprintf(c->actor, sizeof c->actor, "%s", actor);
  snprintf(c->skill, sizeof c->skill, "%s", skill);
  o->ncalls++;
  return 0;
}

/* ctx.remember(key, value): stages a "remember" entry the fold keeps in state.memory. */
static int ctx_remember(lua_State *L) {
  luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  lua_settop(L, 2);
  lua_pushcfunction(L, ctx_stage);
  lua_pushliteral(L, "remember");
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, 1); lua_setfield(L, -2, "key");
  lua_pushvalue(L, 2); lua_setfield(L, -2, "value");
  lua_call(L, 2, 0);
  return 0;
}

/* ctx.fact(body): stages a `fact` entry (see cortex.h for its shapes); it
 * reaches the Cortex after the run commits. */
static int ctx_fact(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_pushcfunction(L, ctx_stage);
  lua_pushliteral(L, "fact");
  lua_pushvalue(L, 1);
  lua_call(L, 2, 0);
  return 0;
}

/* ctx.feedback(source, signal [, note]): a relevance signal in [-1, 1] for a
 * source; it accrues in the log and shows, summarised, in the sources leg. */
static int ctx_feedback(lua_State *L) {
  const char *src = luaL_checkstring(L, 1);
  lua_Number signal = luaL_checknumber(L, 2);
  if (!mw_valid_id(src)) return luaL_error(L, "feedback: source must be a source id");
  if (!(signal >= -1 && signal <= 1)) return luaL_error(L, "feedback: signal must be in [-1, 1]");
  lua_settop(L, 3);
  lua_pushcfunction(L, ctx_stage);
  lua_pushliteral(L, "feedback");
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, 1); lua_setfield(L, -2, "source");
  lua_pushvalue(L, 2); lua_setfield(L, -2, "signal");
  if (lua_isstring(L, 3)) { lua_pushvalue(L, 3); lua_setfield(L, -2, "note"); }
  lua_call(L, 2, 0);
  return 0;
}

/* ctx.promote(key): the claim about node `key` becomes a fact. */
static int ctx_promote(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_pushcfunction(L, ctx_stage);
  lua_pushliteral(L, "fact");
  lua_createtable(L, 0, 1);
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "node");
  lua_setfield(L, -2, "promote");
  lua_call(L, 2, 0);
  return 0;
}

static int ctx_delta(lua_State *L);

typedef struct { mw_tenant *t; const mw_run_in *in; } run_args;

/* [-0, +3] pushes skill.run, ctx and input; runs protected. */
static int push_run(lua_State *L) {
  run_args *a = lua_touserdata(L, 1);
  const mw_run_in *in = a->in;
  char err[256];
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->t->skills_ref);
  lua_getfield(L, -1, in->skill);
  lua_getfield(L, -1, "run");
  lua_createtable(L, 0, 8);
  lua_pushstring(L, in->actor); lua_setfield(L, -2, "actor_id");
  lua_pushstring(L, in->session_id); lua_setfield(L, -2, "session_id");
  lua_pushstring(L, in->profile); lua_setfield(L, -2, "profile");
  lua_pushstring(L, in->skill); lua_setfield(L, -2, "skill");
  lua_pushinteger(L, in->cursor); lua_setfield(L, -2, "cursor");
  lua_pushcfunction(L, ctx_stage); lua_setfield(L, -2, "stage");
  lua_pushcfunction(L, ctx_remember); lua_setfield(L, -2, "remember");
  lua_pushcfunction(L, ctx_fact); lua_setfield(L, -2, "fact");
  lua_pushcfunction(L, ctx_secret); lua_setfield(L, -2, "secret");
  lua_pushcfunction(L, ctx_feedback); lua_setfield(L, -2, "feedback");
  lua_pushcfunction(L, ctx_delta); lua_setfield(L, -2, "delta");
  lua_pushcfunction(L, ctx_call); lua_setfield(L, -2, "call");
  lua_pushcfunction(L, ctx_promote); lua_setfield(L, -2, "promote");
  lua_getfield(L, LUA_REGISTRYINDEX, "mw.cortex"); lua_setfield(L, -2, "cortex");
  if (mw__ljson_decode(L, in->state, in->state_len, err, sizeof err)) return luaL_error(L, "state: %s", err);
  lua_setfield(L, -2, "state");
  if (mw__ljson_decode(L, in->input, in->input_len, err, sizeof err)) return luaL_error(L, "input: %s", err);
  return 3;
}

/* Skills run in a coroutine of their own, so that a host call that waits on
 * I/O (ctx.delta) yields it and the loop goes on; the engine resumes it from
 * the libuv callback with the answer.  The budgets apply to each resume. */
static const char DELTA_MARK[] = "mw.delta";

/* ctx.delta([source]) -> {items = {...}, errors = {...}} */
static int ctx_delta(lua_State *L) {
  mw_tenant *t = tenant_of(L);
  if (!t->run || L != t->run_co)
    return luaL_error(L, "ctx.delta must be called by the skill itself (not inside a coroutine of its own)");
  if (!lua_isyieldable(L)) return luaL_error(L, "ctx.delta cannot be called across a C call (a sort comparator, a metamethod)");
  lua_settop(L, 1);
  if (!lua_isnil(L, 1) && (lua_type(L, 1) != LUA_TSTRING || !mw_valid_id(lua_tostring(L, 1))))
    return luaL_error(L, "ctx.delta: source must be a source id");
  lua_pushlightuserdata(L, (void *)DELTA_MARK);
  lua_insert(L, 1);
  return lua_yield(L, 2);
}

/* [-1, +1] An error object as text: a string, its __tostring, or its type. */
static int describe_error(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING) return 1;
  if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
  lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  return 1;
}

static void run_failed(mw_run_out *o) {
  for (size_t i = 0; i < o->nstaged; i++) mw__buf_free(&o->staged[i].body);
  free(o->staged);
  o->staged = NULL;
  o->nstaged = 0;
  mw__buf_free(&o->result);
  for (size_t i = 0; i < o->ncalls; i++) mw__buf_free(&o->calls[i].input);
  free(o->calls);
  o->calls = NULL;
  o->ncalls = 0;
}

/* Resumes the run's coroutine with nargs values on its stack. */
static int run_step(mw_tenant *t, const mw_run_in *in, mw_run_out *o, int nargs) {
  lua_State *L = t->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, o->co_ref);
  lua_State *co = lua_tothread(L, -1);
  lua_pop(L, 1);
  int nres = 0;
  t->used = 0;
  t->over = 0;
  t->deadline_ns = now_ns() + t->time_ns;
  t->run = o;
  t->run_co = co;
  lua_sethook(co, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  int st = lua_resume(co, L, nargs, &nres);
  lua_sethook(co, NULL, 0, 0);
  t->run = NULL;
  t->run_co = NULL;
  /* one long C call (a pattern within the bounds) returns past the deadline
   * without a hook firing: the budget stands all the same */
  if (!t->over && st != LUA_YIELD && now_ns() > t->deadline_ns) t->over = 2;
  int over = t->over, rc = 0;
  t->over = 0;
  o->pending = 0;
  if (st == LUA_YIELD && !over) {
    if (nres == 2 && lua_touserdata(co, -2) == DELTA_MARK) {
      o->pending = 1;
      snprintf(o->pending_source, sizeof o->pending_source, "%s", lua_isstring(co, -1) ? lua_tostring(co, -1) : "");
      lua_pop(co, nres);
      return 0;
    }
    lua_pop(co, nres);
    snprintf(o->message, sizeof o->message, "skill %.64s yielded outside a host call (only ctx.delta may wait)", in->skill);
    rc = MW_ESKILL;
  } else if (st == LUA_OK && !over) {
    if (nres == 0) lua_pushnil(co);
    else if (nres > 1) lua_pop(co, nres - 1);
    lua_xmove(co, L, 1);
    rc = encode_pop(t, &o->result, o->message, sizeof o->message);
    if (rc == MW_EJSON) {
      char m[sizeof o->message];
      snprintf(m, sizeof m, "skill %.64s returned a value that is not JSON: %.900s", in->skill, o->message);
      memcpy(o->message, m, sizeof m);
      rc = MW_ESKILL;
    }
  } else {
    rc = over == 1 || over == 2 ? MW_ETIMEOUT : over == 3 || st == LUA_ERRMEM ? MW_ENOMEM : MW_ESKILL;
    const char *msg = NULL;
    if (st != LUA_OK && st != LUA_YIELD) {
      /* the error object may be anything, its __tostring may raise: describe it protected */
      lua_pushcfunction(L, describe_error);
      lua_xmove(co, L, 1);
      if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING)
        snprintf(o->message, sizeof o->message, "%s", lua_tostring(L, -1));
      else
        snprintf(o->message, sizeof o->message, "(an error object that cannot be described)");
      lua_pop(L, 1);
      msg = o->message;
    }
    if (!msg) msg = over == 3 ? "not enough memory" : "budget exceeded";
    if (rc == MW_ETIMEOUT && !strstr(msg, "budget")) msg = over == 1 ? "instruction budget exceeded" : "time budget exceeded";
    if (msg != o->message) snprintf(o->message, sizeof o->message, "%s", msg);
    luaL_traceback(L, co, NULL, 0);
    mw__buf_addstr(&o->traceback, lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    lua_pop(L, 1);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, o->co_ref);
  o->co_ref = LUA_NOREF;
  t->suspended--;
  if (rc) run_failed(o);
  return o->rc = rc;
}

int mw__tenant_run(mw_tenant *t, const mw_run_in *in, mw_run_out *o) {
  lua_State *L = t->L;
  int top = lua_gettop(L);
  memset(o, 0, sizeof *o);
  o->co_ref = LUA_NOREF;
  if (!mw__tenant_has_skill(t, in->skill)) {
    snprintf(o->message, sizeof o->message, "no skill \"%s\"", in->skill);
    return o->rc = MW_ENOENT;
  }
  run_args a = {t, in};
  lua_pushcfunction(L, push_run);
  lua_pushlightuserdata(L, &a);
  int rc = tcall(t, 1, 3);
  if (rc) {
    snprintf(o->message, sizeof o->message, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
    lua_settop(L, top);
    run_failed(o);
    return o->rc = rc;
  }
  lua_State *co = lua_newthread(L);   /* [run ctx input co] */
  lua_insert(L, -4);
  lua_xmove(L, co, 3);
  o->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  t->suspended++;
  lua_settop(L, top);
  return run_step(t, in, o, 2);
}

int mw__tenant_resume(mw_tenant *t, const mw_run_in *in, mw_run_out *o, const char *json, size_t len) {
  lua_State *L = t->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, o->co_ref);
  lua_State *co = lua_tothread(L, -1);
  lua_pop(L, 1);
  char err[256];
  if (!co || !lua_checkstack(co, 4) || mw__ljson_decode(co, json, len, err, sizeof err)) {
    /* cannot hand the answer over: end the run as failed */
    if (co) lua_pushnil(co);
    snprintf(o->message, sizeof o->message, "ctx.delta: the answer could not be given to the skill");
    luaL_unref(L, LUA_REGISTRYINDEX, o->co_ref);
    o->co_ref = LUA_NOREF;
    t->suspended--;
    run_failed(o);
    return o->rc = MW_ESKILL;
  }
  return run_step(t, in, o, 1);
}

int mw__tenant_busy(const mw_tenant *t) { return t->suspended > 0; }

void mw__run_out_free(mw_run_out *o) {
  for (size_t i = 0; i < o->ncalls; i++) mw__buf_free(&o->calls[i].input);
  free(o->calls);
  o->calls = NULL;
  o->ncalls = 0;
  for (size_t i = 0; i < o->nstaged; i++) mw__buf_free(&o->staged[i].body);
  free(o->staged);
  o->staged = NULL;
  o->nstaged = 0;
  mw__buf_free(&o->result);
  mw__buf_free(&o->traceback);
}
