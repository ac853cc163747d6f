/* lmw.c -- the Lua module `mw` (build/mw.so, and the same code inside the
 * host): the home, its log streams, folds, snapshots and canonical JSON.
 * Misuse raises; failures the caller must handle return nil, message, code
 * (code is the status name, e.g. "ECONFLICT").  Userdata are born closed and
 * every method rejects a closed object. */
#include "mw.h"
#include "buf.h"
#include "chain.h"
#include "json.h"
#include "ljson.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#define HOME_T "mw.home"
#define LOG_T "mw.log"
#define FOLD_T "mw.fold"
#define HOST_T "mw.host"

typedef struct { mw_store *s; } lhome;
typedef struct { int64_t stream; char tenant[65], actor[65]; } llog;   /* uservalue 1: its home */
typedef struct { mw_fold *f; } lfold;
typedef struct { mw_engine *e; } lhost;

/* [-0, +3] nil, message, code name */
static int failure(lua_State *L, int code, const char *msg) {
  luaL_pushfail(L);
  lua_pushstring(L, msg && *msg ? msg : mw_strerror(code));
  lua_pushstring(L, mw_err_name(code));
  return 3;
}

/* A string argument C can take whole: NULL when it has an embedded NUL, which
 * would cut it short ("arc\0x" must not name the actor "arc").  Raises when
 * the argument is not a string. */
static const char *cstr_arg(lua_State *L, int idx) {
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  return strlen(s) == n ? s : NULL;
}

/* ---- JSON ------------------------------------------------------------------ */

/* Appends the JSON of argument idx: a string is JSON text (canonicalised),
 * anything else a Lua value encoded canonically.  Raises nothing. */
static int arg_json(lua_State *L, int idx, mw_buf *b, char *err, size_t errlen) {
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    return mw__json_canon(s, n, b, err, errlen);
  }
  return mw__ljson_encode(L, idx, b, err, errlen);
}

static int push_buf(lua_State *L, mw_buf *b) {
  lua_pushlstring(L, b->p ? b->p : "", b->len);
  mw__buf_free(b);
  return 1;
}

/* mw.json.encode(value) -> canonical text | nil, msg, code */
static int json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  mw_buf b = {0};
  char err[256];
  int rc = mw__ljson_encode(L, 1, &b, err, sizeof err);
  if (rc) {
    mw__buf_free(&b);
    return failure(L, rc, err);
  }
  return push_buf(L, &b);
}

/* mw.json.canonical(text) -> canonical text | nil, msg, code */
static int json_canonical(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  mw_buf b = {0};
  char err[256];
  int rc = mw__json_canon(s, n, &b, err, sizeof err);
  if (rc) {
    mw__buf_free(&b);
    return failure(L, rc, err);
  }
  return push_buf(L, &b);
}

/* mw.json.decode(text) -> value | nil, msg, code.  Arrays and objects keep
 * their kind through the metatables mw.array / mw.object. */
static int json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  char err[256];
  int rc = mw__ljson_decode(L, s, n, err, sizeof err);
  return rc ? failure(L, rc, err) : 1;
}

static int json_mark(lua_State *L, const char *mt) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, mt);
  return 1;
}
static int json_array(lua_State *L) { return json_mark(L, "mw.array"); }
static int json_object(lua_State *L) { return json_mark(L, "mw.object"); }

/* mw.sha256(s) -> hex */
static int l_sha256(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char h[32];
  char hex[65];
  mw__sha256(s, n, h);
  mw__hex(h, 32, hex);
  lua_pushstring(L, hex);
  return 1;
}

/* mw.valid_id(s) -> boolean */
static int l_valid_id(lua_State *L) {
  lua_pushboolean(L, lua_type(L, 1) == LUA_TSTRING && cstr_arg(L, 1) && mw_valid_id(lua_tostring(L, 1)));
  return 1;
}

/* ---- home ------------------------------------------------------------------ */

