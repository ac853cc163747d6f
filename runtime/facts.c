/* facts.c -- the log -> Cortex path (see facts.h). */
#include "facts.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  mw_cortex *cx;
  const char *actor;
  int rc;
  int64_t applied;
} apply_ctx;

static int apply_entry(void *ud, const mw_entry *e) {
  apply_ctx *a = ud;
  if (strcmp(e->kind, "fact") == 0) {
    int rc = mw_cortex_apply(a->cx, a->actor, e->cursor, e->ts, e->body, e->body_len);
    if (rc && rc != MW_EINVAL && rc != MW_EJSON) {
      a->rc = rc;
      return -1;
    }
  }
  a->applied = e->cursor;
  return 0;
}

int mw__facts_catch_up(mw_store *s, mw_cortex *cx, int64_t stream, const char *actor, int64_t last,
                       char *err, size_t errlen) {
  int64_t applied = 0;
  int rc = mw_cortex_applied(cx, actor, &applied);
  if (rc) {
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
    return MW_EUNAVAIL;
  }
  if (applied >= last) return 0;
  if ((rc = mw_cortex_begin(cx))) {
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
    return MW_EUNAVAIL;
  }
  apply_ctx a = {cx, actor, 0, applied};
  rc = mw_log_read(s, stream, applied + 1, last - applied, apply_entry, &a);
  if (a.rc) {
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
    rc = MW_EUNAVAIL;
  } else if (rc) {
    snprintf(err, errlen, "%s", mw_store_errmsg(s));
  }
  if (!rc && a.applied > applied && (rc = mw_cortex_set_applied(cx, actor, a.applied)) != 0)
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
  if (!rc && (rc = mw_cortex_commit(cx)) != 0) {
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
    rc = MW_EUNAVAIL;
  }
  if (rc) mw_cortex_rollback(cx);
  return rc;
}

typedef struct {
  mw_store *s;
  mw_cortex *cx;
  char *err;
  size_t errlen;
  int rc;
} tenant_ctx;

static int each_stream(void *ud, int64_t stream, const char *actor, int64_t last) {
  tenant_ctx *t = ud;
  char who[65];
  snprintf(who, sizeof who, "%s", actor);   /* the row's text lives only as long as the step */
  t->rc = mw__facts_catch_up(t->s, t->cx, stream, who, last, t->err, t->errlen);
  return t->rc ? -1 : 0;
}

int mw__facts_catch_up_tenant(mw_store *s, mw_cortex *cx, const char *tenant, char *err, size_t errlen) {
  tenant_ctx t = {s, cx, err, errlen, 0};
  int rc = mw_store_streams(s, tenant, each_stream, &t);
  if (t.rc) return t.rc;
  if (rc) snprintf(err, errlen, "%s", mw_store_errmsg(s));
  return rc;
}

int mw__facts_rebuild(mw_store *s, mw_cortex *cx, const char *tenant, char *err, size_t errlen) {
  if (mw_cortex_clear(cx)) {
    snprintf(err, errlen, "%s", mw_cortex_errmsg(cx));
    return MW_EUNAVAIL;
  }
  return mw__facts_catch_up_tenant(s, cx, tenant, err, errlen);
}
