/* sources.h -- pulling what a source has new since a horizon, without ever
 * blocking the loop: files, folders and other actors' logs are read on the
 * thread pool, feeds are fetched there with a deadline, git runs through
 * libuv's process API.  A source is blind to subject: items carry no subject
 * here (the policy tags them).  No Lua. */
#ifndef MW_SOURCES_H
#define MW_SOURCES_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "buf.h"

/* Locators:
 *   file:/abs/path   lines appended since the last offset (survives rotation
 *                    and truncation: a new inode or a shorter file restarts at 0)
 *   dir:/abs/path    regular files added or changed since the horizon (mtime)
 *   git:/abs/path    commits of a local repository since the last one seen
 *   http://host:port/path   a JSON, RSS or Atom feed (plain HTTP, capped size)
 *   log:ACTOR        another actor's log in the same tenant, since a cursor
 * Paths must resolve (symlinks followed) under one of the operator's roots;
 * ".." is refused outright. */

typedef struct mw_pull_req {
  const char *home;                 /* for log: (opens its own read connection) */
  const char *tenant;
  const char *source_id;
  const char *locator;
  const char *horizon;              /* canonical JSON from the last pull, or NULL */
  uint64_t deadline_ms;             /* 0: 5000 */
  size_t max_items;                 /* 0: 10000 */
  size_t max_bytes;                 /* 0: 8 MiB (a feed over it is an error) */
  const char *const *roots;
  int nroots;
} mw_pull_req;

typedef struct mw_pull_res {
  int rc;                           /* 0, MW_ETIMEOUT, MW_EINVAL, MW_ENOENT, MW_EUNAVAIL ... */
  char error[512];                  /* a clear message when rc != 0 */
  mw_buf items;                     /* canonical JSON array; each item has at least "id"
                                       (unique within the source) and "kind" */
  mw_buf horizon;                   /* canonical JSON: the new consolidation point */
} mw_pull_res;

/* Called exactly once on the loop thread; res (and its buffers) are valid
 * only during the call. */
typedef void (*mw_pull_cb)(void *ud, mw_pull_res *res);

/* Copies what it needs from req.  Returns 0 (cb will be called), or an error
 * code with nothing started. */
int mw__pull_start(uv_loop_t *loop, const mw_pull_req *req, mw_pull_cb cb, void *ud);

/* Validates a locator against the roots without touching anything but the
 * file system's metadata: 0, or MW_EINVAL with a clear message. */
int mw__locator_check(const char *locator, const char *const *roots, int nroots, char *err, size_t errlen);
#endif