static mw_store *tohome(lua_State *L, int idx) {
  lhome *h = luaL_checkudata(L, idx, HOME_T);
  if (!h->s) luaL_error(L, "attempt to use a closed home");
  return h->s;
}

/* mw.open(dir [, {create = bool, readonly = bool}]) -> home | nil, msg, code */
static int l_open(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  int flags = 0;
  if (lua_istable(L, 2)) {
    if (lua_getfield(L, 2, "create"), lua_toboolean(L, -1)) flags |= MW_STORE_CREATE;
    if (lua_getfield(L, 2, "readonly"), lua_toboolean(L, -1)) flags |= MW_STORE_READONLY;
    lua_pop(L, 2);
  }
  lhome *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->s = NULL;   /* born closed: a failed open leaves nothing to free */
  luaL_setmetatable(L, HOME_T);
  char err[512];
  int rc = mw_store_open(dir, flags, &h->s, err, sizeof err);
  return rc ? failure(L, rc, err) : 1;
}

static int home_close(lua_State *L) {
  lhome *h = luaL_checkudata(L, 1, HOME_T);
  mw_store_close(h->s);
  h->s = NULL;
  return 0;
}

static int home_tostring(lua_State *L) {
  lhome *h = luaL_checkudata(L, 1, HOME_T);
  if (h->s) lua_pushfstring(L, "mw.home (%s)", mw_store_home(h->s));
  else lua_pushliteral(L, "mw.home (closed)");
  return 1;
}

/* home:log(tenant, actor [, create=true]) -> log | nil, msg, code */
static int home_log(lua_State *L) {
  mw_store *s = tohome(L, 1);
  const char *tenant = cstr_arg(L, 2), *actor = cstr_arg(L, 3);
  if (!tenant || !actor) return failure(L, MW_EINVAL, tenant ? "invalid actor id" : "invalid tenant name");
  int create = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
  int64_t id;
  int rc = mw_store_stream(s, tenant, actor, create, &id);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  llog *g = lua_newuserdatauv(L, sizeof *g, 1);
  g->stream = id;
  snprintf(g->tenant, sizeof g->tenant, "%s", tenant);
  snprintf(g->actor, sizeof g->actor, "%s", actor);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  luaL_setmetatable(L, LOG_T);
  return 1;
}

/* home:fold(path) or home:fold{source = text, name = "..."} -> fold | nil, msg, code */
static int home_fold(lua_State *L) {
  tohome(L, 1);
  mw_fold_opts o = {0};
  const char *path = NULL, *src = NULL, *name = "fold";
  size_t len = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "source");
    src = luaL_optlstring(L, -1, NULL, &len);
    lua_getfield(L, 2, "name");
    name = luaL_optstring(L, -1, name);
    lua_getfield(L, 2, "path");
    path = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 2, "budget");
    o.budget = luaL_optinteger(L, -1, 0);
    lua_pop(L, 4);
  } else {
    path = luaL_checkstring(L, 2);
  }
  if (!src && !path) return luaL_argerror(L, 2, "a path or {source = text}");
  lfold *f = lua_newuserdatauv(L, sizeof *f, 0);
  f->f = NULL;
  luaL_setmetatable(L, FOLD_T);
  char err[1024];
  int rc = src ? mw_fold_open_source(name, src, len, &o, &f->f, err, sizeof err)
               : mw_fold_open(path, &o, &f->f, err, sizeof err);
  return rc ? failure(L, rc, err) : 1;
}

/* home:token_create(tenant, role) -> token | nil, msg, code */
static int home_token_create(lua_State *L) {
  mw_store *s = tohome(L, 1);
  char tok[68];
  const char *tenant = cstr_arg(L, 2), *role = cstr_arg(L, 3);
  if (!tenant || !role) return failure(L, MW_EINVAL, tenant ? "invalid role" : "invalid tenant name");
  int rc = mw_token_create(s, tenant, role, tok);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_pushstring(L, tok);
  return 1;
}

