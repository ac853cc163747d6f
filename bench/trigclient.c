/* trigclient.c -- a helper of bench/triggers.sh: the HTTP side of its figures,
 * on one keep-alive connection to 127.0.0.1:PORT.  A bench helper only.
 *
 *   trigclient wakesleep -p PORT -t TOKEN -a PREFIX -n N
 *        wakes PREFIX1..PREFIXN and sleeps each at once (nothing run):
 *        prints n, non200, secs
 *   trigclient reload -p PORT -t TOKEN -f FILE -n N [-g GAP_MS]
 *        opens a session on actor "reloader"; then N times: overwrites FILE
 *        (open O_TRUNC, write, close) with a skill "ver" whose run returns
 *        a new number, and polls POST /v1/run {"skill":"ver"} on the session
 *        until that number answers.  write->live is from just before the
 *        open() to the end of the first answer that has the new number
 *        (an upper bound: the reload finished during that poll); the
 *        previous poll's send time is a lower bound.  GAP_MS (default 30)
 *        separates versions.  Prints p50/p99/max of both, polls, poll RTT.
 *   trigclient trickle -p PORT -g GAP_MS -n SECS
 *        GET /healthz every GAP_MS for SECS seconds: some traffic, so that the
 *        host's loop wakes at least every GAP_MS
 *   trigclient inotify -d DIR -n N
 *        the bare inotify floor: a thread blocked in read() on an inotify fd
 *        watching DIR with libuv's mask; the main thread overwrites a file in
 *        DIR as `reload` does; latency = just before open() -> the reader
 *        holds the event.  Prints p50/p99/max.
 *
 * Build: cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -pthread \
 *           bench/trigclient.c -o build/bench/trigclient */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port, n = 50, gap_ms = 30;
