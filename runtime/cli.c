/* cli.c -- the `mw` command line: init, token, log verify, replay (and the
 * entry to serve).  Every command exits non-zero with a message on stderr on
 * failure; nothing here writes anything it did not fully validate first. */
#include "mw.h"
#include "buf.h"
#include "cli.h"
#include "jfield.h"
#include "json.h"
#include "cortex.h"
#include "facts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MW_SCRIPTS_DIR
#define MW_SCRIPTS_DIR "scripts"
#endif

typedef struct opts {
  const char *home, *tenant, *actor, *role, *token, *listen;
  int64_t to;
  int json, help, have_to;
  const char *rest[8];
  int nrest;
} opts;

static int usage_error(const char *cmd, const char *msg) {
  fprintf(stderr, "mw %s: %s\n(see mw %s --help)\n", cmd, msg, cmd);
  return 2;
}

static int parse(const char *cmd, int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->home = getenv("MW_HOME");
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { o->help = 1; continue; }
    if (!strcmp(a, "--json")) { o->json = 1; continue; }
    if (!strcmp(a, "--home")) slot = &o->home;
    else if (!strcmp(a, "--tenant")) slot = &o->tenant;
    else if (!strcmp(a, "--actor")) slot = &o->actor;
    else if (!strcmp(a, "--role")) slot = &o->role;
    else if (!strcmp(a, "--token")) slot = &o->token;
    else if (!strcmp(a, "--listen")) slot = &o->listen;
    else if (!strcmp(a, "--to")) {
      if (i + 1 >= argc) return usage_error(cmd, "--to needs a cursor");
      char *end;
      long long v = strtoll(argv[++i], &end, 10);
      if (*end || v < 0 || end == argv[i]) return usage_error(cmd, "--to needs a cursor >= 0");
      o->to = v;
      o->have_to = 1;
      continue;
    } else if (a[0] == '-' && a[1] == '-') {
      fprintf(stderr, "mw %s: unknown option %s\n", cmd, a);
      return 2;
    } else {
      if (o->nrest >= 8) return usage_error(cmd, "too many arguments");
      o->rest[o->nrest++] = a;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "mw %s: %s needs a value\n", cmd, a);
      return 2;
    }
    *slot = argv[++i];
  }
  return 0;
}

static int need_home(const char *cmd, const opts *o) {
  if (o->home && *o->home) return 0;
  return usage_error(cmd, "no home: pass --home DIR or set MW_HOME");
}

/* Opens the home or says why not; 0 or exit status. */
static int open_home(const char *cmd, const char *home, mw_store **s) {
  char err[512];
  int rc = mw_store_open(home, 0, s, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mw %s: %s\n", cmd, err);
    return 1;
  }
  return 0;
}

/* The Cortex is mandatory at install: every tenant gets its file when it is
 * created.  0, or 1 with a message. */
static int make_cortex(const char *cmd, const char *home, const char *tenant) {
  char path[4200], err[512];
  snprintf(path, sizeof path, "%s/tenants/%s/cortex.db", home, tenant);
  mw_cortex *cx;
  if (mw_cortex_open(path, 1, 1000, &cx, err, sizeof err)) {
    fprintf(stderr, "mw %s: cannot create the Cortex of tenant %s: %s\n", cmd, tenant, err);
    return 1;
  }
  mw_cortex_close(cx);
  return 0;
}

/* ---- init ----------------------------------------------------------------- */

static const char INIT_HELP[] =
  "usage: mw init --home DIR [--json]\n"
  "Creates an MW home in DIR: its database, the tenant `default`, one agent and\n"
  "one operator token (printed once; only their hashes are kept). On an existing\n"
  "home it changes nothing, prints no token, and says so.\n"
  "With --json prints {\"tenant\", \"agent_token\", \"operator_token\"}.\n";

