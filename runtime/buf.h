/* buf.h -- a growable byte buffer, the one every encoder in the host writes
 * into.  Never frees what it does not own; mw__buf_free on a zeroed buf is a no-op. */
#ifndef MW_BUF_H
#define MW_BUF_H
#include <stddef.h>

#include "mw.h"   /* mw_buf itself is public */

int mw__buf_reserve(mw_buf *b, size_t extra);          /* 0 or MW_ENOMEM */
int mw__buf_add(mw_buf *b, const void *p, size_t n);   /* 0 or MW_ENOMEM */
int mw__buf_addc(mw_buf *b, char c);
int mw__buf_addstr(mw_buf *b, const char *s);
void mw__buf_free(mw_buf *b);
#endif
