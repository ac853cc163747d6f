/* lmw.h -- the Lua module's entry points for the host. */
#ifndef MW_LMW_H
#define MW_LMW_H
#include <lua.h>
int luaopen_mw(lua_State *L);
int mw__lua_open_json(lua_State *L);   /* [-0, +1] the json table alone */
/* pairs and next that visit keys in sorted order (numbers, then strings by
 * bytes, then booleans): what every script whose output is compared by bytes
 * iterates with (fold.c). */
int mw__lua_sorted_pairs(lua_State *L);
int mw__lua_sorted_next(lua_State *L);
/* [-1, +1] message handler: a readable message with a traceback (fold.c). */
int mw__lua_msgh(lua_State *L);
#endif
