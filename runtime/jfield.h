/* jfield.h -- reading fields out of canonical JSON text without building a
 * tree: the engine takes request fields this way and passes values on as
 * bytes.  Input must already be valid canonical JSON (mw__json_canon). */
#ifndef MW_JFIELD_H
#define MW_JFIELD_H
#include <stddef.h>
#include <stdint.h>

/* The raw span of the value of top-level member `key` of an object; 0 when
 * found, -1 when absent or the text is not an object. */
int mw__jfield(const char *json, size_t n, const char *key, const char **v, size_t *vn);
/* 1 when the text (canonical) is an object. */
int mw__jis_object(const char *json, size_t n);
/* Unescapes a JSON string literal span into out (NUL-terminated, at most
 * cap-1 bytes); -1 if the span is not a string or does not fit. */
int mw__jstring(const char *v, size_t vn, char *out, size_t cap);
/* Parses an integer span; -1 if it is not an integer in int64. */
int mw__jint(const char *v, size_t vn, int64_t *out);
#endif
