/* json.h -- canonical JSON, the host's own (contract "Canonical JSON"):
 * RFC 8785 with integers in int64 written exactly.  Everything hashed or
 * compared by bytes passes through here.  No SQLite, no libuv. */
#ifndef MW_JSON_H
#define MW_JSON_H
#include <stddef.h>
#include "buf.h"

#define MW_JSON_MAX_DEPTH 256

/* Parse `in` (n bytes, need not be NUL-terminated) and append its canonical
 * form to `out`.  Refuses: syntax errors, trailing data, duplicate keys, lone
 * surrogates (also escaped ones), invalid UTF-8, nesting deeper than 256,
 * numbers that overflow a double (Infinity).  Returns 0, or MW_EJSON with a
 * message in err ("duplicate key \"a\" at byte 12"), or MW_ENOMEM.
 * On failure out->len is restored to what it was. */
int mw__json_canon(const char *in, size_t n, mw_buf *out, char *err, size_t errlen);

/* Append a JSON string literal (RFC 8785 escaping) for s[0..n); s must be
 * valid UTF-8 (returns MW_EJSON otherwise). */
int mw__json_string(mw_buf *out, const char *s, size_t n);

/* Append the ECMAScript/RFC 8785 form of a double (shortest round-trip);
 * MW_EJSON for NaN and infinities. */
int mw__json_double(mw_buf *out, double d);

/* Compare two UTF-8 keys by their UTF-16 code units (RFC 8785 key order). */
int mw__json_keycmp(const char *a, size_t an, const char *b, size_t bn);

#endif