static int cmd_init(int argc, char **argv) {
  opts o;
  int rc = parse("init", argc, argv, &o);
  if (rc) return rc;
  if (o.help) return fputs(INIT_HELP, stdout), 0;
  if ((rc = need_home("init", &o))) return rc;
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/mw.db", o.home);
  if (stat(path, &st) == 0) {
    mw_store *s;
    if (open_home("init", o.home, &s)) return 1;   /* refuses a non-MW mw.db too */
    mw_store_close(s);
    if (o.json) {
      mw_buf j = {0};
      mw__buf_addstr(&j, "{\"exists\":true,\"home\":");
      if (mw__json_string(&j, o.home, strlen(o.home))) mw__buf_addstr(&j, "null");
      mw__buf_addc(&j, '}');
      printf("%s\n", j.p);
      mw__buf_free(&j);
    }
    else printf("%s is already an MW home: nothing changed, no token printed\n", o.home);
    return 0;
  }
  if (stat(o.home, &st) == 0 && !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mw init: %s exists and is not a directory\n", o.home);
    return 1;
  }
  mw_store *s;
  char err[512], agent[68], oper[68];
  rc = mw_store_open(o.home, MW_STORE_CREATE, &s, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mw init: %s\n", err);
    return 1;
  }
  /* A home is created whole -- database, the default tenant's Cortex and its
   * tokens -- or not at all: on any failure what was made is removed, so
   * that running init again starts afresh instead of finding half a home. */
  rc = mw_store_tenant(s, "default", 1);
  if (!rc && make_cortex("init", o.home, "default")) rc = MW_EUNAVAIL;
  if (!rc) rc = mw_store_begin(s);
  if (!rc) rc = mw_token_create(s, "default", "agent", agent);
  if (!rc) rc = mw_token_create(s, "default", "operator", oper);
  if (!rc) rc = mw_store_commit(s);
  if (rc) {
    fprintf(stderr, "mw init: %s\n", mw_store_errmsg(s)[0] ? mw_store_errmsg(s) : mw_strerror(rc));
    mw_store_rollback(s);
    mw_store_close(s);
    static const char *const made[] = {"mw.db", "mw.db-wal", "mw.db-shm", "tenants/default/cortex.db",
                                       "tenants/default/cortex.db-wal", "tenants/default/cortex.db-shm", NULL};
    char path[4200];
    for (int i = 0; made[i]; i++) {
      snprintf(path, sizeof path, "%s/%s", o.home, made[i]);
      unlink(path);
    }
    return 1;
  }
  mw_store_close(s);
  if (o.json) {
    printf("{\"agent_token\":\"%s\",\"operator_token\":\"%s\",\"tenant\":\"default\"}\n", agent, oper);
  } else {
    printf("created MW home %s\n"
           "tenant:         default\n"
           "agent token:    %s\n"
           "operator token: %s\n"
           "(tokens are printed only now; only their hashes are kept)\n",
           o.home, agent, oper);
  }
  return 0;
}

/* ---- token ---------------------------------------------------------------- */

static const char TOKEN_HELP[] =
  "usage: mw token create --home DIR --tenant T --role agent|operator [--json]\n"
  "       mw token revoke --home DIR --token TOKEN\n"
  "create makes the tenant if it is new and prints a new token once (with\n"
  "--json: {\"tenant\", \"role\", \"token\"}). revoke takes effect at once, also\n"
  "for a server running on the same home.\n";

static int cmd_token(int argc, char **argv) {
  opts o;
  int rc = parse("token", argc, argv, &o);
  if (rc) return rc;
  if (o.help || o.nrest == 0) return fputs(TOKEN_HELP, o.help ? stdout : stderr), o.help ? 0 : 2;
  if ((rc = need_home("token", &o))) return rc;
  mw_store *s;
  if (!strcmp(o.rest[0], "create")) {
    if (!o.tenant) return usage_error("token", "create needs --tenant T");
    if (!o.role) return usage_error("token", "create needs --role agent|operator");
    if (!mw_valid_id(o.tenant)) return usage_error("token", "tenant must be 1-64 of A-Z a-z 0-9 _ . -");
    if (strcmp(o.role, "agent") && strcmp(o.role, "operator"))
      return usage_error("token", "role must be agent or operator");
    if (open_home("token", o.home, &s)) return 1;
    char tok[68];
    rc = mw_token_create(s, o.tenant, o.role, tok);
    if (rc) fprintf(stderr, "mw token: %s\n", mw_store_errmsg(s));
    mw_store_close(s);
    if (rc) return 1;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/tenants/%s/cortex.db", o.home, o.tenant);
    if (stat(path, &st) != 0 && make_cortex("token", o.home, o.tenant)) return 1;
    if (o.json) printf("{\"role\":\"%s\",\"tenant\":\"%s\",\"token\":\"%s\"}\n", o.role, o.tenant, tok);
    else printf("%s\n", tok);
    return 0;
  }
  if (!strcmp(o.rest[0], "revoke")) {
    if (!o.token) return usage_error("token", "revoke needs --token TOKEN");
    if (open_home("token", o.home, &s)) return 1;
    rc = mw_token_revoke(s, o.token);
    if (rc) fprintf(stderr, "mw token: %s\n", mw_store_errmsg(s));
    mw_store_close(s);
    if (rc) return 1;
    if (o.json) printf("{\"revoked\":true}\n");
    else printf("revoked\n");
    return 0;
  }
  return usage_error("token", "the subcommands are create and revoke");
}

