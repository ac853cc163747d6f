/* jlex.h -- the byte-level pieces every JSON reader of the host shares:
 * UTF-8 validation, the run of string bytes that needs no decoding, \uXXXX
 * digits.  Inline: they sit in the tightest loops (json.c, ljson.c, sources.c). */
#ifndef MW_JLEX_H
#define MW_JLEX_H
#include <stddef.h>

static inline int mw__isdigit(unsigned c) { return c - '0' < 10; }

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0: no
 * overlongs, no encoded surrogates, nothing above U+10FFFF, nothing truncated. */
static inline size_t mw__utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

/* Skips string bytes that need no decoding and are canonical as written:
 * printable ASCII but " and \, and valid UTF-8.  Stops at the closing
 * quote, an escape or a bad byte; returns that index. */
static inline size_t mw__json_plain(const unsigned char *s, size_t i, size_t n) {
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') break;
      i++;
    } else {
      size_t l = mw__utf8_len(s + i, n - i);
      if (!l) break;
      i += l;
    }
  }
  return i;
}

/* The four hex digits of a \uXXXX escape: 0 and *v, or -1. */
static inline int mw__hex4(const unsigned char *s, unsigned *v) {
  unsigned x = 0;
  for (int k = 0; k < 4; k++) {
    unsigned c = s[k] | 0x20; /* folds A-F; digits already have the bit */
    if (mw__isdigit(s[k])) x = x << 4 | (s[k] - '0');
    else if (c >= 'a' && c <= 'f') x = x << 4 | (c - 'a' + 10);
    else return -1;
  }
  *v = x;
  return 0;
}
#endif
