/* corpus.h -- the sweep's durable record per stream: how far the sweep has
 * folded the log (its cursor) and the corpus it produced, written together
 * in one statement so that they can never disagree.  Storage layer. */
#ifndef MW_CORPUS_H
#define MW_CORPUS_H
#include <stdint.h>
#include "buf.h"
#include "mw.h"

/* Loads the record: *cursor = 0 and out empty when there is none or it was
 * made by another sweep script (fingerprint fp). */
int mw__corpus_get(mw_store *s, int64_t stream, const char *fp, int64_t *cursor, mw_buf *out);
int mw__corpus_put(mw_store *s, int64_t stream, const char *fp, int64_t cursor, const char *corpus, size_t len);
/* The consolidation point of (tenant, actor, source): the horizon the next
 * delta pulls from (canonical JSON; empty when none). */
int mw__consolidation_get(mw_store *s, const char *tenant, const char *actor, const char *source, mw_buf *out);
int mw__consolidation_put(mw_store *s, const char *tenant, const char *actor, const char *source,
                          const char *horizon, size_t len, int64_t at);
#endif