/* ---- log verify ------------------------------------------------------------ */

static const char LOG_HELP[] =
  "usage: mw log verify --home DIR --tenant T --actor A\n"
  "Checks the hash chain of one actor's log: exit 0 when it holds, else exit 1\n"
  "naming the first bad cursor. A home with a chain key (an HMAC chain) needs\n"
  "MW_CHAIN_KEY_FILE set to that key.\n";

static int open_stream(const char *cmd, const opts *o, mw_store **s, int64_t *stream) {
  if (!o->tenant) return usage_error(cmd, "needs --tenant T");
  if (!o->actor) return usage_error(cmd, "needs --actor A");
  if (!mw_valid_id(o->tenant)) return usage_error(cmd, "tenant must be 1-64 of A-Z a-z 0-9 _ . -");
  if (!mw_valid_id(o->actor)) return usage_error(cmd, "actor must be 1-64 of A-Z a-z 0-9 _ . -");
  if (open_home(cmd, o->home, s)) return 1;
  int rc = mw_store_stream(*s, o->tenant, o->actor, 0, stream);
  if (rc) {
    fprintf(stderr, "mw %s: %s (tenant %s)\n", cmd, mw_store_errmsg(*s), o->tenant);
    mw_store_close(*s);
    return 1;
  }
  return 0;
}

static int cmd_log(int argc, char **argv) {
  opts o;
  int rc = parse("log", argc, argv, &o);
  if (rc) return rc;
  if (o.help || o.nrest == 0) return fputs(LOG_HELP, o.help ? stdout : stderr), o.help ? 0 : 2;
  if (strcmp(o.rest[0], "verify")) return usage_error("log", "the subcommand is verify");
  if ((rc = need_home("log", &o))) return rc;
  mw_store *s;
  int64_t stream, bad = 0, last = 0;
  if ((rc = open_stream("log", &o, &s, &stream))) return rc;
  rc = mw_log_verify(s, stream, &bad);
  if (rc == 0) {
    mw_log_head(s, stream, &last, NULL);
    printf("ok: %s/%s chain holds through cursor %lld\n", o.tenant, o.actor, (long long)last);
  } else if (rc == MW_EBROKEN) {
    printf("broken: first bad cursor %lld\n", (long long)bad);
    fprintf(stderr, "mw log verify: %s\n", mw_store_errmsg(s));
  } else {
    fprintf(stderr, "mw log verify: %s\n", mw_store_errmsg(s));
  }
  mw_store_close(s);
  return rc ? 1 : 0;
}

/* ---- replay ---------------------------------------------------------------- */

static const char REPLAY_HELP[] =
  "usage: mw replay --home DIR --tenant T --actor A --to N\n"
  "Prints the actor's state at cursor N, folded by the current fold, as\n"
  "canonical JSON on stdout: the same bytes every time for the same N and fold.\n";

/* The fold the host runs: $MW_SCRIPTS/fold.lua, else the installed scripts' --
 * the same lookup as `mw serve`, so both replay under the same fold. */
int mw__cli_fold_path(const char *home, char *out, size_t n) {
  (void)home;
  const char *dir = getenv("MW_SCRIPTS");
  snprintf(out, n, "%s/fold.lua", dir && *dir ? dir : MW_SCRIPTS_DIR);
  return 0;
}

