/* fold.c -- the deterministic fold: a Lua state with no clock, randomness or
 * I/O, sorted iteration and an instruction budget, that turns log entries
 * into state.  It must never depend on anything but the log and the script:
 * replay(N) is the same bytes in every process. */
#include "mw.h"
#include "buf.h"
#include "chain.h"
#include "ljson.h"
#include "lmw.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUDGET 10000000
#define DEFAULT_MEM (256u << 20)
#define HOOK_EVERY 1000

struct mw_fold {
  lua_State *L;
  int fn_ref;              /* the fold function */
  int init_ref;            /* the initial-state function, or LUA_NOREF */
  char fingerprint[65];
  int64_t budget, used;
  int over;                /* the budget ran out during this call */
  size_t mem, mem_limit;
};

/* ---- the counting allocator -------------------------------------------- */

static void *fold_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mw_fold *f = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    f->mem -= old;
    free(ptr);
    return NULL;
  }
  if (nsize > old && f->mem + (nsize - old) > f->mem_limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) f->mem = f->mem - old + nsize;
  return p;
}

/* ---- the budget --------------------------------------------------------
 * A count hook is deterministic (wall clocks are not).  Once the budget is
 * spent every further hook raises again, so a fold that catches the error
 * with pcall cannot run on; the caller also checks `over` after the call. */

static mw_fold *fold_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  mw_fold *f = fold_of(L);
  f->used += HOOK_EVERY;
  if (f->used > f->budget) {
    f->over = 1;
    /* From now on every instruction raises: a pcall that caught this one
     * cannot run on, since the code it returns to fails at once. */
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    luaL_error(L, "fold ran past its instruction budget");
  }
}

/* ---- sorted iteration --------------------------------------------------- */

static int type_rank(lua_State *L, int i) {
  switch (lua_type(L, i)) {
    case LUA_TNUMBER: return 0;
    case LUA_TSTRING: return 1;
    case LUA_TBOOLEAN: return 2;
    default: return 3;
  }
}

/* A total order on keys: numbers by value, then strings by bytes, then
 * booleans; anything else keeps no meaningful order but stays stable. */
static int key_less(lua_State *L, int a, int b) {
  int ra = type_rank(L, a), rb = type_rank(L, b);
  if (ra != rb) return ra < rb;
  if (ra == 0) return lua_compare(L, a, b, LUA_OPLT);
  if (ra == 1) {
    size_t an, bn;
    const char *as = lua_tolstring(L, a, &an), *bs = lua_tolstring(L, b, &bn);
    int c = memcmp(as, bs, an < bn ? an : bn);
    return c < 0 || (c == 0 && an < bn);
  }
  if (ra == 2) return !lua_toboolean(L, a) && lua_toboolean(L, b);
  return 0;
}

/* Pushes a sequence of t's keys (t at index 1), sorted; insertion sort on an
 * array built with lua_next, then a merge-free binary insertion. */
static void push_sorted_keys(lua_State *L, int t) {
  lua_newtable(L);
  int keys = lua_gettop(L);
  lua_Integer n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    /* binary search for the insertion point among keys[1..n] */
    lua_Integer lo = 1, hi = n + 1;
    while (lo < hi) {
      lua_Integer mid = (lo + hi) / 2;
      lua_rawgeti(L, keys, mid);
      int less = key_less(L, -2, -1);
      lua_pop(L, 1);
      if (less) hi = mid; else lo = mid + 1;
    }
    for (lua_Integer i = n; i >= lo; i--) {
      lua_rawgeti(L, keys, i);
      lua_rawseti(L, keys, i + 1);
    }
    lua_pushvalue(L, -1);
    lua_rawseti(L, keys, lo);
    n++;
  }
}

/* upvalues: 1 = sorted keys, 2 = next index */
static int sorted_iter(lua_State *L) {
  lua_Integer i = lua_tointeger(L, lua_upvalueindex(2));
  if (lua_rawgeti(L, lua_upvalueindex(1), i) == LUA_TNIL) return 1;
  lua_pushinteger(L, i + 1);
  lua_replace(L, lua_upvalueindex(2));
  lua_pushvalue(L, -1);
  lua_rawget(L, 1);
  return 2;
}

int mw__lua_sorted_pairs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  push_sorted_keys(L, 1);
  lua_pushinteger(L, 1);
  lua_pushcclosure(L, sorted_iter, 2);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

