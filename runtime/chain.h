/* chain.h -- the hash chain's framing and digests (SHA-256, or HMAC-SHA-256
 * when the home has a chain key).  Pure computation: no SQLite, no Lua. */
#ifndef MW_CHAIN_H
#define MW_CHAIN_H
#include <stddef.h>
#include <stdint.h>

typedef struct mw_chain mw_chain;   /* a digest context, reusable, one thread */

/* key may be NULL (plain SHA-256 chain). Returns NULL on allocation failure. */
mw_chain *mw__chain_new(const unsigned char *key, size_t keylen);
void mw__chain_free(mw_chain *c);
int mw__chain_keyed(const mw_chain *c);

/* The first entry's previous hash: binds the stream to (tenant, actor). */
void mw__chain_genesis(mw_chain *c, const char *tenant, const char *actor, unsigned char out[32]);

/* An entry's hash over the framing documented in docs/log-format.md:
 *   "mw.entry.v1" 0x00 | prev[32] | cursor u64be | ts i64be |
 *   kind_len u32be | kind | body_len u32be | body                     */
int mw__chain_entry(mw_chain *c, const unsigned char prev[32], int64_t cursor, int64_t ts,
                    const char *kind, size_t kind_len, const char *body, size_t body_len,
                    unsigned char out[32]);

/* Plain SHA-256 (states, tokens, fingerprints) -- never keyed. */
void mw__sha256(const void *p, size_t n, unsigned char out[32]);
void mw__hex(const unsigned char *p, size_t n, char *out /* 2n+1 */);
int mw__unhex(const char *s, unsigned char *out, size_t n);   /* 0 or -1 */
int mw__random(unsigned char *out, size_t n);                 /* 0 or -1 */
#endif