static int cmd_replay(int argc, char **argv) {
  opts o;
  int rc = parse("replay", argc, argv, &o);
  if (rc) return rc;
  if (o.help) return fputs(REPLAY_HELP, stdout), 0;
  if ((rc = need_home("replay", &o))) return rc;
  if (!o.have_to) return usage_error("replay", "needs --to N");
  mw_store *s;
  int64_t stream;
  if ((rc = open_stream("replay", &o, &s, &stream))) return rc;
  char path[4200], err[1024];
  mw__cli_fold_path(o.home, path, sizeof path);
  mw_fold *f;
  rc = mw_fold_open(path, NULL, &f, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mw replay: %s\n", err);
    mw_store_close(s);
    return 1;
  }
  mw_buf b = {0};
  mw_hydrated h = {.state = &b};
  mw_hydrate_opts ho = {.to = o.to, .replay = 1, .no_write = 1, .ckpt_every = -1};
  rc = mw_hydrate(s, f, stream, &ho, &h, err, sizeof err);
  if (rc) fprintf(stderr, "mw replay: %s\n", err);
  else printf("%.*s\n", (int)b.len, b.p);
  mw__buf_free(&b);
  mw_fold_close(f);
  mw_store_close(s);
  return rc ? 1 : 0;
}

/* ---- cortex ------------------------------------------------------------------ */

static const char CORTEX_HELP[] =
  "usage: mw cortex rebuild --home DIR --tenant T\n"
  "       mw cortex dump --home DIR --tenant T\n"
  "rebuild recreates the tenant's Cortex from its actors' logs alone (the facts\n"
  "are logged first; the Cortex is derived). dump prints the whole graph,\n"
  "current and superseded, as canonical JSON: a rebuilt Cortex dumps the same\n"
  "bytes as the live one.\n";

static int cmd_cortex(int argc, char **argv) {
  opts o;
  int rc = parse("cortex", argc, argv, &o);
  if (rc) return rc;
  if (o.help || o.nrest == 0) return fputs(CORTEX_HELP, o.help ? stdout : stderr), o.help ? 0 : 2;
  if ((rc = need_home("cortex", &o))) return rc;
  int rebuild = !strcmp(o.rest[0], "rebuild");
  if (!rebuild && strcmp(o.rest[0], "dump")) return usage_error("cortex", "the subcommands are rebuild and dump");
  if (!o.tenant || !mw_valid_id(o.tenant)) return usage_error("cortex", "needs --tenant T (1-64 of A-Z a-z 0-9 _ . -)");
  mw_store *s;
  if (open_home("cortex", o.home, &s)) return 1;
  if (mw_store_tenant(s, o.tenant, 0)) {
    fprintf(stderr, "mw cortex: %s\n", mw_store_errmsg(s));
    mw_store_close(s);
    return 1;
  }
  char path[4200], err[512];
  snprintf(path, sizeof path, "%s/tenants/%s/cortex.db", o.home, o.tenant);
  mw_cortex *cx;
  rc = mw_cortex_open(path, rebuild, 5000, &cx, err, sizeof err);
  if (rc && rebuild && strstr(err, "corrupt")) {
    /* the logs are the truth: a Cortex that cannot be opened is replaced */
    static const char *const sfx[] = {"", "-wal", "-shm", NULL};
    char p2[4300];
    for (int i = 0; sfx[i]; i++) {
      snprintf(p2, sizeof p2, "%s%s", path, sfx[i]);
      unlink(p2);
    }
    rc = mw_cortex_open(path, 1, 5000, &cx, err, sizeof err);
  }
  if (rc) {
    fprintf(stderr, "mw cortex: %s\n", err);
    mw_store_close(s);
    return 1;
  }
  mw_buf b = {0};
  if (rebuild) {
    rc = mw__facts_rebuild(s, cx, o.tenant, err, sizeof err);
    if (rc) fprintf(stderr, "mw cortex rebuild: %s\n", err);
    else printf("rebuilt the Cortex of tenant %s from its logs\n", o.tenant);
  } else {
    rc = mw_cortex_dump(cx, &b);
    if (rc) fprintf(stderr, "mw cortex dump: %s\n", mw_cortex_errmsg(cx));
    else printf("%.*s\n", (int)b.len, b.p);
  }
  mw__buf_free(&b);
  mw_cortex_close(cx);
  mw_store_close(s);
  return rc ? 1 : 0;
}

/* ---- the serving lock --------------------------------------------------------- */

/* A host holds HOME/serve.lock while it serves: one host per home, and the
 * in-process commands (load, skill run) refuse to run beside it -- its
 * sessions live in its memory.  Returns the held fd, or -1 with a message. */