int mw__lua_sorted_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  push_sorted_keys(L, 1);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3), i = 1;
  if (!lua_isnil(L, 2)) {
    for (; i <= n; i++) {
      lua_rawgeti(L, 3, i);
      int eq = lua_rawequal(L, -1, 2);
      lua_pop(L, 1);
      if (eq) break;
    }
    if (i > n) return luaL_error(L, "invalid key to 'next'");
    i++;
  }
  if (i > n) {
    lua_pushnil(L);
    return 1;
  }
  lua_rawgeti(L, 3, i);
  lua_pushvalue(L, -1);
  lua_rawget(L, 1);
  return 2;
}

/* tostring without addresses: "table: 0x55..." differs between processes,
 * and a fold must not be able to put it in its state. */
static int det_tostring(lua_State *L) {
  luaL_checkany(L, 1);
  int t = lua_type(L, 1);
  if ((t == LUA_TTABLE || t == LUA_TUSERDATA) && luaL_callmeta(L, 1, "__tostring")) return 1;
  if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA || t == LUA_TTHREAD ||
      t == LUA_TLIGHTUSERDATA) {
    lua_pushstring(L, luaL_typename(L, 1));
    return 1;
  }
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* string.format without %p (an address). */
static int det_format(lua_State *L) {
  const char *fmt = luaL_checkstring(L, 1);
  for (const char *p = strchr(fmt, '%'); p; p = strchr(p + 2, '%')) {
    if (p[1] == '%') continue;
    const char *q = p + 1;
    while (*q && strchr("-+ #0123456789.", *q)) q++;
    if (*q == 'p') return luaL_error(L, "string.format: %%p is not deterministic");
    if (!p[1]) break;
  }
  /* %s of a table would print its address: give it what tostring gives */
  int n = lua_gettop(L);
  for (int i = 2; i <= n; i++) {
    int t = lua_type(L, i);
    if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA || t == LUA_TTHREAD || t == LUA_TLIGHTUSERDATA) {
      lua_pushcfunction(L, det_tostring);
      lua_pushvalue(L, i);
      lua_call(L, 1, 1);
      lua_replace(L, i);
    }
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, 1);
  return 1;
}

static int json_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, "mw.array");
  return 1;
}

static int json_object(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, "mw.object");
  return 1;
}

/* Builds the fold's globals: the safe, deterministic subset of the standard
 * libraries and a `json` table (null, array, object). */
static int open_sandbox(lua_State *L) {
  static const struct { const char *name; lua_CFunction open; } libs[] = {
    {LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table},
    {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8},
  };
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(L, libs[i].name, libs[i].open, 1);
    lua_pop(L, 1);
  }
  static const char *const drop_g[] = {"dofile", "loadfile", "load", "require", "collectgarbage",
                                       "print", NULL};
  for (int i = 0; drop_g[i]; i++) {
    lua_pushnil(L);
    lua_setglobal(L, drop_g[i]);
  }
  lua_getglobal(L, "math");
  lua_pushnil(L); lua_setfield(L, -2, "random");
  lua_pushnil(L); lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
  lua_getglobal(L, "string");
  lua_pushnil(L); lua_setfield(L, -2, "dump");
  lua_getfield(L, -1, "format");
  lua_pushcclosure(L, det_format, 1);
  lua_setfield(L, -2, "format");
  lua_pop(L, 1);
  lua_pushcfunction(L, det_tostring); lua_setglobal(L, "tostring");
  lua_pushcfunction(L, mw__lua_sorted_pairs); lua_setglobal(L, "pairs");
  lua_pushcfunction(L, mw__lua_sorted_next); lua_setglobal(L, "next");
  mw__ljson_init(L);
  lua_newtable(L);
  lua_pushlightuserdata(L, NULL); lua_setfield(L, -2, "null");
  lua_pushcfunction(L, json_array); lua_setfield(L, -2, "array");
  lua_pushcfunction(L, json_object); lua_setfield(L, -2, "object");
  lua_setglobal(L, "json");
  return 0;
}

/* Message handler: keeps non-string error objects readable, adds a traceback. */
/* The message handler of every protected call into Lua (fold.c, tenant.c):
 * copes with non-string error objects and keeps the traceback. */
int mw__lua_msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) msg = lua_tostring(L, -1);
    else msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Calls the function under it with nargs, protected and under the budget;
 * leaves nres results or an error message. */
static int budget_call(mw_fold *f, int nargs, int nres) {
  lua_State *L = f->L;
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, mw__lua_msgh);
  lua_insert(L, base);
  f->used = 0;
  f->over = 0;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  int rc = lua_pcall(L, nargs, nres, base);
  lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  if (rc == LUA_OK && f->over) {
    lua_pop(L, nres);
    lua_pushstring(L, "fold ran past its instruction budget");
    rc = LUA_ERRRUN;
  }
  return rc;
}

