/* store_int.h -- what the storage files share inside the storage layer.
 * Not part of the public API. */
#ifndef MW_STORE_INT_H
#define MW_STORE_INT_H
#include <sqlite3.h>
#include "mw.h"

sqlite3 *mw__store_db(mw_store *s);
int mw__store_dbfail(mw_store *s, int rc);          /* maps and records an SQLite failure */
int mw__store_fail(mw_store *s, int code, const char *msg);
sqlite3_stmt *mw__store_stmt(mw_store *s, const char *sql);   /* cached by the text's address */
void mw__store_done(mw_store *s, sqlite3_stmt *st);
#endif