int mw__cli_lock_home(const char *home, const char *cmd) {
  char path[4200];
  snprintf(path, sizeof path, "%s/serve.lock", home);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "mw %s: cannot open %s\n", cmd, path);
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "mw %s: a host is serving %s; %s\n", cmd, home,
            strcmp(cmd, "serve") ? "use its HTTP API (POST /v1/load, POST /v1/actors/A/skills/S) instead"
                                 : "one host per home");
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- load and skill run: the operator's triggers, in process --------------------- */

static const char LOAD_HELP[] =
  "usage: mw load ACTOR --home DIR [--tenant T] [--profile P] [--hint TEXT]\n"
  "The operator-triggered Waking: prints the boot packet (trigger \"load\") and\n"
  "sleeps the session at once (it commits nothing, so nothing is written).\n"
  "Runs in process; while a host serves the home, use POST /v1/load.\n";

static const char SKILL_HELP[] =
  "usage: mw skill run ACTOR SKILL [INPUT_JSON] --home DIR [--tenant T]\n"
  "Skill entry: wakes the actor (trigger \"skill\"), runs SKILL with INPUT,\n"
  "sleeps it with the result's handover, and prints the answer.\n"
  "Runs in process; while a host serves the home, use\n"
  "POST /v1/actors/ACTOR/skills/SKILL.\n";

static int run_engine_call(const char *cmd, const char *home, mw_call_fn fn, mw_call *c, int then_sleep) {
  int lock = mw__cli_lock_home(home, cmd);
  if (lock < 0) return 1;
  mw_engine *e;
  char err[1024];
  mw_engine_opts eo = {0};
  eo.home = home;
  const char *scripts = getenv("MW_SCRIPTS"), *skills = getenv("MW_SKILLS");
  eo.scripts_dir = scripts && *scripts ? scripts : NULL;
  eo.skills_dir = skills && *skills ? skills : NULL;
  if (mw_engine_open(&eo, &e, err, sizeof err)) {
    fprintf(stderr, "mw %s: %s\n", cmd, err);
    close(lock);
    return 1;
  }
  int status = 0;
  char *body = NULL;
  size_t len = 0;
  int rc = mw_call_sync(e, fn, c, &status, &body, &len);
  if (!rc) {
    printf("%.*s\n", (int)len, body);
    const char *v;
    size_t vn;
    char sid[64];
    if (status == 200 && then_sleep && !mw__jfield(body, len, "session_id", &v, &vn) &&
        mw__jstring(v, vn, sid, sizeof sid) > 0) {
      char req[128], *b2 = NULL;
      size_t l2 = 0;
      int st2 = 0;
      snprintf(req, sizeof req, "{\"session_id\":\"%s\"}", sid);
      mw_call sc = {.tenant = c->tenant, .role = "operator", .body = req, .body_len = strlen(req)};
      if (mw_call_sync(e, mw_sleep, &sc, &st2, &b2, &l2) == 0 && st2 != 200) {
        fprintf(stderr, "mw %s: sleeping the session: %.*s\n", cmd, (int)l2, b2);
        status = st2;
      }
      free(b2);
    }
  } else {
    fprintf(stderr, "mw %s: %s\n", cmd, mw_strerror(rc));
  }
  free(body);
  mw_engine_close(e);
  close(lock);
  return rc || status != 200 ? 1 : 0;
}

static int cmd_load(int argc, char **argv) {
  const char *home = getenv("MW_HOME"), *tenant = "default", *profile = NULL, *hint = NULL, *actor = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(LOAD_HELP, stdout), 0;
    if (a[0] == '-' && a[1] == '-') {
      if (i + 1 >= argc) return usage_error("load", "an option needs a value");
      const char *v = argv[++i];
      if (!strcmp(a, "--home")) home = v;
      else if (!strcmp(a, "--tenant")) tenant = v;
      else if (!strcmp(a, "--profile")) profile = v;
      else if (!strcmp(a, "--hint")) hint = v;
      else return usage_error("load", "unknown option");
    } else if (!actor) {
      actor = a;
    } else {
      return usage_error("load", "too many arguments");
    }
  }
  if (!home || !*home) return usage_error("load", "no home: pass --home DIR or set MW_HOME");
  if (!actor) return usage_error("load", "needs ACTOR");
  if (!mw_valid_id(actor) || !mw_valid_id(tenant)) return usage_error("load", "ids are 1-64 of A-Z a-z 0-9 _ . -");
  mw_buf b = {0};
  mw__buf_addstr(&b, "{\"actor_id\":");
  mw__json_string(&b, actor, strlen(actor));
  if (hint) {
    mw__buf_addstr(&b, ",\"context_hint\":");
    if (mw__json_string(&b, hint, strlen(hint))) return mw__buf_free(&b), usage_error("load", "--hint must be UTF-8");
  }
  if (profile) {
    mw__buf_addstr(&b, ",\"profile\":");
    mw__json_string(&b, profile, strlen(profile));
  }
  mw__buf_addc(&b, '}');
  mw_call c = {.tenant = tenant, .role = "operator", .body = b.p, .body_len = b.len};
  int rc = run_engine_call("load", home, mw_load, &c, 1);
  mw__buf_free(&b);
  return rc;
}