static int home_token_revoke(lua_State *L) {
  mw_store *s = tohome(L, 1);
  const char *tok = cstr_arg(L, 2);
  if (!tok) return failure(L, MW_ENOENT, "no such token");
  int rc = mw_token_revoke(s, tok);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_pushboolean(L, 1);
  return 1;
}

/* home:token_lookup(token) -> tenant, role | nil, msg, code */
static int home_token_lookup(lua_State *L) {
  mw_store *s = tohome(L, 1);
  char tenant[65], role[16];
  const char *tok = cstr_arg(L, 2);
  if (!tok) return failure(L, MW_EAUTH, "unknown token");
  int rc = mw_token_lookup(s, tok, tenant, role);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_pushstring(L, tenant);
  lua_pushstring(L, role);
  return 2;
}

/* home:retention(heads, checkpoints) */
static int home_retention(lua_State *L) {
  mw_store *s = tohome(L, 1);
  mw_store_retention(s, (int)luaL_checkinteger(L, 2), (int)luaL_checkinteger(L, 3));
  return 0;
}

/* ---- fold ------------------------------------------------------------------ */

static mw_fold *tofold(lua_State *L, int idx) {
  lfold *f = luaL_checkudata(L, idx, FOLD_T);
  if (!f->f) luaL_error(L, "attempt to use a closed fold");
  return f->f;
}

static int fold_close(lua_State *L) {
  lfold *f = luaL_checkudata(L, 1, FOLD_T);
  mw_fold_close(f->f);
  f->f = NULL;
  return 0;
}

static int fold_fingerprint(lua_State *L) {
  lua_pushstring(L, mw_fold_fingerprint(tofold(L, 1)));
  return 1;
}

/* ---- log ------------------------------------------------------------------- */

/* Checks the log at idx and returns its store (raises when the home is closed). */
static mw_store *tolog(lua_State *L, int idx, llog **out) {
  llog *g = luaL_checkudata(L, idx, LOG_T);
  lua_getiuservalue(L, idx, 1);
  lhome *h = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!h || !h->s) luaL_error(L, "attempt to use a log of a closed home");
  *out = g;
  return h->s;
}

static int64_t opt_expect(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return MW_ANY;
  lua_Integer e = luaL_checkinteger(L, idx);
  luaL_argcheck(L, e >= 0, idx, "expected cursor must be >= 0");
  return e;
}

/* Appends n items whose bodies are in bufs; shared by append and append_batch. */
static int do_append(lua_State *L, mw_store *s, llog *g, mw_append *items, size_t n, int64_t expect) {
  int64_t last;
  int rc = mw_log_append(s, g->stream, items, n, expect, &last);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_pushinteger(L, last);
  return 1;
}

/* log:append(kind, body [, expect]) -> cursor | nil, msg, code */
static int log_append(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  const char *kind = cstr_arg(L, 2);
  luaL_checkany(L, 3);
  int64_t expect = opt_expect(L, 4);
  if (!kind) return failure(L, MW_EINVAL, "invalid entry kind");
  mw_buf b = {0};
  char err[256];
  int rc = arg_json(L, 3, &b, err, sizeof err);
  if (rc) {
    mw__buf_free(&b);
    return failure(L, rc, err);
  }
  mw_append it = {kind, b.p, b.len, 1};   /* arg_json made it canonical */
  int nres = do_append(L, s, g, &it, 1, expect);
  mw__buf_free(&b);
  return nres;
}