int mw_fold_open_source(const char *name, const char *src, size_t len, const mw_fold_opts *opts,
                        mw_fold **out, char *err, size_t errlen) {
  *out = NULL;
  mw_fold *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, errlen, "out of memory");
    return MW_ENOMEM;
  }
  f->budget = opts && opts->budget > 0 ? opts->budget : DEFAULT_BUDGET;
  f->mem_limit = opts && opts->mem_limit > 0 ? opts->mem_limit : DEFAULT_MEM;
  f->fn_ref = f->init_ref = LUA_NOREF;
  unsigned char h[32];
  mw__sha256(src, len, h);
  mw__hex(h, 32, f->fingerprint);
  f->L = lua_newstate(fold_alloc, f);
  if (!f->L) {
    free(f);
    snprintf(err, errlen, "out of memory");
    return MW_ENOMEM;
  }
  lua_State *L = f->L;
  char chunk[300];
  snprintf(chunk, sizeof chunk, "@%s", name);
  lua_pushcfunction(L, open_sandbox);   /* protected: opening libraries allocates */
  int rc = lua_pcall(L, 0, 0, 0);
  if (rc == LUA_OK) rc = luaL_loadbufferx(L, src, len, chunk, "t");
  if (rc == LUA_OK) rc = budget_call(f, 0, 1);
  if (rc != LUA_OK) {
    snprintf(err, errlen, "fold %s: %s", name, lua_tostring(L, -1));
    mw_fold_close(f);
    return MW_EFOLD;
  }
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "initial");
    if (lua_isfunction(L, -1)) f->init_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    else lua_pop(L, 1);
    lua_getfield(L, -1, "fold");
    lua_remove(L, -2);
  }
  if (!lua_isfunction(L, -1)) {
    snprintf(err, errlen, "fold %s must return a function or a table with a 'fold' function", name);
    mw_fold_close(f);
    return MW_EFOLD;
  }
  f->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  *out = f;
  return 0;
}

int mw_fold_open(const char *path, const mw_fold_opts *opts, mw_fold **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    snprintf(err, errlen, "cannot read fold %s", path);
    return MW_ENOENT;
  }
  mw_buf b = {0};
  char chunk[8192];
  size_t n;
  int rc = 0;
  while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
    if ((rc = mw__buf_add(&b, chunk, n))) break;
  fclose(fp);
  if (!rc) rc = mw_fold_open_source(path, b.p ? b.p : "", b.len, opts, out, err, errlen);
  else snprintf(err, errlen, "out of memory");
  mw__buf_free(&b);
  return rc;
}

void mw_fold_close(mw_fold *f) {
  if (!f) return;
  if (f->L) lua_close(f->L);
  free(f);
}

const char *mw_fold_fingerprint(const mw_fold *f) { return f->fingerprint; }

/* ---- replay --------------------------------------------------------------- */

typedef struct replay {
  mw_fold *f;
  mw_store *s;
  int64_t stream, ckpt_at, saved;
  int state_idx;           /* absolute stack slot of the current state */
  const mw_entry *e;
  mw_buf *out;
  int rc;
  char *err;
  size_t errlen;
} replay;

/* [-0, +1] step(r, state) folds r->e into state and returns the new state;
 * runs inside lua_pcall. */
static int step(lua_State *L) {
  replay *r = lua_touserdata(L, 1);
  const mw_entry *e = r->e;
  char jerr[200];
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->f->fn_ref);
  lua_pushvalue(L, 2);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, e->cursor); lua_setfield(L, -2, "cursor");
  lua_pushinteger(L, e->ts); lua_setfield(L, -2, "ts");
  lua_pushstring(L, e->kind); lua_setfield(L, -2, "kind");
  if (mw__ljson_decode(L, e->body, e->body_len, jerr, sizeof jerr))
    return luaL_error(L, "entry %I body: %s", (lua_Integer)e->cursor, jerr);
  lua_setfield(L, -2, "body");
  lua_call(L, 2, 1);
  if (lua_isnil(L, -1)) lua_pushvalue(L, 2);   /* nil: changed in place */
  return 1;
}

/* [-0, +1] encode_state(r, state) encodes state into r->out and returns it;
 * runs inside lua_pcall. */
