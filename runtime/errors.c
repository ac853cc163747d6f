/* errors.c -- names, messages and HTTP statuses of MW's status codes, all
 * generated from MW_ERRNO_MAP in mw.h so the table exists once. */
#include "mw.h"

const char *mw_err_name(int err) {
  switch (err) {
#define XX(name, val, http, code, msg) case MW_##name: return #name;
    MW_ERRNO_MAP(XX)
#undef XX
    case 0: return "OK";
  }
  return "EUNKNOWN";
}

const char *mw_err_code(int err) {
  switch (err) {
#define XX(name, val, http, code, msg) case MW_##name: return code;
    MW_ERRNO_MAP(XX)
#undef XX
  }
  return "internal";
}

const char *mw_strerror(int err) {
  switch (err) {
#define XX(name, val, http, code, msg) case MW_##name: return msg;
    MW_ERRNO_MAP(XX)
#undef XX
    case 0: return "ok";
  }
  return "unknown error";
}

int mw_err_http(int err) {
  switch (err) {
#define XX(name, val, http, code, msg) case MW_##name: return http;
    MW_ERRNO_MAP(XX)
#undef XX
    case 0: return 200;
  }
  return 500;
}
