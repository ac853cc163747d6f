/* tenant.c -- a tenant's Lua state: Waking (scripts/waking.lua), profiles
 * (scripts/profiles.lua) and skills (skills/NAME.lua and the tenant's own), each
 * call protected, under instruction, wall-clock and memory budgets.  Nothing
 * here may exit or let a Lua error escape into C. */
#include "tenant.h"
#include "cortex.h"
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
  mw_cortex *cx;               /* NULL: dark */
  char cx_reason[256];
  mw_buf navigated;            /* what the current compose navigated */
  int composing;
};

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
    if (t->over) lua_sethook(L, budget_hook, LUA_MASKCOUNT | LUA_MASKLINE, 1);
  }
  if (t->over == 1 || t->over == 2)
    luaL_error(L, t->over == 1 ? "instruction budget exceeded" : "time budget exceeded");
}

static int msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) msg = lua_tostring(L, -1);
    else msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* The one protected entry into the tenant's Lua: calls the function under
 * nargs arguments with budgets set; leaves nres results, or the message
 * (with traceback) on failure.  Returns 0, MW_ESKILL, MW_ETIMEOUT, MW_ENOMEM. */
static int tcall(mw_tenant *t, int nargs, int nres) {
  lua_State *L = t->L;
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msgh);
  lua_insert(L, base);
  t->used = 0;
  t->over = 0;
  t->deadline_ns = now_ns() + t->time_ns;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  int rc = lua_pcall(L, nargs, nres, base);
  lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
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
  static const char *const drop[] = {"dofile", "loadfile", "load", "require", "collectgarbage", NULL};
  for (int i = 0; drop[i]; i++) {
    lua_pushnil(L);
    lua_setglobal(L, drop[i]);
  }
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
  /* sorted iteration: Waking's briefing must be the same bytes every time */
  lua_pushcfunction(L, mw__lua_sorted_pairs);
  lua_setglobal(L, "pairs");
  lua_pushcfunction(L, mw__lua_sorted_next);
  lua_setglobal(L, "next");
  mw__lua_open_json(L);
  lua_setglobal(L, "json");
  lua_newtable(L);
  lua_pushcfunction(L, l_navigate);
  lua_setfield(L, -2, "navigate");
  lua_pushcfunction(L, l_cortex_status);
  lua_setfield(L, -2, "status");
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "mw.cortex");
  lua_setglobal(L, "cortex");
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
  /* env = setmetatable({}, {__index = _G}) as the chunk's _ENV */
  lua_newtable(L);
  lua_newtable(L);
  lua_pushglobaltable(L);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_setupvalue(L, -2, 1);
  rc = tcall(t, 0, 1);
  if (rc) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return rc;
}

/* Registers every skill file of dir into the skills table (top of stack). */
static void load_skills(mw_tenant *t, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char path[1024], err[1024];
  lua_State *L = t->L;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n < 5 || strcmp(de->d_name + n - 4, ".lua") != 0 || de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (load_file(t, path, err, sizeof err)) {
      mw_buf m = {0};
      mw__json_string(&m, err, strlen(err));
      fprintf(stderr, "{\"level\":\"error\",\"tenant\":\"%s\",\"msg\":\"skill %s failed to load\",\"error\":%s}\n",
              t->name, de->d_name, m.p ? m.p : "null");
      mw__buf_free(&m);
      continue;
    }
    int ok = 0;
    if (lua_istable(L, -1)) {
      int run = lua_getfield(L, -1, "run"), nm = lua_getfield(L, -2, "name");
      ok = run == LUA_TFUNCTION && nm == LUA_TSTRING && mw_valid_id(lua_tostring(L, -1));
      lua_pop(L, 2);
    }
    if (ok) {
      lua_getfield(L, -1, "name");
      lua_insert(L, -2);
      lua_settable(L, -3);
    } else {
      lua_pop(L, 1);
      fprintf(stderr, "{\"level\":\"error\",\"tenant\":\"%s\",\"msg\":\"skill %s must return"
              " {name = <id>, description = ..., run = function(ctx, input)}\"}\n", t->name, de->d_name);
    }
  }
  closedir(d);
}

