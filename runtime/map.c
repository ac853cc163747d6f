/* map.c -- string-keyed hash map with linear probing and tombstones. */
#include "map.h"
#include "mw.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct mw_map_slot {
  char *key;        /* NULL: empty; TOMB: deleted */
  void *val;
  uint64_t hash;
};

static char TOMB_[1];
#define TOMB TOMB_

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static struct mw_map_slot *find(const mw_map *m, const char *key, uint64_t h) {
  if (!m->cap) return NULL;
  for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    struct mw_map_slot *s = &m->slots[i];
    if (!s->key) return NULL;
    if (s->key != TOMB && s->hash == h && strcmp(s->key, key) == 0) return s;
  }
}

void *mw__map_get(const mw_map *m, const char *key) {
  struct mw_map_slot *s = find(m, key, fnv(key));
  return s ? s->val : NULL;
}

static int grow(mw_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 16;
  if (m->len * 4 < m->cap) cap = m->cap;   /* mostly tombstones: rehash in place size */
  struct mw_map_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return MW_ENOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    struct mw_map_slot *s = &m->slots[i];
    if (!s->key || s->key == TOMB) continue;
    size_t j = s->hash & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->len;
  return 0;
}

int mw__map_put(mw_map *m, const char *key, void *val) {
  uint64_t h = fnv(key);
  struct mw_map_slot *s = find(m, key, h);
  if (s) {
    s->val = val;
    return 0;
  }
  if ((m->used + 1) * 4 >= m->cap * 3 && grow(m)) return MW_ENOMEM;
  char *k = strdup(key);
  if (!k) return MW_ENOMEM;
  size_t i = h & (m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != TOMB) i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key) m->used++;
  m->slots[i] = (struct mw_map_slot){k, val, h};
  m->len++;
  return 0;
}

void *mw__map_del(mw_map *m, const char *key) {
  struct mw_map_slot *s = find(m, key, fnv(key));
  if (!s) return NULL;
  void *v = s->val;
  free(s->key);
  s->key = TOMB;
  s->val = NULL;
  m->len--;
  return v;
}

void *mw__map_next(const mw_map *m, size_t *i, const char **key) {
  for (; *i < m->cap; (*i)++) {
    struct mw_map_slot *s = &m->slots[*i];
    if (s->key && s->key != TOMB) {
      (*i)++;
      if (key) *key = s->key;
      return s->val;
    }
  }
  return NULL;
}

void mw__map_free(mw_map *m) {
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key && m->slots[i].key != TOMB) free(m->slots[i].key);
  free(m->slots);
  memset(m, 0, sizeof *m);
}
