/* jfield.c -- top-level member lookup over canonical JSON (see jfield.h).
 * Relies on the input being valid: it skips values by structure only. */
#include "jfield.h"
#include <stdlib.h>
#include <string.h>

/* Returns the index just past the string starting at i (s[i] == '"'). */
static size_t skip_string(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

static size_t skip_value(const char *s, size_t n, size_t i) {
  if (i >= n) return n;
  if (s[i] == '"') return skip_string(s, n, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    for (; i < n; i++) {
      char c = s[i];
      if (c == '"') { i = skip_string(s, n, i) - 1; continue; }
      if (c == '{' || c == '[') depth++;
      else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return n;
  }
  while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
  return i;
}

int mw__jis_object(const char *json, size_t n) { return n >= 2 && json[0] == '{'; }

int mw__jfield(const char *s, size_t n, const char *key, const char **v, size_t *vn) {
  if (!mw__jis_object(s, n)) return -1;
  size_t klen = strlen(key), i = 1;
  while (i < n && s[i] == '"') {
    size_t kend = skip_string(s, n, i);        /* past the closing quote */
    int match = kend - i - 2 == klen && memcmp(s + i + 1, key, klen) == 0;
    size_t vstart = kend + 1;                   /* after ':' */
    size_t vend = skip_value(s, n, vstart);
    if (match) {
      *v = s + vstart;
      *vn = vend - vstart;
      return 0;
    }
    i = vend;
    if (i < n && s[i] == ',') i++;
  }
  return -1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int mw__jstring(const char *v, size_t vn, char *out, size_t cap) {
  if (vn < 2 || v[0] != '"' || v[vn - 1] != '"' || cap == 0) return -1;
  size_t o = 0;
  for (size_t i = 1; i + 1 < vn; i++) {
    char c = v[i];
    if (c == '\\') {
      char e = v[++i];
      switch (e) {
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {   /* canonical form escapes only U+0000..U+001F this way */
          int a = hexval(v[i + 1]), b = hexval(v[i + 2]), d = hexval(v[i + 3]), f = hexval(v[i + 4]);
          if (a < 0 || b < 0 || d < 0 || f < 0) return -1;
          int cp = a << 12 | b << 8 | d << 4 | f;
          if (cp > 0x7f) return -1;
          c = (char)cp;
          i += 4;
          break;
        }
        default: c = e;
      }
    }
    if (o + 1 >= cap) return -1;
    out[o++] = c;
  }
  out[o] = '\0';
  return (int)o;
}

int mw__jint(const char *v, size_t vn, int64_t *out) {
  char buf[32];
  if (vn == 0 || vn >= sizeof buf) return -1;
  memcpy(buf, v, vn);
  buf[vn] = '\0';
  for (size_t i = 0; i < vn; i++)
    if (!((buf[i] >= '0' && buf[i] <= '9') || (i == 0 && buf[i] == '-'))) return -1;
  char *end;
  long long x = strtoll(buf, &end, 10);
  if (*end) return -1;
  *out = x;
  return 0;
}