/* log:append_batch({{kind, body}, ...} [, expect]) -> last cursor | nil, msg, code */
static int log_append_batch(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  luaL_checktype(L, 2, LUA_TTABLE);
  int64_t expect = opt_expect(L, 3);
  size_t n = (size_t)lua_rawlen(L, 2);
  if (n == 0) return luaL_argerror(L, 2, "empty batch");
  mw_append *items = lua_newuserdatauv(L, n * sizeof *items, 0);   /* freed by the GC */
  mw_buf *bufs = lua_newuserdatauv(L, n * sizeof *bufs, 0);
  memset(bufs, 0, n * sizeof *bufs);
  char err[256];
  int rc = 0;
  size_t i;
  for (i = 0; i < n && !rc; i++) {
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    if (!lua_istable(L, -1)) {
      rc = MW_EINVAL;
      snprintf(err, sizeof err, "batch item %zu is not a {kind, body} table", i + 1);
    } else {
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      /* a string, so it stays referenced by the caller's batch table */
      items[i].kind = lua_type(L, -2) == LUA_TSTRING ? cstr_arg(L, lua_gettop(L) - 1) : NULL;
      if (!items[i].kind) {
        rc = MW_EINVAL;
        snprintf(err, sizeof err, "batch item %zu has no kind", i + 1);
      } else if ((rc = arg_json(L, lua_gettop(L), &bufs[i], err, sizeof err)) == 0) {
        items[i].body = bufs[i].p;
        items[i].body_len = bufs[i].len;
        items[i].canonical = 1;
      }
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
  }
  int nres = rc ? failure(L, rc, err) : do_append(L, s, g, items, n, expect);
  for (size_t j = 0; j < n; j++) mw__buf_free(&bufs[j]);
  return nres;
}

typedef struct { lua_State *L; int t; lua_Integer n; } readctx;

static int push_entry(void *ud, const mw_entry *e) {
  readctx *c = ud;
  lua_State *L = c->L;
  char hex[65];
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, e->cursor); lua_setfield(L, -2, "cursor");
  lua_pushinteger(L, e->ts); lua_setfield(L, -2, "ts");
  lua_pushstring(L, e->kind); lua_setfield(L, -2, "kind");
  lua_pushlstring(L, e->body, e->body_len); lua_setfield(L, -2, "body");
  mw__hex(e->hash, 32, hex); lua_pushstring(L, hex); lua_setfield(L, -2, "hash");
  mw__hex(e->prev, 32, hex); lua_pushstring(L, hex); lua_setfield(L, -2, "prev");
  lua_rawseti(L, c->t, ++c->n);
  return 0;
}

/* log:read([from=1 [, limit=all]]) -> { {cursor, ts, kind, body, hash, prev}, ... } */
static int log_read(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  lua_Integer from = luaL_optinteger(L, 2, 1), limit = luaL_optinteger(L, 3, -1);
  lua_settop(L, 3);
  lua_newtable(L);
  readctx c = {L, lua_gettop(L), 0};
  /* push_entry runs inside SQLite's iteration; only a Lua memory error can
   * raise there, and it costs one prepared statement, reclaimed at close. */
  int rc = mw_log_read(s, g->stream, from, limit, push_entry, &c);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  return 1;
}

/* log:head() -> cursor, hash (hex) */
static int log_head(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  int64_t c;
  unsigned char h[32];
  char hex[65];
  int rc = mw_log_head(s, g->stream, &c, h);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  mw__hex(h, 32, hex);
  lua_pushinteger(L, c);
  lua_pushstring(L, hex);
  return 2;
}

