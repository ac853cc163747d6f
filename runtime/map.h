/* map.h -- a string-keyed hash map (open addressing, owned key copies).
 * Values are the caller's; the map never frees them. */
#ifndef MW_MAP_H
#define MW_MAP_H
#include <stddef.h>

typedef struct mw_map {
  struct mw_map_slot *slots;
  size_t cap, len, used;   /* used counts tombstones too */
} mw_map;

void *mw__map_get(const mw_map *m, const char *key);
int mw__map_put(mw_map *m, const char *key, void *val);   /* 0 or MW_ENOMEM; replaces */
void *mw__map_del(mw_map *m, const char *key);             /* returns the removed value */
/* Iterates: *i starts at 0; returns the next value or NULL at the end. */
void *mw__map_next(const mw_map *m, size_t *i, const char **key);
void mw__map_free(mw_map *m);
#endif
