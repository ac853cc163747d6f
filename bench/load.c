/* load.c -- the HTTP load generator of bench/lifecycle.sh.  A bench helper
 * only: never linked into MW.  One thread per simulated client, each with its
 * own keep-alive TCP connection to 127.0.0.1:PORT and its own actor.
 *
 *   load hello -p PORT -c CLIENTS -d SECS [-P SERVER_PID]
 *        GET /healthz in a loop: the ceiling of this server in the same run
 *   load cycle -p PORT -t TOKEN -c CLIENTS -d SECS -s BYTES -a PREFIX [-P PID]
 *        wake -> run (input of BYTES) -> sleep (with a handover), in a loop;
 *        client i drives actor PREFIX<i>
 *   load wake  -p PORT -t TOKEN -a ACTOR[,ACTOR...] -n ITERS [-w WARM] [-P PID]
 *        wake each actor and sleep it (nothing committed, no handover), the
 *        actors in turn, ITERS rounds after WARM uncounted ones (default 5);
 *        prints ACTOR.key lines per actor besides the totals
 *
 * Prints `key value` lines for the driver: requests, rates, client-side and
 * server-side (the answer's latency_ms) p50/p99 per call, non-200 counts,
 * the generator's CPU (getrusage) and the server's (/proc/PID/stat).
 *
 * Build: cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -pthread \
 *           bench/load.c -o build/bench/load */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { C_WAKE, C_RUN, C_SLEEP, C_HELLO, NCALLS };
static const char *const CALL_NAME[NCALLS] = {"wake", "run", "sleep", "hello"};

/* ---- options ------------------------------------------------------------------ */

static const char *mode = "";
static int port = 0, clients = 1, iters = 200;
static double secs = 5;
static size_t payload = 64;
static const char *token = "", *prefix = "bench", *actor = "bench";
static long server_pid = 0;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "load: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

/* ---- samples -------------------------------------------------------------------- */

typedef struct {
  double *v;
  size_t n, cap;
} samples;

static void add(samples *s, double x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1024;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    if (!s->v) die("out of memory");
  }
  s->v[s->n++] = x;
}

static void merge(samples *dst, const samples *src) {
  for (size_t i = 0; i < src->n; i++) add(dst, src->v[i]);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted set; -1 when empty. */
static double pct(const samples *s, double p) {
  if (!s->n) return -1;
  size_t k = (size_t)(p * (double)s->n);
  if (k >= s->n) k = s->n - 1;
  return s->v[k];
}

/* ---- per client ------------------------------------------------------------------ */

typedef struct {
  int id, fd;
  char name[80];             /* wake mode: the actor */
  char *in;                    /* response buffer */
  size_t in_cap, in_len;
  char *out;                   /* request buffer */
  size_t out_cap;
  samples client[NCALLS], server[NCALLS];   /* ms */
  uint64_t ok[NCALLS], bad[NCALLS], reconnects, cycles;
  int64_t replayed_min, replayed_max;
  long state_bytes, wake_bytes;
  char first_error[512];
  pthread_t th;
} client;

static pthread_barrier_t start_line;
static double t_start, t_deadline;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static int errors_printed;

static void conn_open(client *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) die("socket");
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a)) die("connect");
  c->in_len = 0;
}