/* log:verify() -> true | nil, msg, "EBROKEN", bad_cursor */
static int log_verify(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  int64_t bad = 0;
  int rc = mw_log_verify(s, g->stream, &bad);
  if (rc == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  failure(L, rc, mw_store_errmsg(s));
  lua_pushinteger(L, bad);
  return 4;
}

static void set_str(lua_State *L, const char *k, const char *v) {
  if (v && *v) lua_pushstring(L, v); else lua_pushnil(L);
  lua_setfield(L, -2, k);
}

/* log:hydrate(fold [, {from_snapshot=, to=, checkpoint_every=}]) ->
 *   state_json, info | nil, msg, code, info */
static int log_hydrate(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  mw_fold *f = tofold(L, 2);
  mw_hydrate_opts o = {.to = -1};
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "from_snapshot");
    o.from_snapshot = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 3, "to");
    o.to = luaL_optinteger(L, -1, -1);
    lua_getfield(L, 3, "checkpoint_every");
    o.ckpt_every = luaL_optinteger(L, -1, 0);
    lua_getfield(L, 3, "replay");
    o.replay = lua_toboolean(L, -1);
    lua_pop(L, 4);   /* the from_snapshot string stays referenced by the table */
  }
  mw_buf b = {0};
  mw_hydrated h = {.state = &b};
  char err[1024];
  int rc = mw_hydrate(s, f, g->stream, &o, &h, err, sizeof err);
  int n;
  if (rc) {
    mw__buf_free(&b);
    n = failure(L, rc, err);
  } else {
    push_buf(L, &b);
    n = 1;
  }
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, h.cursor); lua_setfield(L, -2, "cursor");
  lua_pushinteger(L, h.replayed); lua_setfield(L, -2, "replayed");
  lua_pushinteger(L, h.head_cursor); lua_setfield(L, -2, "head_cursor");
  lua_pushboolean(L, h.refolded); lua_setfield(L, -2, "refolded");
  lua_pushinteger(L, h.checkpoints_failed); lua_setfield(L, -2, "checkpoints_failed");
  lua_pushinteger(L, h.checkpoints_saved); lua_setfield(L, -2, "checkpoints_saved");
  set_str(L, "head_id", h.head_id);
  set_str(L, "start_id", h.start_id);
  set_str(L, "snapshot_id", h.bad_id);
  set_str(L, "last_safe_snapshot_id", h.last_safe_id);
  return n + 1;
}

/* log:replay(fold, to) -> state_json, info: the state at cursor `to`. */
static int log_replay(lua_State *L) {
  lua_Integer to = luaL_checkinteger(L, 3);
  luaL_argcheck(L, to >= 0, 3, "cursor must be >= 0");
  lua_settop(L, 2);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, to);
  lua_setfield(L, -2, "to");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "replay");
  return log_hydrate(L);
}

/* log:snapshot(fold [, {head = true}]) -> id, cursor | nil, msg, code
 * Snapshots the state at the log's last cursor (hydrated first, as a wake
 * does); head = true makes it the head, else it is a checkpoint. */
static int log_snapshot(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  mw_fold *f = tofold(L, 2);
  int head = 0;
  mw_buf b = {0};
  mw_snapshot snap = {0};
  char err[1024];
  int rc = 0;
  if (lua_istable(L, 3)) {
    head = (lua_getfield(L, 3, "head"), lua_toboolean(L, -1));
    lua_pop(L, 1);
  }
  mw_hydrated h = {.state = &b};
  mw_hydrate_opts o = {.to = -1, .ckpt_every = -1};
  rc = mw_hydrate(s, f, g->stream, &o, &h, err, sizeof err);
  if (rc) {
    mw__buf_free(&b);
    return failure(L, rc, err);
  }
  snap.cursor = h.cursor;
  snap.state = b.p;
  snap.state_len = b.len;
  snap.is_head = head;
  snprintf(snap.fold, sizeof snap.fold, "%s", mw_fold_fingerprint(f));
  rc = mw_snapshot_put(s, g->stream, &snap);
  mw__buf_free(&b);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_pushstring(L, snap.id);
  lua_pushinteger(L, snap.cursor);
  return 2;
}

typedef struct { lua_State *L; int t; lua_Integer n; const char *head; } snapctx;

static int push_snapshot(void *ud, const mw_snapshot *p) {
  snapctx *c = ud;
  lua_State *L = c->L;
  char hex[65];
  lua_createtable(L, 0, 8);
  lua_pushstring(L, p->id); lua_setfield(L, -2, "snapshot_id");
  lua_pushinteger(L, p->cursor); lua_setfield(L, -2, "cursor");
  mw__hex(p->state_hash, 32, hex); lua_pushstring(L, hex); lua_setfield(L, -2, "state_hash");
  lua_pushstring(L, p->fold); lua_setfield(L, -2, "fold");
  lua_pushinteger(L, p->created_at); lua_setfield(L, -2, "created_at");
  lua_pushboolean(L, p->safe); lua_setfield(L, -2, "safe");
  lua_pushboolean(L, strcmp(p->id, c->head) == 0); lua_setfield(L, -2, "head");
  lua_pushstring(L, p->is_head ? "head" : "checkpoint"); lua_setfield(L, -2, "kind");
  lua_rawseti(L, c->t, ++c->n);
  return 0;
}