int mw__tenant_new(const char *name, const mw_tenant_conf *c, mw_tenant **out, char *err, size_t errlen) {
  *out = NULL;
  mw_tenant *t = calloc(1, sizeof *t);
  if (!t) return MW_ENOMEM;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->mem_limit = c->mem_limit ? c->mem_limit : (64u << 20);
  t->budget = c->budget > 0 ? c->budget : 50000000;
  t->time_ns = (uint64_t)(c->time_ms > 0 ? c->time_ms : 2000) * 1000000u;
  t->compose_ref = t->profiles_ref = t->skills_ref = LUA_NOREF;
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
  if (c->skills_dir) load_skills(t, c->skills_dir);
  if (c->home) {
    snprintf(path, sizeof path, "%s/tenants/%s/skills", c->home, name);
    load_skills(t, path);   /* the tenant's own override the shared ones */
  }
  t->skills_ref = luaL_ref(L, LUA_REGISTRYINDEX);
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
  if (s->body.len > MAX_STAGED_BYTES) {
    mw__buf_free(&s->body);
    return luaL_error(L, "stage: body of %d bytes is over the %d byte limit", (int)s->body.len,
                      MAX_STAGED_BYTES);
  }
  snprintf(s->kind, sizeof s->kind, "%s", kind);
  o->nstaged++;
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
  lua_pushcfunction(L, ctx_promote); lua_setfield(L, -2, "promote");
  lua_getfield(L, LUA_REGISTRYINDEX, "mw.cortex"); lua_setfield(L, -2, "cortex");
  if (mw__ljson_decode(L, in->state, in->state_len, err, sizeof err)) return luaL_error(L, "state: %s", err);
  lua_setfield(L, -2, "state");
  if (mw__ljson_decode(L, in->input, in->input_len, err, sizeof err)) return luaL_error(L, "input: %s", err);
  return 3;
}

int mw__tenant_run(mw_tenant *t, const mw_run_in *in, mw_run_out *o) {
  lua_State *L = t->L;
  int top = lua_gettop(L);
  memset(o, 0, sizeof *o);
  if (!mw__tenant_has_skill(t, in->skill)) {
    snprintf(o->message, sizeof o->message, "no skill \"%s\"", in->skill);
    return o->rc = MW_ENOENT;
  }
  run_args a = {t, in};
  lua_pushcfunction(L, push_run);
  lua_pushlightuserdata(L, &a);
  int rc = tcall(t, 1, 3);
  if (!rc) {
    t->run = o;
    rc = tcall(t, 2, 1);
    t->run = NULL;
  }
  if (!rc) {
    rc = encode_pop(t, &o->result, o->message, sizeof o->message);
    if (rc == MW_EJSON) {
      char m[sizeof o->message];
      snprintf(m, sizeof m, "skill %.64s returned a value that is not JSON: %.900s", in->skill, o->message);
      memcpy(o->message, m, sizeof m);
      rc = MW_ESKILL;
    }
  } else {
    const char *msg = lua_tostring(L, -1);
    msg = msg ? msg : "(no message)";
    const char *tb = strstr(msg, "\nstack traceback:");
    size_t mlen = tb ? (size_t)(tb - msg) : strlen(msg);
    snprintf(o->message, sizeof o->message, "%.*s", (int)(mlen < sizeof o->message ? mlen : sizeof o->message - 1), msg);
    if (tb) mw__buf_addstr(&o->traceback, tb + 1);
  }
  lua_settop(L, top);
  lua_gc(L, LUA_GCSTEP, 0);
  if (rc) {
    for (size_t i = 0; i < o->nstaged; i++) mw__buf_free(&o->staged[i].body);
    free(o->staged);
    o->staged = NULL;
    o->nstaged = 0;
    mw__buf_free(&o->result);
  }
  return o->rc = rc;
}

void mw__run_out_free(mw_run_out *o) {
  for (size_t i = 0; i < o->nstaged; i++) mw__buf_free(&o->staged[i].body);
  free(o->staged);
  o->staged = NULL;
  o->nstaged = 0;
  mw__buf_free(&o->result);
  mw__buf_free(&o->traceback);
}
