/* tenant.h -- one Lua state per tenant: its Waking (compose), profiles and
 * skills, under the tenant's own memory cap, instruction and time budgets.
 * Tenants share no globals, no upvalues, no memory budget. */
#ifndef MW_TENANT_H
#define MW_TENANT_H
#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "mw.h"

typedef struct mw_tenant mw_tenant;

typedef struct mw_tenant_conf {
  const char *scripts_dir;     /* waking.lua, profiles.lua, fold.lua */
  const char *skills_dir;      /* skills for every tenant */
  const char *home;            /* HOME/tenants/<name>/skills: the tenant's own */
  size_t mem_limit;            /* bytes for the tenant's Lua state */
  int64_t budget;              /* instructions per call */
  int64_t time_ms;             /* wall-clock per call */
  int strict;                  /* a reload: any bad file fails the whole load */
  const char *const *roots;    /* where the roster's locators may point */
  int nroots;
} mw_tenant_conf;

/* A declared source (HOME/tenants/<name>/roster.lua). */
#define MW_MUNDO 1
#define MW_ATIVIDADE 2
typedef struct mw_source {
  char id[65];
  char locator[1024];
  char does[512];              /* one line, shown in the briefing */
  char policy[65];             /* the policy that reads it ("default") */
  int subjects;                /* MW_MUNDO | MW_ATIVIDADE: what it may feed */
  int64_t deadline_ms;
} mw_source;

const mw_source *mw__tenant_sources(const mw_tenant *t, size_t *n);
const mw_source *mw__tenant_source(const mw_tenant *t, const char *id);
/* The source's policy over raw pulled items (canonical JSON array): filter,
 * score and tag with subjects; appends the canonical array of delta items. */
int mw__tenant_policy(mw_tenant *t, const mw_source *src, const char *items, size_t len, mw_buf *out,
                      char *err, size_t errlen);

int mw__tenant_new(const char *name, const mw_tenant_conf *c, mw_tenant **out, char *err, size_t errlen);
void mw__tenant_free(mw_tenant *t);
const char *mw__tenant_name(const mw_tenant *t);
mw_fold *mw__tenant_fold(mw_tenant *t);
mw_fold *mw__tenant_sweep(mw_tenant *t);   /* scripts/sweep.lua: the corpus */
size_t mw__tenant_mem(const mw_tenant *t);

/* The profile's fields; 0 when the profile exists. */
/* The tenant's Cortex as the engine last found it: cx NULL means dark, for
 * `reason`.  Lua reaches it through `cortex.navigate` (Waking) and
 * `ctx.cortex` (skills). */
struct mw_cortex;
void mw__tenant_set_cortex(mw_tenant *t, struct mw_cortex *cx, const char *reason);
/* What the last compose navigated (a JSON array of navigation results). */
const char *mw__tenant_navigated(mw_tenant *t, size_t *len);

int mw__tenant_profile(mw_tenant *t, const char *profile, char skill[65]);
int mw__tenant_has_skill(mw_tenant *t, const char *name);

typedef struct mw_compose_in {
  const char *actor, *profile, *trigger, *context_hint;   /* hint may be NULL */
  int64_t cursor, head_cursor;
  const char *state; size_t state_len;                     /* canonical */
  const char *corpus; size_t corpus_len;                   /* the sweep's corpus, canonical */
} mw_compose_in;

/* Waking: the briefing (canonical JSON object with the four legs). */
int mw__tenant_compose(mw_tenant *t, const mw_compose_in *in, mw_buf *briefing, char *err, size_t errlen);

typedef struct mw_staged {
  char kind[65];
  mw_buf body;                 /* canonical */
} mw_staged;

typedef struct mw_run_in {
  const char *skill, *actor, *session_id, *profile;
  int64_t cursor;
  const char *state; size_t state_len;
  const char *input; size_t input_len;                     /* canonical */
} mw_run_in;

/* A skill asked for another actor's skill (ctx.call): it runs after the
 * caller's commit, through skill entry. */
typedef struct mw_enqueued {
  char actor[65], skill[65];
  mw_buf input;                /* canonical */
} mw_enqueued;

typedef struct mw_run_out {
  int pending;                 /* the skill waits in ctx.delta: pull, then mw__tenant_resume */
  char pending_source[65];     /* the source it asked for, "" for every source */
  int co_ref;                  /* its coroutine, while it runs or waits */
  mw_enqueued *calls;
  size_t ncalls;
  int rc;                      /* 0, MW_ESKILL, MW_ETIMEOUT, MW_ENOENT, MW_ENOMEM */
  mw_buf result;               /* canonical JSON of what run returned */
  mw_staged *staged;
  size_t nstaged;
  char message[1024];
  mw_buf traceback;
} mw_run_out;

int mw__tenant_run(mw_tenant *t, const mw_run_in *in, mw_run_out *out);
/* Resumes a run that waits in ctx.delta with the delta's answer (JSON);
 * the run may wait again (out->pending) or finish like mw__tenant_run. */
int mw__tenant_resume(mw_tenant *t, const mw_run_in *in, mw_run_out *out, const char *json, size_t len);
/* 1 while a run of this tenant waits in a host call (its state must live). */
int mw__tenant_busy(const mw_tenant *t);
/* The name of a secret whose value appears in p[0..n) (as is or JSON-escaped), or NULL. */
const char *mw__tenant_secret_in(mw_tenant *t, const char *p, size_t n);

/* The tenant's heartbeats (HOME/tenants/<name>/heartbeat.lua). */
typedef struct mw_beat {
  char actor[65], profile[16], skill[65];
  int64_t every_ms;
} mw_beat;
const mw_beat *mw__tenant_beats(const mw_tenant *t, size_t *n);

/* The tenant's quotas (HOME/tenants/<name>/quotas.lua); 0 means unlimited. */
typedef struct mw_quotas {
  int64_t actors, log_bytes, rps;
} mw_quotas;
const mw_quotas *mw__tenant_quotas(const mw_tenant *t);
void mw__run_out_free(mw_run_out *o);
#endif