/* log:snapshots() -> { {snapshot_id, cursor, state_hash, fold, created_at, safe, head, kind}, ... } */
static int log_snapshots(lua_State *L) {
  llog *g;
  mw_store *s = tolog(L, 1, &g);
  char head[40];
  int rc = mw_snapshot_head(s, g->stream, head);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  lua_newtable(L);
  snapctx c = {L, lua_gettop(L), 0, head};
  rc = mw_snapshot_list(s, g->stream, push_snapshot, &c);
  if (rc) return failure(L, rc, mw_store_errmsg(s));
  return 1;
}

static int log_tostring(lua_State *L) {
  llog *g = luaL_checkudata(L, 1, LOG_T);
  lua_pushfstring(L, "mw.log (%s/%s)", g->tenant, g->actor);
  return 1;
}


/* ---- an in-process host: the engine without HTTP ---------------------------------
 * For tests of skills and for embedders: the same calls the HTTP API makes,
 * answered synchronously (the engine's own loop runs until each answers). */

static mw_engine *tohost(lua_State *L, int idx) {
  lhost *h = luaL_checkudata(L, idx, HOST_T);
  if (!h->e) luaL_error(L, "attempt to use a closed host");
  return h->e;
}

/* mw.host{home = dir, scripts = dir?, skills = dir?, session_ttl_ms = n?,
 *         skill_time_ms = n?, checkpoint_every = n?} -> host | nil, msg, code */
static int l_host(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  mw_engine_opts o = {0};
  lua_getfield(L, 1, "home");
  o.home = luaL_checkstring(L, -1);
  lua_getfield(L, 1, "scripts");
  o.scripts_dir = luaL_optstring(L, -1, NULL);
  lua_getfield(L, 1, "skills");
  o.skills_dir = luaL_optstring(L, -1, NULL);
  lua_getfield(L, 1, "session_ttl_ms");
  o.session_ttl_ms = luaL_optinteger(L, -1, 0);
  lua_getfield(L, 1, "skill_time_ms");
  o.skill_time_ms = luaL_optinteger(L, -1, 0);
  lua_getfield(L, 1, "checkpoint_every");
  o.checkpoint_every = luaL_optinteger(L, -1, 0);
  lua_pop(L, 6);   /* the strings stay referenced by the options table */
  lhost *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->e = NULL;
  luaL_setmetatable(L, HOST_T);
  char err[1024];
  int rc = mw_engine_open(&o, &h->e, err, sizeof err);
  return rc ? failure(L, rc, err) : 1;
}

static int host_close(lua_State *L) {
  lhost *h = luaL_checkudata(L, 1, HOST_T);
  mw_engine_close(h->e);
  h->e = NULL;
  return 0;
}

/* host:call(name, body [, {tenant =, role =, actor =, skill =, query =}])
 *   -> status, decoded answer, raw answer.  name: wake, load, run, sleep,
 *   navigate, skill, log, snapshots, replay, direction, status. */
