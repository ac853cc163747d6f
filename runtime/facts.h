/* facts.h -- carrying `fact` log entries into a tenant's Cortex.  Facts are
 * logged first (the only atomic step); the Cortex applies them afterwards,
 * idempotently, per stream in cursor order, remembering the last cursor it
 * applied -- so a Cortex that was down catches up, and one rebuilt from the
 * logs alone equals the live one.  Storage layer: no Lua, no libuv. */
#ifndef MW_FACTS_H
#define MW_FACTS_H
#include <stddef.h>
#include <stdint.h>
#include "cortex.h"
#include "mw.h"

/* Applies the stream's fact entries past the Cortex's applied cursor up to
 * `last`.  A fact the Cortex refuses as malformed is skipped (the same way
 * live and in a rebuild); any other failure stops with MW_EUNAVAIL. */
int mw__facts_catch_up(mw_store *s, mw_cortex *cx, int64_t stream, const char *actor, int64_t last,
                       char *err, size_t errlen);
/* The same for every stream of the tenant. */
int mw__facts_catch_up_tenant(mw_store *s, mw_cortex *cx, const char *tenant, char *err, size_t errlen);
/* Clears the Cortex and applies every fact of the tenant's logs. */
int mw__facts_rebuild(mw_store *s, mw_cortex *cx, const char *tenant, char *err, size_t errlen);
#endif
