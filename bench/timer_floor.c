/* timer_floor.c -- a helper of bench/triggers.sh: the lateness of bare libuv
 * timers on one loop, the floor under MW's heartbeats.  A bench helper only.
 *
 *   timer_floor TIMERS PERIOD_MS SECS
 *
 * Starts TIMERS repeating uv_timers of PERIOD_MS at once (as MW starts a
 * tenant's heartbeats: one loop over the declared list), runs SECS seconds,
 * and records every callback with uv_hrtime.  The callbacks do nothing.
 * Prints `key value` lines:
 *
 *   late_*      callback time - its due time (the timeout libuv armed it for,
 *               on the loop's millisecond clock): what a tick waits for the loop
 *   spacing_*   consecutive callbacks of one timer - PERIOD_MS: the figure
 *               triggers.sh computes for MW from entry timestamps
 *   round_*     within one round, the last timer's callback - the first's
 *
 * Build: cc -O2 bench/timer_floor.c -o build/bench/timer_floor $(pkg-config --cflags --libs libuv) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

typedef struct {
  uv_timer_t h;
  uint64_t due_ms;     /* the loop-clock time it is armed for */
  uint64_t last_ns;    /* its previous callback */
} tm;

static double *late, *spacing;
static size_t nlate, nspacing, cap;
static uint64_t period_ms;
static uint64_t round_first_ns, round_last_ns;
static double *rounds;
static size_t nrounds;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
  if (!n) return 0;
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return v[i];
}

static void close_round(void) {
  if (round_first_ns && nrounds < 4096) rounds[nrounds++] = (double)(round_last_ns - round_first_ns) / 1e6;
  round_first_ns = round_last_ns = 0;
}

static void on_tick(uv_timer_t *h) {
  tm *t = (tm *)h;
  uint64_t now = uv_hrtime();
  if (nlate < cap) late[nlate++] = (double)now / 1e6 - (double)t->due_ms;
  if (t->last_ns && nspacing < cap) spacing[nspacing++] = (double)(now - t->last_ns) / 1e6 - (double)period_ms;
  t->last_ns = now;
  /* libuv has already re-armed a repeating timer before its callback:
   * uv_timer_get_due_in is the time to its next due from the loop clock */
  t->due_ms = uv_now(h->loop) + uv_timer_get_due_in(h);
  if (round_first_ns && now - round_first_ns > period_ms * 500000u) close_round();
  if (!round_first_ns) round_first_ns = now;
  round_last_ns = now;
}

static void on_stop(uv_timer_t *h) { uv_stop(h->loop); }

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: timer_floor TIMERS PERIOD_MS SECS\n");
    return 2;
  }
  int n = atoi(argv[1]);
  period_ms = (uint64_t)atoll(argv[2]);
  double secs = atof(argv[3]);
  cap = (size_t)n * (size_t)(secs * 1000.0 / (double)period_ms + 2);
  late = malloc(cap * sizeof *late);
  spacing = malloc(cap * sizeof *spacing);
  rounds = malloc(4096 * sizeof *rounds);
  tm *ts = calloc((size_t)n, sizeof *ts);
  if (!late || !spacing || !rounds || !ts) return 1;
  uv_loop_t *loop = uv_default_loop();
  for (int i = 0; i < n; i++) {
    uv_timer_init(loop, &ts[i].h);
    uv_timer_start(&ts[i].h, on_tick, period_ms, period_ms);
    ts[i].due_ms = uv_now(loop) + period_ms;
  }
  uv_timer_t stop;
  uv_timer_init(loop, &stop);
  uv_timer_start(&stop, on_stop, (uint64_t)(secs * 1000.0) + period_ms / 2, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  close_round();
  qsort(late, nlate, sizeof *late, cmp_double);
  qsort(spacing, nspacing, sizeof *spacing, cmp_double);
  qsort(rounds, nrounds, sizeof *rounds, cmp_double);
  printf("ticks %zu\n", nlate);
  printf("late_p50_ms %.3f\nlate_p99_ms %.3f\nlate_max_ms %.3f\n", pct(late, nlate, .5), pct(late, nlate, .99),
         nlate ? late[nlate - 1] : 0);
  printf("spacing_n %zu\nspacing_p50_ms %.3f\nspacing_p99_ms %.3f\nspacing_max_ms %.3f\n", nspacing,
         pct(spacing, nspacing, .5), pct(spacing, nspacing, .99), nspacing ? spacing[nspacing - 1] : 0);
  printf("rounds %zu\nround_p50_ms %.3f\nround_max_ms %.3f\n", nrounds, pct(rounds, nrounds, .5),
         nrounds ? rounds[nrounds - 1] : 0);
  return 0;
}
