/* cortex.h -- a tenant's knowledge graph (the Cortex) in its own SQLite file
 * (HOME/tenants/<tenant>/cortex.db), so that it can fail on its own.  Current
 * state only, derived from `fact` log entries: the log stays the truth, and
 * the Cortex can always be rebuilt from it.  Storage layer: no Lua, no libuv.
 *
 * Facts: every node and edge version carries provenance (actor, cursor), ts,
 * trust ("claim" or "fact") and validity [valid_from, valid_to).  Versions of
 * one node key (or one edge from/rel/to) are ordered by (ts, actor, cursor,
 * item): each version's valid_to is the next one's valid_from, so applying
 * the same facts in any order gives the same graph (rebuild == live). */
#ifndef MW_CORTEX_H
#define MW_CORTEX_H
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

typedef struct mw_cortex mw_cortex;

/* Opens (create: and creates) the Cortex at path.  Missing (without create),
 * unreadable, not a database, corrupt, or locked past busy_ms -> MW_EUNAVAIL
 * with the reason in err (e.g. "cortex file missing", "cortex is corrupt"). */
int mw_cortex_open(const char *path, int create, int busy_ms, mw_cortex **out, char *err, size_t errlen);
void mw_cortex_close(mw_cortex *c);
const char *mw_cortex_errmsg(const mw_cortex *c);

/* A quick health probe (a read of the schema); 0 or MW_EUNAVAIL + reason. */
int mw_cortex_check(mw_cortex *c);

int mw_cortex_begin(mw_cortex *c);
int mw_cortex_commit(mw_cortex *c);
void mw_cortex_rollback(mw_cortex *c);

/* Applies one `fact` entry of (actor, cursor, ts): idempotent (applying the
 * same entry twice changes nothing).  The body (canonical JSON) is one of
 *   {"node": {"key", "kind", "label", "props"?}, "trust"?}
 *   {"edge": {"from", "rel", "to", "weight"?, "props"?}, "trust"?}
 *   {"promote": {"node": key} | {"edge": {"from", "rel", "to"}}}
 *   {"retract": {"node": key} | {"edge": {"from", "rel", "to"}}}
 *   {"facts": [ any of the above ... ]}           (several in one entry)
 * trust defaults to "claim".  Keys and relations: 1-128 of A-Z a-z 0-9 _ . : / -
 * (MW_EINVAL otherwise).  An edge naming a node that does not exist creates
 * that node (kind "unknown", label = key, trust "claim"): never dangling. */
int mw_cortex_apply(mw_cortex *c, const char *actor, int64_t cursor, int64_t ts,
                    const char *body, size_t len);
/* Validates a fact body without applying it (the guard uses this). */
int mw_cortex_validate(const char *body, size_t len, char *err, size_t errlen);

/* Per stream (actor): the last cursor applied. */
int mw_cortex_applied(mw_cortex *c, const char *actor, int64_t *cursor);
int mw_cortex_set_applied(mw_cortex *c, const char *actor, int64_t cursor);

/* Removes everything (for a rebuild). */
int mw_cortex_clear(mw_cortex *c);

typedef struct mw_nav {
  const char *hint;      /* full-text seeds (searched as plain text, never FTS syntax) */
  const char *from;      /* a node key: neighbours of it */
  const char *to;        /* with from: the shortest path from -> to */
  int depth;             /* neighbours to this depth (default 1, max 4) */
  int limit;             /* max nodes (default 20, max 500) */
  const char *const *rels; int nrels;   /* relation filter */
  int history;           /* include superseded versions (never in a briefing) */
} mw_nav;

/* Appends {"edges":[...],"nodes":[...]} (canonical JSON) to out.  Nodes:
 * {"key","kind","label","props","trust","valid_from","valid_to","actor","cursor","score"?};
 * edges: {"from","rel","to","weight","props","trust","valid_from","valid_to","actor","cursor"}.
 * With hint (and no from): seeds by bm25 x recency (recency relative to the
 * newest fact, never the wall clock), their 1-hop edges, cut to limit. */
int mw_cortex_navigate(mw_cortex *c, const mw_nav *nav, mw_buf *out);

/* Appends a canonical dump of the whole graph (current and history) for
 * comparing a live Cortex with a rebuilt one. */
int mw_cortex_dump(mw_cortex *c, mw_buf *out);
#endif