static int cmd_skill(int argc, char **argv) {
  const char *home = getenv("MW_HOME"), *tenant = "default", *pos[4] = {0};
  int npos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(SKILL_HELP, stdout), 0;
    if (a[0] == '-' && a[1] == '-') {
      if (i + 1 >= argc) return usage_error("skill", "an option needs a value");
      const char *v = argv[++i];
      if (!strcmp(a, "--home")) home = v;
      else if (!strcmp(a, "--tenant")) tenant = v;
      else return usage_error("skill", "unknown option");
    } else if (npos < 4) {
      pos[npos++] = a;
    } else {
      return usage_error("skill", "too many arguments");
    }
  }
  if (npos < 3 || strcmp(pos[0], "run")) return fputs(SKILL_HELP, stderr), 2;
  if (!home || !*home) return usage_error("skill", "no home: pass --home DIR or set MW_HOME");
  if (!mw_valid_id(pos[1]) || !mw_valid_id(pos[2]) || !mw_valid_id(tenant))
    return usage_error("skill", "actor, skill and tenant are 1-64 of A-Z a-z 0-9 _ . -");
  mw_buf b = {0};
  char err[256];
  mw__buf_addstr(&b, "{\"input\":");
  if (pos[3] && mw__json_canon(pos[3], strlen(pos[3]), &b, err, sizeof err)) {
    fprintf(stderr, "mw skill: INPUT is not JSON: %s\n", err);
    mw__buf_free(&b);
    return 2;
  }
  if (!pos[3]) mw__buf_addstr(&b, "null");
  mw__buf_addc(&b, '}');
  mw_call c = {.tenant = tenant, .role = "operator", .actor = pos[1], .skill = pos[2], .body = b.p, .body_len = b.len};
  int rc = run_engine_call("skill", home, mw_actor_skill, &c, 0);
  mw__buf_free(&b);
  return rc;
}

/* ---- dispatch -------------------------------------------------------------- */

static const char MAIN_HELP[] =
  "usage: mw COMMAND [options]\n"
  "MW gives AI agents continuity: a hash-chained log per actor, snapshots, and\n"
  "wake -> run -> sleep over HTTP.\n\n"
  "commands:\n"
  "  init          create a home (tenant `default`, one agent and one operator token)\n"
  "  serve         run the host (HTTP API)\n"
  "  token         create or revoke tokens\n"
  "  log verify    check an actor's hash chain\n"
  "  cortex        rebuild a tenant's Cortex from the logs, or dump it\n"
  "  load          the operator's Waking of an actor (in process)\n"
  "  skill run     wake an actor, run a skill, sleep it (in process)\n"
  "  replay        print an actor's state at a cursor\n\n"
  "MW_HOME stands in for --home. `mw COMMAND --help` says more.\n";

int mw__cli_main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(MAIN_HELP, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "init")) return cmd_init(argc - 2, argv + 2);
  if (!strcmp(cmd, "token")) return cmd_token(argc - 2, argv + 2);
  if (!strcmp(cmd, "log")) return cmd_log(argc - 2, argv + 2);
  if (!strcmp(cmd, "replay")) return cmd_replay(argc - 2, argv + 2);
  if (!strcmp(cmd, "cortex")) return cmd_cortex(argc - 2, argv + 2);
  if (!strcmp(cmd, "load")) return cmd_load(argc - 2, argv + 2);
  if (!strcmp(cmd, "skill")) return cmd_skill(argc - 2, argv + 2);
  if (!strcmp(cmd, "serve")) return mw__serve_main(argc - 2, argv + 2);
  fprintf(stderr, "mw: unknown command %s (see mw --help)\n", cmd);
  return 2;
}
