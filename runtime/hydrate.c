/* hydrate.c -- rebuild an actor's state: load the head snapshot (verified),
 * start from the newest verified snapshot at or after it made by the current
 * fold, and replay the tail.  A snapshot that fails verification is never
 * used: it is marked unsafe and named in the error. */
#include "mw.h"
#include "buf.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_K 100

typedef struct pick {
  mw_store *s;
  int64_t stream;
  const char *fold;      /* the current fold's fingerprint */
  int64_t min_cursor;    /* only snapshots at or after this (exclusive of skip) */
  int64_t max_cursor;
  const char *skip;      /* an id never to pick */
  int any_fold;          /* for last-safe searches: any fold will do */
  mw_snapshot found;     /* loaded, with state, when picked */
  int picked;
  int64_t failed;        /* candidates that failed verification */
  mw_hydrated *out;      /* with no_write: where bad ids are reported */
} pick;

/* A snapshot failed verification: mark it unsafe, or, on a read-only pass,
 * report it so that the caller marks it through its own writer. */
static void condemn(mw_store *s, mw_hydrated *out, const char *id) {
  if (!out) {
    mw_snapshot_mark_unsafe(s, id);
    return;
  }
  if (out->n_unsafe < 4) snprintf(out->unsafe[out->n_unsafe++], 40, "%s", id);
}

/* Snapshot list callback (newest first): the first candidate that loads and
 * verifies wins; one that fails is marked unsafe and skipped. */
static int try_candidate(void *ud, const mw_snapshot *c) {
  pick *p = ud;
  if (c->cursor > p->max_cursor) return 0;
  if (c->cursor < p->min_cursor) return 1;   /* newest first: nothing further qualifies */
  if (!c->safe || (p->skip && strcmp(c->id, p->skip) == 0)) return 0;
  if (!p->any_fold && strcmp(c->fold, p->fold) != 0) return 0;
  mw_snapshot full;
  if (mw_snapshot_get(p->s, p->stream, c->id, &full)) return 0;
  if (mw_snapshot_verify(p->s, p->stream, &full) == 0) {
    p->found = full;
    p->picked = 1;
    return 1;
  }
  mw_snapshot_free(&full);
  condemn(p->s, p->out, c->id);
  p->failed++;
  return 0;
}

static int find(pick *p) {
  p->picked = 0;
  int rc = mw_snapshot_list(p->s, p->stream, try_candidate, p);
  return rc;
}