static const char *token = "", *prefix = "idle", *file = NULL, *dir = NULL;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what) {
  fprintf(stderr, "trigclient: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int k, double p) {
  if (k <= 0) return 0;
  int i = (int)(p * (k - 1) + 0.5);
  return v[i];
}

/* ---- one keep-alive connection -------------------------------------------------- */

static int fd = -1;
static char in[1 << 20];
static size_t in_len;

static void conn_open(void) {
  if (fd >= 0) close(fd);
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect");
  in_len = 0;
}

static void write_all(const char *p, size_t k) {
  while (k) {
    ssize_t w = write(fd, p, k);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write");
    p += w;
    k -= (size_t)w;
  }
}

/* POST path body (GET when body is NULL) -> status; the body of the answer at
 * *resp (NUL terminated). */
static int post(const char *path, const char *body, char **resp) {
  char req[4096];
  int k = body ? snprintf(req, sizeof req,
                          "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                          "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                          path, token, strlen(body), body)
               : snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (k < 0 || (size_t)k >= sizeof req) die("request too long");
  write_all(req, (size_t)k);
  size_t hdr_end = 0;
  in_len = 0;
  for (;;) {
    char *e = in_len >= 4 ? memmem(in, in_len, "\r\n\r\n", 4) : NULL;
    if (e) {
      hdr_end = (size_t)(e - in) + 4;
      break;
    }
    ssize_t r = read(fd, in + in_len, sizeof in - in_len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("read");
    in_len += (size_t)r;
  }
  in[hdr_end - 1] = '\0';
  int status = 0;
  if (sscanf(in, "HTTP/1.%*d %d", &status) != 1) die("bad status line");
  size_t clen = 0;
  for (char *l = strstr(in, "\r\n"); l && l < in + hdr_end; l = strstr(l + 2, "\r\n"))
    if (!strncasecmp(l + 2, "Content-Length:", 15)) clen = strtoul(l + 17, NULL, 10);
  if (hdr_end + clen >= sizeof in) die("answer too long");
  while (in_len < hdr_end + clen) {
    ssize_t r = read(fd, in + in_len, sizeof in - in_len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("read");
    in_len += (size_t)r;
  }
  in[hdr_end + clen] = '\0';
  *resp = in + hdr_end;
  return status;
}

static int session_of(const char *resp, char *sid, size_t cap) {
  const char *p = strstr(resp, "\"session_id\":\"");
  if (!p) return -1;
  p += 14;
  size_t k = strcspn(p, "\"");
  if (k == 0 || k >= cap) return -1;
  memcpy(sid, p, k);
  sid[k] = '\0';
  return 0;
}

/* ---- wakesleep --------------------------------------------------------------------- */

static int wakesleep(void) {
  conn_open();
  char body[256], sid[80], *resp;
  int non200 = 0;
  double t0 = now_ms();
  for (int i = 1; i <= n; i++) {
    snprintf(body, sizeof body, "{\"actor_id\":\"%s%d\"}", prefix, i);
    int st = post("/v1/wake", body, &resp);
    if (st != 200 || session_of(resp, sid, sizeof sid)) {
      if (non200++ < 3) fprintf(stderr, "trigclient: wake %s%d -> %d %.200s\n", prefix, i, st, resp);
      continue;
    }
    snprintf(body, sizeof body, "{\"session_id\":\"%s\"}", sid);
    if ((st = post("/v1/sleep", body, &resp)) != 200 && non200++ < 3)
      fprintf(stderr, "trigclient: sleep %s%d -> %d %.200s\n", prefix, i, st, resp);
  }
  printf("n %d\nnon200 %d\nsecs %.3f\n", n, non200, (now_ms() - t0) / 1e3);
  return 0;
}

/* ---- reload ---------------------------------------------------------------------------- */

static void write_skill(const char *path, long v) {
  char text[512];
  int k = snprintf(text, sizeof text,
                   "return {\n  name = \"ver\",\n  description = \"version %ld of the reload probe\",\n"
                   "  run = function(ctx, input) return %ld end,\n}\n", v, v);
  int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f < 0) die("open skill file");
  if (write(f, text, (size_t)k) != k) die("write skill file");
  if (close(f)) die("close skill file");
}

static long result_of(const char *resp) {
  const char *p = strstr(resp, "\"result\":");
  return p ? strtol(p + 9, NULL, 10) : -1;
}

static int reload(void) {
  conn_open();
  char body[256], sid[80], *resp;
  int st = post("/v1/wake", "{\"actor_id\":\"reloader\"}", &resp);
  if (st != 200 || session_of(resp, sid, sizeof sid)) {
    fprintf(stderr, "trigclient: wake reloader -> %d %.300s\n", st, resp);
    return 1;
  }
  snprintf(body, sizeof body, "{\"input\":null,\"session_id\":\"%s\",\"skill\":\"ver\"}", sid);
  /* the version in place: answers before any write */
  if ((st = post("/v1/run", body, &resp)) != 200) {
    fprintf(stderr, "trigclient: run ver -> %d %.300s\n", st, resp);
    return 1;
  }
  long base = result_of(resp);
  double *up = calloc((size_t)n, sizeof *up), *lo = calloc((size_t)n, sizeof *lo);
  double *rtt = calloc((size_t)n * 400, sizeof *rtt);
  int nrtt = 0, polls = 0, timeouts = 0, non200 = 0;
  for (int i = 0; i < n; i++) {
    long v = base + 1 + i;
    double t0 = now_ms();
    write_skill(file, v);
    double last_send = t0;
    for (;;) {
      double s0 = now_ms();
      st = post("/v1/run", body, &resp);
      double s1 = now_ms();
      polls++;
      if (nrtt < n * 400) rtt[nrtt++] = s1 - s0;
      if (st != 200 && non200++ < 3) fprintf(stderr, "trigclient: poll -> %d %.300s\n", st, resp);
      if (st == 200 && result_of(resp) == v) {
        up[i] = s1 - t0;
        lo[i] = last_send - t0;
        break;
      }
      last_send = s0;
      if (s1 - t0 > 5000) {
        timeouts++;
        up[i] = lo[i] = s1 - t0;
        fprintf(stderr, "trigclient: version %ld not live after 5 s\n", v);
        break;
      }
    }
    sleep_ms(gap_ms);
  }
  snprintf(body, sizeof body, "{\"session_id\":\"%s\"}", sid);
  post("/v1/sleep", body, &resp);
  qsort(up, (size_t)n, sizeof *up, cmp_double);
  qsort(lo, (size_t)n, sizeof *lo, cmp_double);
  qsort(rtt, (size_t)nrtt, sizeof *rtt, cmp_double);
  printf("n %d\nlive_p50_ms %.2f\nlive_p99_ms %.2f\nlive_max_ms %.2f\n", n, pct(up, n, .5), pct(up, n, .99), up[n - 1]);
  printf("lower_p50_ms %.2f\nlower_p99_ms %.2f\n", pct(lo, n, .5), pct(lo, n, .99));
  printf("polls %d\npoll_rtt_p50_ms %.2f\npoll_rtt_p99_ms %.2f\ntimeouts %d\nnon200 %d\n", polls, pct(rtt, nrtt, .5),
         pct(rtt, nrtt, .99), timeouts, non200);
  return timeouts ? 1 : 0;
}

/* ---- trickle ---------------------------------------------------------------------------- */

static int trickle(void) {
  conn_open();
  char *resp;
  int k = 0, non200 = 0;
  double end = now_ms() + n * 1e3;
  while (now_ms() < end) {
    if (post("/healthz", NULL, &resp) != 200) non200++;
    k++;
    sleep_ms(gap_ms);
  }
  printf("requests %d\nnon200 %d\n", k, non200);
  return 0;
}

/* ---- inotify ---------------------------------------------------------------------------- */

static int ifd;
static volatile double got_at;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *reader(void *arg) {
  (void)arg;
  char buf[8192] __attribute__((aligned(8)));
  for (;;) {
    ssize_t r = read(ifd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return NULL;
    double t = now_ms();
    pthread_mutex_lock(&mu);
    if (got_at == 0) got_at = t;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
  }
}

static int inotify_floor(void) {
  ifd = inotify_init1(IN_CLOEXEC);
  if (ifd < 0) die("inotify_init1");
  /* the mask libuv's uv_fs_event_start uses on Linux */
  if (inotify_add_watch(ifd, dir, IN_ATTRIB | IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF |
                                     IN_MOVED_FROM | IN_MOVED_TO) < 0)
    die("inotify_add_watch");
  pthread_t th;
  pthread_create(&th, NULL, reader, NULL);
  char path[1100];
  snprintf(path, sizeof path, "%s/probe.lua", dir);
  double *v = calloc((size_t)n, sizeof *v);
  for (int i = 0; i < n; i++) {
    sleep_ms(gap_ms);   /* the reader is asleep in read(), as the host's loop is in epoll_wait */
    pthread_mutex_lock(&mu);
    got_at = 0;
    pthread_mutex_unlock(&mu);
    double t0 = now_ms();
    write_skill(path, i);
    pthread_mutex_lock(&mu);
    while (got_at == 0) pthread_cond_wait(&cv, &mu);
    v[i] = got_at - t0;
    pthread_mutex_unlock(&mu);
  }
  sleep_ms(gap_ms);
  unlink(path);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  printf("n %d\nevent_p50_ms %.3f\nevent_p99_ms %.3f\nevent_max_ms %.3f\n", n, pct(v, n, .5), pct(v, n, .99), v[n - 1]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: trigclient wakesleep|reload|inotify [options]\n");
    return 2;
  }
  const char *mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *o = argv[i], *v = argv[i + 1];
    if (!strcmp(o, "-p")) port = atoi(v);
    else if (!strcmp(o, "-t")) token = v;
    else if (!strcmp(o, "-a")) prefix = v;
    else if (!strcmp(o, "-n")) n = atoi(v);
    else if (!strcmp(o, "-g")) gap_ms = atoi(v);
    else if (!strcmp(o, "-f")) file = v;
    else if (!strcmp(o, "-d")) dir = v;
    else {
      fprintf(stderr, "trigclient: unknown option %s\n", o);
      return 2;
    }
  }
  if (n < 1) n = 1;
  if (!strcmp(mode, "wakesleep")) return wakesleep();
  if (!strcmp(mode, "reload") && file) return reload();
  if (!strcmp(mode, "trickle")) return trickle();
  if (!strcmp(mode, "inotify") && dir) return inotify_floor();
  fprintf(stderr, "trigclient: bad mode or missing option\n");
  return 2;
}
