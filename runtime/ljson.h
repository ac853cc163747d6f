/* ljson.h -- canonical JSON <-> Lua values.  Arrays decode into tables with
 * the metatable "mw.array", objects into tables with "mw.object", null into
 * the light userdata NULL (the same value as cjson.null), so that [] and {}
 * and 2^63-1 survive every round trip through Lua. */
#ifndef MW_LJSON_H
#define MW_LJSON_H
#include <lua.h>
#include "buf.h"

/* Creates (once per state) the metatables "mw.array" and "mw.object". */
void mw__ljson_init(lua_State *L);

/* Pushes the Lua value of the JSON text s[0..n).  The text must be valid
 * JSON (canonical or not; it is validated as it is read).  Returns 0 and
 * pushes one value, or MW_EJSON / MW_ENOMEM with err filled and pushes
 * nothing.  Never raises except on Lua memory errors (call it protected). */
int mw__ljson_decode(lua_State *L, const char *s, size_t n, char *err, size_t errlen);

/* Appends the canonical JSON of the value at idx to out.  Tables: metatable
 * mw.array -> array; mw.object -> object; otherwise a non-empty table whose
 * keys are exactly 1..n -> array, an empty table -> object, string keys ->
 * object; mixed keys, non-string non-sequence keys, functions, userdata other
 * than null, NaN/inf, cycles and depth > 256 -> MW_EJSON with err naming the
 * path ("state.items[3]: function").  Does not pop.  Raises only on memory. */
int mw__ljson_encode(lua_State *L, int idx, mw_buf *out, char *err, size_t errlen);

#endif
