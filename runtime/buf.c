/* buf.c -- growable byte buffer. */
#include "buf.h"
#include "mw.h"
#include <stdlib.h>
#include <string.h>

int mw__buf_reserve(mw_buf *b, size_t extra) {
  if (b->cap - b->len > extra) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap - b->len <= extra) {
    if (cap > ((size_t)-1) / 2) return MW_ENOMEM;
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return MW_ENOMEM;
  b->p = p;
  b->cap = cap;
  return 0;
}

int mw__buf_add(mw_buf *b, const void *p, size_t n) {
  if (mw__buf_reserve(b, n)) return MW_ENOMEM;
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

int mw__buf_addc(mw_buf *b, char c) { return mw__buf_add(b, &c, 1); }
int mw__buf_addstr(mw_buf *b, const char *s) { return mw__buf_add(b, s, strlen(s)); }

void mw__buf_free(mw_buf *b) {
  if (!b) return;
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void mw_buf_free(mw_buf *b) { mw__buf_free(b); }
