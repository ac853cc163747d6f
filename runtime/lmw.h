/* lmw.h -- the Lua module's entry points for the host. */
#ifndef MW_LMW_H
#define MW_LMW_H
#include <lua.h>
int luaopen_mw(lua_State *L);
int mw__lua_open_json(lua_State *L);   /* [-0, +1] the json table alone */
#endif