static int encode_state(lua_State *L) {
  replay *r = lua_touserdata(L, 1);
  char jerr[200];
  r->out->len = 0;
  if (mw__ljson_encode(L, 2, r->out, jerr, sizeof jerr))
    return luaL_error(L, "state cannot be encoded: %s", jerr);
  lua_settop(L, 2);
  return 1;
}

/* Calls fn(r, state) protected; on success the state slot takes its result,
 * on failure the error message is left on the stack. */
static int protected(replay *r, lua_CFunction fn) {
  lua_State *L = r->f->L;
  lua_pushcfunction(L, fn);
  lua_pushlightuserdata(L, r);
  lua_pushvalue(L, r->state_idx);
  int rc = budget_call(r->f, 2, 1);
  if (rc == LUA_OK) lua_replace(L, r->state_idx);
  return rc;
}

static int on_entry(void *ud, const mw_entry *e) {
  replay *r = ud;
  r->e = e;
  if (protected(r, step) != LUA_OK) {
    snprintf(r->err, r->errlen, "fold failed at cursor %lld: %s", (long long)e->cursor,
             lua_tostring(r->f->L, -1));
    lua_pop(r->f->L, 1);
    r->rc = MW_EFOLD;
    return -1;
  }
  if (r->ckpt_at > 0 && e->cursor == r->ckpt_at) {
    if (protected(r, encode_state) != LUA_OK) {
      snprintf(r->err, r->errlen, "fold at cursor %lld: %s", (long long)e->cursor,
               lua_tostring(r->f->L, -1));
      lua_pop(r->f->L, 1);
      r->rc = MW_EFOLD;
      return -1;
    }
    mw_snapshot c = {0};
    c.cursor = e->cursor;
    c.state = r->out->p;
    c.state_len = r->out->len;
    snprintf(c.fold, sizeof c.fold, "%s", r->f->fingerprint);
    if (mw_snapshot_put(r->s, r->stream, &c) == 0) r->saved++;
  }
  return 0;
}

/* [-0, +1] Pushes the starting state: decoded, or the fold's initial one. */
static int push_start(lua_State *L) {
  replay *r = lua_touserdata(L, 1);
  const char *state = lua_touserdata(L, 2);
  size_t len = (size_t)lua_tointeger(L, 3);
  char jerr[200];
  if (state) {
    if (mw__ljson_decode(L, state, len, jerr, sizeof jerr))
      return luaL_error(L, "starting state: %s", jerr);
  } else if (r->f->init_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->f->init_ref);
    lua_call(L, 0, 1);
  } else {
    lua_newtable(L);
    luaL_setmetatable(L, "mw.object");
  }
  return 1;
}

int mw_fold_replay(mw_fold *f, mw_store *s, int64_t stream, const char *state, size_t state_len,
                   int64_t from, int64_t to, int64_t ckpt_at, mw_buf *out,
                   int64_t *checkpoints_saved, char *err, size_t errlen) {
  if (checkpoints_saved) *checkpoints_saved = 0;
  if (state && to <= from) {
    /* Nothing to fold: a verified canonical state is already the answer.
     * Decoding it into Lua and encoding it back gives the same bytes. */
    out->len = 0;
    if (mw__buf_add(out, state, state_len)) {
      snprintf(err, errlen, "out of memory");
      return MW_ENOMEM;
    }
    return 0;
  }
  lua_State *L = f->L;
  int top = lua_gettop(L);
  replay r = {f, s, stream, ckpt_at, 0, 0, NULL, out, 0, err, errlen};
  lua_pushcfunction(L, push_start);
  lua_pushlightuserdata(L, &r);
  lua_pushlightuserdata(L, (void *)state);
  lua_pushinteger(L, (lua_Integer)state_len);
  if (budget_call(f, 3, 1) != LUA_OK) {
    snprintf(err, errlen, "fold: %s", lua_tostring(L, -1));
    lua_settop(L, top);
    return MW_EFOLD;
  }
  r.state_idx = lua_gettop(L);
  int rc = 0;
  if (to > from) {
    rc = mw_log_read(s, stream, from + 1, to - from, on_entry, &r);
    if (rc && !r.rc) snprintf(err, errlen, "%s", mw_store_errmsg(s));
    if (r.rc) rc = r.rc;
  }
  if (!rc && protected(&r, encode_state) != LUA_OK) {
    snprintf(err, errlen, "fold: %s", lua_tostring(L, -1));
    rc = MW_EFOLD;
  }
  if (checkpoints_saved) *checkpoints_saved = r.saved;
  lua_settop(L, top);
  lua_gc(L, LUA_GCSTEP, 0);
  return rc;
}