static void ensure(char **p, size_t *cap, size_t need) {
  if (need <= *cap) return;
  size_t n = *cap ? *cap : 4096;
  while (n < need) n *= 2;
  *p = realloc(*p, n);
  if (!*p) die("out of memory");
  *cap = n;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads one response; returns the status (body at *body, *blen bytes, NUL
 * terminated) or -1 when the connection broke. */
static int read_response(client *c, char **body, size_t *blen) {
  size_t hdr_end = 0, scanned = 0;
  for (;;) {
    for (size_t i = scanned; i + 4 <= c->in_len; i++)
      if (!memcmp(c->in + i, "\r\n\r\n", 4)) {
        hdr_end = i + 4;
        break;
      }
    if (hdr_end) break;
    scanned = c->in_len >= 3 ? c->in_len - 3 : 0;
    ensure(&c->in, &c->in_cap, c->in_len + 16384);
    ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c->in_len += (size_t)r;
  }
  c->in[hdr_end - 1] = '\0';
  int status = 0;
  if (sscanf(c->in, "HTTP/1.%*d %d", &status) != 1) return -1;
  size_t clen = 0;
  int closing = 0;
  for (char *l = strstr(c->in, "\r\n"); l && l < c->in + hdr_end; l = strstr(l + 2, "\r\n")) {
    if (!strncasecmp(l + 2, "Content-Length:", 15)) clen = strtoul(l + 17, NULL, 10);
    else if (!strncasecmp(l + 2, "Connection: close", 17)) closing = 1;
  }
  ensure(&c->in, &c->in_cap, hdr_end + clen + 1);
  while (c->in_len < hdr_end + clen) {
    ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c->in_len += (size_t)r;
  }
  *body = c->in + hdr_end;
  *blen = clen;
  c->in[hdr_end + clen] = '\0';   /* room: ensure() left one byte past */
  /* one request in flight at a time, so nothing should follow the body */
  c->in_len = 0;
  if (closing) c->reconnects++, conn_open(c);
  return status;
}

/* Sends one request and reads its answer; the client-side latency goes to
 * client[call], latency_ms of a 200 to server[call].  Returns the status. */
static int call(client *c, int call, const char *method, const char *path, const char *body, size_t blen,
                char **resp, size_t *rlen) {
  char head[512];
  int hn;
  if (body)
    hn = snprintf(head, sizeof head,
                  "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                  method, path, token, blen);
  else
    hn = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", method, path);
  ensure(&c->out, &c->out_cap, (size_t)hn + blen);
  memcpy(c->out, head, (size_t)hn);
  if (body) memcpy(c->out + hn, body, blen);
  for (int attempt = 0;; attempt++) {
    double t0 = now_s();
    int status = -1;
    if (write_all(c->fd, c->out, (size_t)hn + blen) == 0) status = read_response(c, resp, rlen);
    double ms = (now_s() - t0) * 1e3;
    if (status < 0) {   /* the connection broke: reconnect once and retry */
      c->reconnects++;
      conn_open(c);
      if (attempt == 0) continue;
      c->bad[call]++;
      return -1;
    }
    add(&c->client[call], ms);
    if (status == 200) {
      c->ok[call]++;
      const char *l = strstr(*resp, "\"latency_ms\":");
      if (l) add(&c->server[call], strtod(l + 13, NULL));
    } else {
      c->bad[call]++;
      if (!c->first_error[0])
        snprintf(c->first_error, sizeof c->first_error, "%s %s -> %d %.300s", method, path, status, *resp);
      pthread_mutex_lock(&err_lock);
      if (errors_printed++ < 5) fprintf(stderr, "load: client %d: %s %s -> %d %.300s\n", c->id, method, path, status, *resp);
      pthread_mutex_unlock(&err_lock);
    }
    return status;
  }
}

/* The length of the JSON value at p (an object, array, string or scalar). */
static size_t json_len(const char *p) {
  const char *s = p;
  int depth = 0;
  do {
    if (*p == '"') {
      for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
    } else if (*p == '{' || *p == '[') {
      depth++;
    } else if (*p == '}' || *p == ']') {
      depth--;
    } else if (depth == 0 && (*p == ',' || *p == '\0')) {
      return (size_t)(p - s);
    }
    if (*p) p++;
  } while (*p && depth > 0);
  return (size_t)(p - s);
}

static int session_of(const char *resp, char *sid, size_t cap) {
  const char *p = strstr(resp, "\"session_id\":\"");
  if (!p) return -1;
  p += 14;
  size_t n = strcspn(p, "\"");
  if (n == 0 || n >= cap) return -1;
  memcpy(sid, p, n);
  sid[n] = '\0';
  return 0;
}

/* What the wake answered about its replay and state size. */
static void note_wake(client *c, const char *resp, size_t rlen) {
  const char *r = strstr(resp, "\"replayed\":");
  if (r) {
    int64_t v = strtoll(r + 11, NULL, 10);
    if (c->replayed_min < 0 || v < c->replayed_min) c->replayed_min = v;
    if (v > c->replayed_max) c->replayed_max = v;
  }
  const char *bp = strstr(resp, "\"boot_packet\":");
  const char *st = bp ? strstr(bp, ",\"state\":") : NULL;
  if (st) c->state_bytes = (long)json_len(st + 9);
  c->wake_bytes = (long)rlen;
}

static char *run_body(size_t n, size_t *len) {
  /* {"session_id":"<sid>","input":{"text":"xxxx"}} -- the sid is spliced in per call */
  char *b = malloc(n + 1);
  if (!b) die("out of memory");
  for (size_t i = 0; i < n; i++) b[i] = (char)('a' + (i * 7) % 26);
  b[n] = '\0';
  *len = n;
  return b;
}

static char *filler;
static size_t filler_len;

static void *client_main(void *arg) {
  client *c = arg;
  char buf[256], sid[80], *resp;
  size_t rlen;
  char *req = NULL;
  size_t req_cap = 0;
  conn_open(c);
  pthread_barrier_wait(&start_line);
  if (!strcmp(mode, "hello")) {
    while (now_s() < t_deadline) call(c, C_HELLO, "GET", "/healthz", NULL, 0, &resp, &rlen);
  } else if (!strcmp(mode, "cycle")) {
    char me[80];
    snprintf(me, sizeof me, "%s%d", prefix, c->id);
    while (now_s() < t_deadline) {
      int n = snprintf(buf, sizeof buf, "{\"actor_id\":\"%s\"}", me);
      if (call(c, C_WAKE, "POST", "/v1/wake", buf, (size_t)n, &resp, &rlen) != 200) continue;
      note_wake(c, resp, rlen);
      if (session_of(resp, sid, sizeof sid)) die("wake answered no session_id");
      ensure(&req, &req_cap, filler_len + 256);
      n = snprintf(req, req_cap, "{\"session_id\":\"%s\",\"input\":{\"text\":\"%s\"}}", sid, filler);
      call(c, C_RUN, "POST", "/v1/run", req, (size_t)n, &resp, &rlen);
      n = snprintf(buf, sizeof buf, "{\"session_id\":\"%s\",\"handover\":{\"next\":\"carry on from cycle %llu\"}}",
                   sid, (unsigned long long)c->cycles);
      if (call(c, C_SLEEP, "POST", "/v1/sleep", buf, (size_t)n, &resp, &rlen) == 200) c->cycles++;
    }
  }
  free(req);
  return NULL;
}

/* Wake mode: one thread, the actors in turn (so that the machine's drift
 * touches them alike), WARM uncounted rounds first. */
static void wake_rounds(client *cs, int n, int warm) {
  char buf[256], sid[80], *resp;
  size_t rlen;
  for (int i = 0; i < n; i++) conn_open(&cs[i]);
  for (int round = 0; round < warm + iters; round++) {
    if (round == warm)
      for (int i = 0; i < n; i++) {
        client *c = &cs[i];
        for (int k = 0; k < NCALLS; k++) c->client[k].n = c->server[k].n = 0, c->ok[k] = c->bad[k] = 0;
        c->cycles = 0;
        c->replayed_min = c->replayed_max = -1;
      }
    for (int i = 0; i < n; i++) {
      client *c = &cs[i];
      int m = snprintf(buf, sizeof buf, "{\"actor_id\":\"%s\"}", c->name);
      if (call(c, C_WAKE, "POST", "/v1/wake", buf, (size_t)m, &resp, &rlen) != 200) continue;
      note_wake(c, resp, rlen);
      if (session_of(resp, sid, sizeof sid)) die("wake answered no session_id");
      m = snprintf(buf, sizeof buf, "{\"session_id\":\"%s\"}", sid);
      if (call(c, C_SLEEP, "POST", "/v1/sleep", buf, (size_t)m, &resp, &rlen) == 200) c->cycles++;
    }
  }
}

static void print_calls(const char *pre, samples *cl, samples *sv, const uint64_t *ok, const uint64_t *bad) {
  for (int k = 0; k < NCALLS; k++) {
    if (!ok[k] && !bad[k]) continue;
    qsort(cl[k].v, cl[k].n, sizeof(double), cmp_double);
    qsort(sv[k].v, sv[k].n, sizeof(double), cmp_double);
    printf("%s%s_ok %llu\n%s%s_non200 %llu\n", pre, CALL_NAME[k], (unsigned long long)ok[k], pre, CALL_NAME[k],
           (unsigned long long)bad[k]);
    printf("%s%s_client_p50_ms %.3f\n%s%s_client_p99_ms %.3f\n", pre, CALL_NAME[k], pct(&cl[k], .50), pre,
           CALL_NAME[k], pct(&cl[k], .99));
    if (sv[k].n)
      printf("%s%s_server_p50_ms %.3f\n%s%s_server_p99_ms %.3f\n%s%s_server_max_ms %.3f\n", pre, CALL_NAME[k],
             pct(&sv[k], .50), pre, CALL_NAME[k], pct(&sv[k], .99), pre, CALL_NAME[k], sv[k].v[sv[k].n - 1]);
  }
}

/* ---- CPU ------------------------------------------------------------------------- */

static double self_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* utime + stime of the server, seconds; -1 when unknown. */
static double server_cpu(void) {
  if (server_pid <= 0) return -1;
  char path[64], line[2048];
  snprintf(path, sizeof path, "/proc/%ld/stat", server_pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  char *p = strrchr(line, ')');
  if (!p) return -1;
  /* after ") ": field 3 (state) ... field 14 utime, 15 stime */
  unsigned long long ut = 0, st = 0;
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Busy CPU seconds of the whole machine (all cores), from /proc/stat; -1 when unknown. */
static double host_busy(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                 &v[7]);
  fclose(f);
  if (n < 5) return -1;
  unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];   /* all but idle and iowait */
  return (double)busy / (double)sysconf(_SC_CLK_TCK);
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(void) {
  fputs("usage: load hello|cycle|wake -p PORT [-t TOKEN] [-c CLIENTS] [-d SECS] [-s BYTES]\n"
        "            [-a PREFIX | ACTOR,ACTOR...] [-n ITERS] [-w WARM] [-P SERVER_PID]\n", stderr);
  exit(2);
}

int main(int argc, char **argv) {
  int warm = 5;
  if (argc < 2) usage();
  mode = argv[1];
  if (strcmp(mode, "hello") && strcmp(mode, "cycle") && strcmp(mode, "wake")) usage();
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    const char *o = argv[i], *v = argv[++i];
    if (!strcmp(o, "-p")) port = atoi(v);
    else if (!strcmp(o, "-t")) token = v;
    else if (!strcmp(o, "-c")) clients = atoi(v);
    else if (!strcmp(o, "-d")) secs = atof(v);
    else if (!strcmp(o, "-s")) payload = strtoul(v, NULL, 10);
    else if (!strcmp(o, "-a")) prefix = actor = v;
    else if (!strcmp(o, "-n")) iters = atoi(v);
    else if (!strcmp(o, "-P")) server_pid = atol(v);
    else if (!strcmp(o, "-w")) warm = atoi(v);
    else usage();
  }
  if (port <= 0 || clients <= 0) usage();
  int waking = !strcmp(mode, "wake");
  if (waking) {   /* -a a,b,c: one client per actor, all on this thread */
    clients = 1;
    for (const char *p = actor; *p; p++) clients += *p == ',';
  }
  filler = run_body(payload, &filler_len);

  client *cs = calloc((size_t)clients, sizeof *cs);
  if (!cs) die("out of memory");
  for (int i = 0; i < clients; i++) {
    cs[i].id = i;
    cs[i].fd = -1;
    cs[i].replayed_min = -1;
  }
  double cpu0 = self_cpu(), scpu0 = server_cpu(), host0 = host_busy();
  if (waking) {
    const char *p = actor;
    for (int i = 0; i < clients; i++) {
      size_t n = strcspn(p, ",");
      if (n == 0 || n >= sizeof cs[i].name) usage();
      memcpy(cs[i].name, p, n);
      p += n + (p[n] == ',');
    }
    t_start = now_s();
    wake_rounds(cs, clients, warm);
  } else {
    pthread_barrier_init(&start_line, NULL, (unsigned)clients + 1);
    for (int i = 0; i < clients; i++)
      if (pthread_create(&cs[i].th, NULL, client_main, &cs[i])) die("pthread_create");
    t_start = now_s();
    t_deadline = t_start + secs;
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < clients; i++) pthread_join(cs[i].th, NULL);
  }
  double elapsed = now_s() - t_start;
  double cpu = self_cpu() - cpu0, scpu1 = server_cpu();
  double scpu = scpu0 >= 0 && scpu1 >= 0 ? scpu1 - scpu0 : -1;
  double host1 = host_busy(), host = host0 >= 0 && host1 >= 0 ? host1 - host0 : -1;

  samples cl[NCALLS] = {{0}}, sv[NCALLS] = {{0}};
  uint64_t ok[NCALLS] = {0}, bad[NCALLS] = {0}, reconnects = 0, cycles = 0, requests = 0, non200 = 0;
  int64_t rmin = -1, rmax = -1;
  long state_bytes = -1, wake_bytes = -1;
  const char *first_error = NULL;
  for (int i = 0; i < clients; i++) {
    client *c = &cs[i];
    for (int k = 0; k < NCALLS; k++) {
      merge(&cl[k], &c->client[k]);
      merge(&sv[k], &c->server[k]);
      ok[k] += c->ok[k];
      bad[k] += c->bad[k];
    }
    reconnects += c->reconnects;
    cycles += c->cycles;
    if (c->replayed_min >= 0 && (rmin < 0 || c->replayed_min < rmin)) rmin = c->replayed_min;
    if (c->replayed_max > rmax) rmax = c->replayed_max;
    if (c->state_bytes > state_bytes) state_bytes = c->state_bytes;
    if (c->wake_bytes > wake_bytes) wake_bytes = c->wake_bytes;
    if (c->first_error[0] && !first_error) first_error = c->first_error;
  }
  for (int k = 0; k < NCALLS; k++) {
    requests += ok[k] + bad[k];
    non200 += bad[k];
  }

  printf("mode %s\nclients %d\nelapsed_s %.3f\nrequests %llu\nnon200 %llu\nreconnects %llu\n", mode, clients,
         elapsed, (unsigned long long)requests, (unsigned long long)non200, (unsigned long long)reconnects);
  printf("rps %.1f\n", (double)requests / elapsed);
  if (strcmp(mode, "hello")) {
    printf("cycles %llu\ncycles_per_s %.1f\n", (unsigned long long)cycles, (double)cycles / elapsed);
    printf("payload_bytes %zu\nstate_bytes %ld\nwake_bytes %ld\nreplayed_min %lld\nreplayed_max %lld\n", payload,
           state_bytes, wake_bytes, (long long)rmin, (long long)rmax);
  }
  print_calls("", cl, sv, ok, bad);
  if (waking)   /* per actor: NAME.key */
    for (int i = 0; i < clients; i++) {
      client *c = &cs[i];
      char pre[96];
      snprintf(pre, sizeof pre, "%s.", c->name);
      printf("%sstate_bytes %ld\n%swake_bytes %ld\n%sreplayed_min %lld\n%sreplayed_max %lld\n", pre, c->state_bytes,
             pre, c->wake_bytes, pre, (long long)c->replayed_min, pre, (long long)c->replayed_max);
      print_calls(pre, c->client, c->server, c->ok, c->bad);
    }
  printf("gen_cpu_s %.3f\ngen_cpu_us_per_req %.1f\n", cpu, requests ? cpu * 1e6 / (double)requests : 0);
  if (scpu >= 0) {
    printf("server_cpu_s %.3f\nserver_cpu_us_per_req %.1f\n", scpu, requests ? scpu * 1e6 / (double)requests : 0);
    if (cycles) printf("server_cpu_us_per_cycle %.1f\n", scpu * 1e6 / (double)cycles);
  }
  if (host >= 0) {   /* what the rest of the machine burnt meanwhile: the run's noise */
    printf("host_busy_cpu_s %.3f\nhost_cores %ld\n", host, sysconf(_SC_NPROCESSORS_ONLN));
    if (scpu >= 0) printf("other_cpu_s %.3f\nother_cpu_share %.2f\n", host - cpu - scpu, (host - cpu - scpu) / elapsed);
  }
  if (first_error) printf("first_error %s\n", first_error);
  return 0;
}
