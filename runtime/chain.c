/* chain.c -- SHA-256 and HMAC-SHA-256 over the log's entry framing.
 * The framing is length-prefixed so that no two different entries can share
 * bytes; changing it changes every hash, so it carries a version tag. */
#include "chain.h"
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

struct mw_chain {
  EVP_MD_CTX *md;
  EVP_MD *sha;                 /* fetched once: a lookup per entry was 40% of verify */
  EVP_MAC *mac;                /* keyed chains: one HMAC context, re-initialised per entry */
  EVP_MAC_CTX *macctx;
  unsigned char key[64];
  size_t keylen;
  int keyed;
  unsigned char *frame;  /* scratch for one entry's framing */
  size_t framecap;
};

static const char ENTRY_TAG[] = "mw.entry.v1";   /* with its NUL */
static const char GENESIS_TAG[] = "mw.genesis.v1";

mw_chain *mw__chain_new(const unsigned char *key, size_t keylen) {
  mw_chain *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->md = EVP_MD_CTX_new();
  c->sha = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (!c->md || !c->sha) {
    EVP_MD_CTX_free(c->md);
    EVP_MD_free(c->sha);
    free(c);
    return NULL;
  }
  if (key) {
    /* HMAC keys longer than the block are hashed first (RFC 2104). */
    if (keylen > sizeof c->key) {
      mw__sha256(key, keylen, c->key);
      c->keylen = 32;
    } else {
      memcpy(c->key, key, keylen);
      c->keylen = keylen;
    }
    c->keyed = 1;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    c->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    c->macctx = c->mac ? EVP_MAC_CTX_new(c->mac) : NULL;
    if (!c->macctx || !EVP_MAC_init(c->macctx, c->key, c->keylen, params)) {
      mw__chain_free(c);
      return NULL;
    }
  }
  return c;
}

void mw__chain_free(mw_chain *c) {
  if (!c) return;
  EVP_MD_CTX_free(c->md);
  EVP_MD_free(c->sha);
  EVP_MAC_CTX_free(c->macctx);
  EVP_MAC_free(c->mac);
  free(c->frame);
  memset(c->key, 0, sizeof c->key);
  free(c);
}

int mw__chain_keyed(const mw_chain *c) { return c->keyed; }

static void digest(mw_chain *c, const unsigned char *p, size_t n, unsigned char out[32]) {
  if (c->keyed) {
    size_t len = 32;
    /* NULL key: restart with the key set at creation */
    EVP_MAC_init(c->macctx, NULL, 0, NULL);
    EVP_MAC_update(c->macctx, p, n);
    EVP_MAC_final(c->macctx, out, &len, 32);
    return;
  }
  unsigned int len = 32;
  EVP_DigestInit_ex(c->md, c->sha, NULL);
  EVP_DigestUpdate(c->md, p, n);
  EVP_DigestFinal_ex(c->md, out, &len);
}

static unsigned char *put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
  return p + 4;
}

static unsigned char *put_u64(unsigned char *p, uint64_t v) {
  p = put_u32(p, (uint32_t)(v >> 32));
  return put_u32(p, (uint32_t)v);
}

static int reserve(mw_chain *c, size_t n) {
  if (n <= c->framecap) return 0;
  size_t cap = c->framecap ? c->framecap : 256;
  while (cap < n) cap *= 2;
  unsigned char *f = realloc(c->frame, cap);
  if (!f) return -1;
  c->frame = f;
  c->framecap = cap;
  return 0;
}

void mw__chain_genesis(mw_chain *c, const char *tenant, const char *actor, unsigned char out[32]) {
  size_t tn = strlen(tenant), an = strlen(actor);
  unsigned char buf[sizeof GENESIS_TAG + 8 + 2 * 256];
  unsigned char *p = buf;
  if (tn > 256) tn = 256;   /* ids are at most 64 bytes; guard the stack anyway */
  if (an > 256) an = 256;
  memcpy(p, GENESIS_TAG, sizeof GENESIS_TAG); p += sizeof GENESIS_TAG;
  p = put_u32(p, (uint32_t)tn); memcpy(p, tenant, tn); p += tn;
  p = put_u32(p, (uint32_t)an); memcpy(p, actor, an); p += an;
  digest(c, buf, (size_t)(p - buf), out);
}

int mw__chain_entry(mw_chain *c, const unsigned char prev[32], int64_t cursor, int64_t ts,
                    const char *kind, size_t kind_len, const char *body, size_t body_len,
                    unsigned char out[32]) {
  size_t n = sizeof ENTRY_TAG + 32 + 8 + 8 + 4 + kind_len + 4 + body_len;
  if (body_len > UINT32_MAX || kind_len > UINT32_MAX || reserve(c, n)) return -1;
  unsigned char *p = c->frame;
  memcpy(p, ENTRY_TAG, sizeof ENTRY_TAG); p += sizeof ENTRY_TAG;
  memcpy(p, prev, 32); p += 32;
  p = put_u64(p, (uint64_t)cursor);
  p = put_u64(p, (uint64_t)ts);
  p = put_u32(p, (uint32_t)kind_len); memcpy(p, kind, kind_len); p += kind_len;
  p = put_u32(p, (uint32_t)body_len); memcpy(p, body, body_len); p += body_len;
  digest(c, c->frame, n, out);
  return 0;
}

void mw__sha256(const void *p, size_t n, unsigned char out[32]) {
  unsigned int len = 32;
  EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

void mw__hex(const unsigned char *p, size_t n, char *out) {
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hx[p[i] >> 4];
    out[2 * i + 1] = hx[p[i] & 15];
  }
  out[2 * n] = '\0';
}

static int nib(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int mw__unhex(const char *s, unsigned char *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int hi = nib(s[2 * i]), lo = hi < 0 ? -1 : nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  return s[2 * n] == '\0' ? 0 : -1;
}

int mw__random(unsigned char *out, size_t n) {
  return RAND_bytes(out, (int)n) == 1 ? 0 : -1;
}