int mw_hydrate(mw_store *s, mw_fold *f, int64_t stream, const mw_hydrate_opts *opts,
               mw_hydrated *out, char *err, size_t errlen) {
  mw_buf *state = out->state;
  memset(out, 0, sizeof *out);
  out->state = state;
  int64_t last;
  unsigned char lasthash[32];
  int rc = mw_log_head(s, stream, &last, lasthash);
  if (rc) {
    snprintf(err, errlen, "%s", mw_store_errmsg(s));
    return rc;
  }
  int64_t to = opts && opts->to >= 0 ? opts->to : last;
  int64_t k = opts && opts->ckpt_every ? opts->ckpt_every : DEFAULT_K;
  const char *from = opts ? opts->from_snapshot : NULL;
  if (to > last) {
    snprintf(err, errlen, "cursor %lld is past the log's last entry (%lld)", (long long)to, (long long)last);
    return MW_EINVAL;
  }
  const char *fp = mw_fold_fingerprint(f);
  mw_hydrated *report = opts && opts->no_write ? out : NULL;
  pick p = {.s = s, .stream = stream, .fold = fp, .max_cursor = to, .out = report};
  mw_snapshot start = {0};
  int have_start = 0;

  if (from && strcmp(from, "genesis") == 0) {
    /* replay the whole log */
  } else if (from) {
    rc = mw_snapshot_get(s, stream, from, &start);
    if (rc) {
      snprintf(err, errlen, "%s", mw_store_errmsg(s));
      return rc;
    }
    if (start.cursor > to || (rc = mw_snapshot_verify(s, stream, &start))) {
      snprintf(out->bad_id, sizeof out->bad_id, "%s", start.id);
      if (rc == MW_ECORRUPT) condemn(s, report, start.id);
      snprintf(err, errlen, "%s", rc ? mw_store_errmsg(s) : "snapshot is past the requested cursor");
      mw_snapshot_free(&start);
      return rc ? rc : MW_EINVAL;
    }
    have_start = 1;
    /* a recovery from a named snapshot resumes from it: it is what was loaded */
    snprintf(out->head_id, sizeof out->head_id, "%s", start.id);
    out->head_cursor = start.cursor;
    out->refolded = strcmp(start.fold, fp) != 0;
    if (out->refolded) {   /* named, but made by another fold: rebuild from genesis */
      mw_snapshot_free(&start);
      have_start = 0;
    }
  } else if (to == last && !(opts && opts->replay)) {
    /* A wake: the head must verify, or the caller must name a recovery. */
    char head[40];
    if ((rc = mw_snapshot_head(s, stream, head))) {
      snprintf(err, errlen, "%s", mw_store_errmsg(s));
      return rc;
    }
    if (head[0]) {
      mw_snapshot h;
      rc = mw_snapshot_get(s, stream, head, &h);
      if (rc == 0 && (!h.safe || mw_snapshot_verify(s, stream, &h) != 0)) rc = MW_ECORRUPT;
      if (rc == MW_ECORRUPT || rc == MW_ENOENT) {
        char why[300];
        snprintf(why, sizeof why, "%s", h.safe ? mw_store_errmsg(s) : "head snapshot is marked unsafe");
        if (rc == MW_ENOENT) snprintf(why, sizeof why, "head snapshot %s is missing", head);
        if (rc == MW_ECORRUPT && h.safe) condemn(s, report, head);
        mw_snapshot_free(&h);
        snprintf(out->bad_id, sizeof out->bad_id, "%s", head);
        pick safe = {.s = s, .stream = stream, .max_cursor = last, .skip = head, .any_fold = 1,
                     .out = report};
        find(&safe);
        if (safe.picked) {
          snprintf(out->last_safe_id, sizeof out->last_safe_id, "%s", safe.found.id);
          mw_snapshot_free(&safe.found);
        }
        snprintf(err, errlen, "%s", why);
        return MW_ECORRUPT;
      }
      if (rc) {
        snprintf(err, errlen, "%s", mw_store_errmsg(s));
        return rc;
      }
      snprintf(out->head_id, sizeof out->head_id, "%s", h.id);
      out->head_cursor = h.cursor;
      if (strcmp(h.fold, fp) == 0) {
        start = h;
        have_start = 1;
      } else {
        out->refolded = 1;
        mw_snapshot_free(&h);
      }
    }
  }

  /* A newer verified snapshot (a checkpoint) by this fold saves replay. */
  if (!from || out->refolded) {
    p.min_cursor = have_start ? start.cursor + 1 : 0;
    if (find(&p) == 0 && p.picked) {
      mw_snapshot_free(&start);
      start = p.found;
      have_start = 1;
    }
    out->checkpoints_failed = p.failed;
  }

  int64_t from_cursor = have_start ? start.cursor : 0;
  if (have_start) snprintf(out->start_id, sizeof out->start_id, "%s", start.id);
  /* One checkpoint at the last multiple of K passed, so the next wake
   * replays at most K entries, without a write per K on a long replay. */
  int64_t ckpt_at = !report && k > 0 && to - from_cursor >= k ? to / k * k : 0;
  rc = mw_fold_replay(f, s, stream, have_start ? start.state : NULL, have_start ? start.state_len : 0,
                      from_cursor, to, ckpt_at, state, &out->checkpoints_saved, err, errlen);
  mw_snapshot_free(&start);
  if (rc) return rc;
  out->cursor = to;
  out->replayed = to - from_cursor;
  return 0;
}