static int host_call(lua_State *L) {
  mw_engine *e = tohost(L, 1);
  static const char *const names[] = {"wake", "load", "run", "sleep", "navigate", "skill", "log", "snapshots",
                                      "replay", "direction", "status", NULL};
  static const mw_call_fn fns[] = {mw_wake, mw_load, mw_run, mw_sleep, mw_navigate, mw_actor_skill, mw_actor_log,
                                   mw_actor_snapshots, mw_actor_replay, mw_actor_direction, mw_status};
  int which = luaL_checkoption(L, 2, NULL, names);
  mw_call c = {.tenant = "default", .role = "operator"};
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "tenant");
    c.tenant = luaL_optstring(L, -1, c.tenant);
    lua_getfield(L, 4, "role");
    c.role = luaL_optstring(L, -1, c.role);
    lua_getfield(L, 4, "actor");
    c.actor = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 4, "skill");
    c.skill = luaL_optstring(L, -1, NULL);
    lua_getfield(L, 4, "query");
    c.query = luaL_optstring(L, -1, NULL);
    lua_pop(L, 5);
  }
  mw_buf b = {0};
  char err[256];
  if (!lua_isnoneornil(L, 3)) {
    int rc = arg_json(L, 3, &b, err, sizeof err);
    if (rc) {
      mw__buf_free(&b);
      return failure(L, rc, err);
    }
    c.body = b.p;
    c.body_len = b.len;
  }
  int status = 0;
  char *body = NULL;
  size_t len = 0;
  int rc = mw_call_sync(e, fns[which], &c, &status, &body, &len);
  mw__buf_free(&b);
  if (rc) return failure(L, rc, mw_strerror(rc));
  lua_pushinteger(L, status);
  if (mw__ljson_decode(L, body, len, err, sizeof err)) lua_pushnil(L);
  lua_pushlstring(L, body, len);
  free(body);
  return 3;
}

static const luaL_Reg host_methods[] = {
  {"call", host_call}, {"close", host_close}, {NULL, NULL}
};

static const luaL_Reg json_funcs[] = {
  {"encode", json_encode}, {"decode", json_decode}, {"canonical", json_canonical},
  {"array", json_array}, {"object", json_object}, {NULL, NULL}
};

static const luaL_Reg mw_funcs[] = {
  {"open", l_open}, {"host", l_host}, {"sha256", l_sha256}, {"valid_id", l_valid_id},
  {"array", json_array}, {"object", json_object}, {NULL, NULL}
};

static const luaL_Reg home_methods[] = {
  {"log", home_log}, {"fold", home_fold}, {"token_create", home_token_create},
  {"token_revoke", home_token_revoke}, {"token_lookup", home_token_lookup},
  {"retention", home_retention}, {"close", home_close}, {NULL, NULL}
};

static const luaL_Reg log_methods[] = {
  {"append", log_append}, {"append_batch", log_append_batch}, {"read", log_read},
  {"head", log_head}, {"verify", log_verify}, {"hydrate", log_hydrate},
  {"replay", log_replay}, {"snapshot", log_snapshot}, {"snapshots", log_snapshots},
  {NULL, NULL}
};

static const luaL_Reg fold_methods[] = {
  {"fingerprint", fold_fingerprint}, {"close", fold_close}, {NULL, NULL}
};

static void new_type(lua_State *L, const char *name, const luaL_Reg *methods,
                     lua_CFunction gc, lua_CFunction tostr) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  if (gc) {
    lua_pushcfunction(L, gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gc); lua_setfield(L, -2, "__close");
  }
  if (tostr) {
    lua_pushcfunction(L, tostr);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

int luaopen_mw(lua_State *L) {
  mw__ljson_init(L);
  new_type(L, HOME_T, home_methods, home_close, home_tostring);
  new_type(L, LOG_T, log_methods, NULL, log_tostring);
  new_type(L, FOLD_T, fold_methods, fold_close, NULL);
  new_type(L, HOST_T, host_methods, host_close, NULL);
  luaL_newlib(L, mw_funcs);
  luaL_newlib(L, json_funcs);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lua_setfield(L, -2, "json");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lua_pushliteral(L, "0.1.0");
  lua_setfield(L, -2, "version");
  return 1;
}

/* [-0, +1] Pushes a fresh `json` table (encode, decode, canonical, array,
 * object, null) for sandboxes that must not see the rest of the module. */
int mw__lua_open_json(lua_State *L) {
  mw__ljson_init(L);
  lua_newtable(L);
  luaL_setfuncs(L, json_funcs, 0);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
