#!/usr/bin/env bash
# bench/extra.sh -- three benchmarks of the host, each figure beside a ceiling
# measured in the same run, its target and PASS/MISS:
#   1. the facts leg of a wake on a large Cortex (wake p50/p99 with a two-word
#      context_hint vs without, through mw.host), beside a bare FTS5 MATCH of
#      the same shape run by the sqlite3 CLI on the same file;
#   2. a slow source (an http feed answering after 5 s) pulled without pause
#      while 200 wake+sleep cycles of other actors are timed, vs the same
#      cycles with no pull in flight (twice each: the difference and its noise);
#   3. a tenant flooding (8 clients, quotas.lua {rps = 200}) vs another
#      tenant's wake+sleep p99; ceiling: the same 8 clients hammering GET /healthz.
#
# Run from anywhere: `bash bench/extra.sh`.  Needs make, cc, curl, sqlite3,
# lua5.4 with lua-socket.  Builds build/bench/{load,extra_cortex}; writes only a
# temporary directory under /tmp (removed at the end, every host and helper
# stopped).
#
# Environment: MW_EXTRA_NODES (100000) x MW_EXTRA_PER (10) = edges of the Cortex
# (1,000,000; building it takes ~1-2 minutes), MW_EXTRA_CORTEX=DIR reuses a
# Cortex built before (DIR/cortex.db + DIR/hints.txt, from build/bench/extra_cortex),
# MW_EXTRA_WAKES (300 per variant, leg 1), MW_EXTRA_FLOOD_SECS (12),
# MW_BENCH_KEEP=1 keeps the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${MW_EXTRA_NODES:-100000}
PER=${MW_EXTRA_PER:-10}
WAKES=${MW_EXTRA_WAKES:-300}
FLOOD_SECS=${MW_EXTRA_FLOOD_SECS:-12}
say() { printf '%s\n' "$*" >&2; }

say "== building"
make -s >&2
mkdir -p build/bench
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -pthread bench/load.c -o build/bench/load
# shellcheck disable=SC2046
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Iruntime $(pkg-config --cflags lua5.4) \
  bench/extra_cortex.c runtime/cortex.c runtime/json.c runtime/jfield.c runtime/buf.c runtime/errors.c \
  -lsqlite3 -lm -o build/bench/extra_cortex

TMP=$(mktemp -d /tmp/mw-extra.XXXXXX)
PID=          # the mw serve running, if any
SLOW=         # the slow feed server
BG=()         # background clients
cleanup() {
  for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ -n "$SLOW" ]; then kill -TERM "$SLOW" 2>/dev/null || true; wait "$SLOW" 2>/dev/null || true; fi
  if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ "${MW_BENCH_KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

declare -A R
# keep LABEL FILE: its `key value` lines under LABEL
keep() { local k v; while read -r k v; do R[$1:$k]=$v; done <"$2"; }
get() { echo "${R[$1]:--}"; }
SERVER_RCS=()

start_server() {   # start_server HOME [extra args]
  local home=$1; shift
  : >"$TMP/out"
  build/mw serve --home "$home" --listen 127.0.0.1:0 "$@" >"$TMP/out" 2>>"$TMP/server.log" &
  PID=$!
  for _ in $(seq 250); do grep -q listening "$TMP/out" && break; sleep 0.02; done
  PORT=$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/out")
  [ -n "$PORT" ] || { say "mw serve did not start:"; cat "$TMP/server.log" >&2; exit 1; }
}
stop_server() {
  local rc=0
  kill -TERM "$PID"; wait "$PID" || rc=$?
  SERVER_RCS+=("$rc"); PID=
}
# load LABEL ARGS...: the generator against the running server, kept under LABEL
load() {
  local label=$1; shift
  build/bench/load "$@" -p "$PORT" -P "$PID" >"$TMP/$label.txt" 2>"$TMP/$label.err" || {
    say "load $label failed:"; cat "$TMP/$label.err" >&2; exit 1; }
  keep "$label" "$TMP/$label.txt"
}
actors() { local p=$1 n=$2 s="" i; for i in $(seq "$n"); do s+="${s:+,}$p$i"; done; echo "$s"; }
verdict() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 <= b + 0) ? "PASS" : "**MISS**" }'; }
LOADAVG0=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 1. the facts leg on a large Cortex ------------------------------------------------------

H1=$TMP/h1
build/mw init --home "$H1" --json >/dev/null
CX=$H1/tenants/default/cortex.db
rm -f "$CX" "$CX-wal" "$CX-shm"
if [ -n "${MW_EXTRA_CORTEX:-}" ]; then
  say "== 1. facts leg: reusing the Cortex in $MW_EXTRA_CORTEX"
  cp "$MW_EXTRA_CORTEX/cortex.db" "$CX"
  cp "$MW_EXTRA_CORTEX/hints.txt" "$TMP/hints.txt"
  R[cx:build_s]=reused
else
  say "== 1. facts leg: building a Cortex of $NODES nodes x $PER edges through mw_cortex_apply"
  build/bench/extra_cortex "$CX" "$NODES" "$PER" "$TMP/hints.txt" >"$TMP/cx.txt"
  keep cx "$TMP/cx.txt"
fi
R[cx:edges]=$(sqlite3 "$CX" 'SELECT count(*) FROM edges_current')
R[cx:nodes]=$(sqlite3 "$CX" 'SELECT count(*) FROM nodes_current')
R[cx:mb]=$(( $(stat -c %s "$CX") / 1048576 ))
say "   $(get cx:nodes) current nodes, $(get cx:edges) current edges, $(get cx:mb) MB; streams in mw.db: $(sqlite3 "$H1/mw.db" 'SELECT count(*) FROM streams' 2>/dev/null || echo '?')"
say "   $WAKES wakes without a hint and $WAKES with one (+20 warm-up each), fresh actors, mw.host in process"
lua5.4 bench/extra_facts.lua "$H1" "$TMP/hints.txt" "$WAKES" >"$TMP/facts.txt"
keep facts "$TMP/facts.txt"
# the bare ceiling: the FTS5 query navigation runs, same hints, sqlite3 CLI, same file
{
  echo ".output /dev/null"
  echo ".timer on"
  head -n 20 "$TMP/hints.txt"   # warm-up
  cat "$TMP/hints.txt" "$TMP/hints.txt" | head -n "$WAKES"
} | awk 'NR <= 2 { print; next }
         { printf "SELECT rowid, bm25(nodes_fts) FROM nodes_fts WHERE nodes_fts MATCH '"'"'\"%s\" OR \"%s\"'"'"' ORDER BY rank LIMIT 20;\n", $1, $2 }' \
  >"$TMP/bare.sql"
# The CLI's real clock is in whole ms: p50/p99 are its user+sys CPU time per
# query (microseconds; one thread, the file warm); the wall-clock mean is the
# whole batch's time less the same CLI run with SELECT 1 in place of each query.
sqlite3 "$CX" <"$TMP/bare.sql" 2>&1 | awk '/^Run Time/ { print ($6 + $8) * 1000 }' | tail -n "$WAKES" | sort -g >"$TMP/bare.ms"
sed 's/^SELECT rowid.*/SELECT 1;/' "$TMP/bare.sql" >"$TMP/one.sql"
t0=$(date +%s%N); sqlite3 "$CX" <"$TMP/bare.sql" >/dev/null 2>&1; t1=$(date +%s%N)
sqlite3 "$CX" <"$TMP/one.sql" >/dev/null 2>&1; t2=$(date +%s%N)
R[bare:wall_mean]=$(awk -v a=$(( t1 - t0 )) -v b=$(( t2 - t1 )) -v n=$(( WAKES + 20 )) 'BEGIN { printf "%.3f", (a - b) / n / 1e6 }')
R[bare:n]=$(wc -l <"$TMP/bare.ms")
R[bare:p50]=$(awk '{ v[NR] = $1 } END { printf "%.3f", v[int(NR * .5) + 1] }' "$TMP/bare.ms")
R[bare:p99]=$(awk '{ v[NR] = $1 } END { i = int(NR * .99) + 1; if (i > NR) i = NR; printf "%.3f", v[i] }' "$TMP/bare.ms")
R[leg:p50]=$(awk -v a="$(get facts:wake_hint_p50_ms)" -v b="$(get facts:wake_nohint_p50_ms)" 'BEGIN { printf "%.3f", a - b }')
R[leg:p99]=$(awk -v a="$(get facts:wake_hint_p99_ms)" -v b="$(get facts:wake_nohint_p99_ms)" 'BEGIN { printf "%.3f", a - b }')

# ---- 2. a slow source beside concurrent wakes ---------------------------------------------------

say "== 2. slow source: an http feed answering after 5 s, deadline_ms 6000"
H2=$TMP/h2
INIT2=$(build/mw init --home "$H2" --json)
AG2=$(sed -n 's/.*"agent_token":"\([^"]*\)".*/\1/p' <<<"$INIT2")
OP2=$(sed -n 's/.*"operator_token":"\([^"]*\)".*/\1/p' <<<"$INIT2")
lua5.4 bench/extra_slow.lua "$TMP/slow.port" 5 2>"$TMP/slow.err" &
SLOW=$!
for _ in $(seq 250); do [ -s "$TMP/slow.port" ] && break; sleep 0.02; done
SPORT=$(cat "$TMP/slow.port")
cat >"$H2/tenants/default/roster.lua" <<LUA
return {
  { id = "slow", locator = "http://127.0.0.1:$SPORT/feed.json", does = "a feed that answers after 5 s",
    subjects = { "mundo" }, deadline_ms = 6000 },
}
LUA
start_server "$H2" --root /tmp
say "   server on port $PORT (pid $PID); slow feed on port $SPORT (pid $SLOW)"
W2=$(actors w 10)
load quiet1 wake -t "$AG2" -a "$(actors qa 10)" -n 20 -w 2
# two pull loops, staggered by 2.5 s: a pull is always in flight
pull_loop() {
  while [ ! -e "$TMP/stop" ]; do
    curl -sS -o "$TMP/delta.$1.last" -w '%{http_code} %{time_total}\n' -X POST \
      -H "Authorization: Bearer $OP2" -H 'Content-Type: application/json' -d '{}' \
      "http://127.0.0.1:$PORT/v1/actors/x/delta" >>"$TMP/delta.log" 2>>"$TMP/delta.err" || true
  done
}
pull_loop a & BG+=($!)
sleep 2.5
pull_loop b & BG+=($!)
sleep 0.5
load slow1 wake -t "$AG2" -a "$(actors sa 10)" -n 20 -w 2
load slow2 wake -t "$AG2" -a "$(actors sb 10)" -n 20 -w 2
touch "$TMP/stop"
for p in "${BG[@]}"; do wait "$p" || true; done
BG=()
load quiet2 wake -t "$AG2" -a "$(actors qb 10)" -n 20 -w 2
R[slow:pulls]=$(wc -l <"$TMP/delta.log")
R[slow:pulls200]=$(awk '$1 == 200' "$TMP/delta.log" | wc -l)
R[slow:pull_s]=$(awk '$1 == 200 { s += $2; n++ } END { printf "%.2f", n ? s / n : 0 }' "$TMP/delta.log")
R[slow:items]=$(cat "$TMP"/delta.*.last 2>/dev/null | grep -o '"slow/slow-[0-9]*"' | wc -l)
R[slow:inflight_max]=$(awk '{ print $4 }' "$TMP/slow.port.stats" 2>/dev/null || echo '?')
stop_server
kill -TERM "$SLOW"; wait "$SLOW" 2>/dev/null || true; SLOW=
for q in 50 99; do
  R[slow:d$q]=$(awk -v a="$(get slow1:wake_server_p${q}_ms)" -v b="$(get slow2:wake_server_p${q}_ms)" \
                    -v c="$(get quiet1:wake_server_p${q}_ms)" -v d="$(get quiet2:wake_server_p${q}_ms)" \
                    'BEGIN { printf "%+.3f", (a + b) / 2 - (c + d) / 2 }')
  R[slow:n$q]=$(awk -v a="$(get slow1:wake_server_p${q}_ms)" -v b="$(get slow2:wake_server_p${q}_ms)" \
                    -v c="$(get quiet1:wake_server_p${q}_ms)" -v d="$(get quiet2:wake_server_p${q}_ms)" \
                    'function abs(x) { return x < 0 ? -x : x } BEGIN { x = abs(a - b); y = abs(c - d); printf "%.3f", (x > y) ? x : y }')
done

# ---- 3. one tenant flooding -------------------------------------------------------------------

say "== 3. tenant flood: 8 clients of tenant flood (rps = 200) vs tenant calm's wake+sleep"
H3=$TMP/h3
build/mw init --home "$H3" --json >/dev/null
CALM=$(build/mw token create --home "$H3" --tenant calm --role agent --json | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
FLOOD=$(build/mw token create --home "$H3" --tenant flood --role agent --json | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
[ -n "$CALM" ] && [ -n "$FLOOD" ] || { say "token create gave no token"; exit 1; }
echo 'return { rps = 200 }' >"$H3/tenants/flood/quotas.lua"
start_server "$H3"
say "   server on port $PORT (pid $PID); ${FLOOD_SECS}s per flooded phase"
load alone1 wake -t "$CALM" -a "$(actors ca 10)" -n 30 -w 2
# flood LABEL MODE: 8 clients in the background, calm's 300 cycles measured inside
flooded() {
  local label=$1 mode=$2
  if [ "$mode" = cycle ]; then
    build/bench/load cycle -t "$FLOOD" -c 8 -d "$FLOOD_SECS" -s 16 -a "fl_${label}_" -p "$PORT" -P "$PID" \
      >"$TMP/$label.flood.txt" 2>"$TMP/$label.flood.err" &
  else
    build/bench/load hello -c 8 -d "$FLOOD_SECS" -p "$PORT" -P "$PID" >"$TMP/$label.flood.txt" 2>"$TMP/$label.flood.err" &
  fi
  BG+=($!)
  sleep 1
  local t0=$SECONDS
  load "$label" wake -t "$CALM" -a "$(actors "c$label" 10)" -n 30 -w 2
  R[$label:calm_s]=$(( SECONDS - t0 ))
  wait "${BG[0]}" || { say "flood load failed"; cat "$TMP/$label.flood.err" >&2; exit 1; }
  BG=()
  keep "$label.flood" "$TMP/$label.flood.txt"
  [ "$(get "$label:calm_s")" -lt $((FLOOD_SECS - 1)) ] || say "   warning: calm's cycles outlasted the flood ($label)"
}
flooded flood1 cycle
flooded hello1 hello
load alone2 wake -t "$CALM" -a "$(actors cb 10)" -n 30 -w 2
R[quota:refusals]=$(curl -sS "http://127.0.0.1:$PORT/metrics" | awk '$1 == "mw_quota_refusals_total" { print $2 }')
stop_server
R[fl:alone_p99]=$(awk -v a="$(get alone1:wake_server_p99_ms)" -v b="$(get alone2:wake_server_p99_ms)" 'BEGIN { printf "%.3f", (a > b) ? a : b }')
R[fl:ratio]=$(awk -v a="$(get flood1:wake_server_p99_ms)" -v b="$(get fl:alone_p99)" 'BEGIN { printf "%.2f", a / b }')
R[fl:ratio_lo]=$(awk -v a="$(get flood1:wake_server_p99_ms)" -v b="$(get alone1:wake_server_p99_ms)" -v c="$(get alone2:wake_server_p99_ms)" 'BEGIN { m = (b < c) ? b : c; printf "%.2f", a / m }')
R[fl:hratio]=$(awk -v a="$(get hello1:wake_server_p99_ms)" -v b="$(get fl:alone_p99)" 'BEGIN { printf "%.2f", a / b }')
R[fl:cratio]=$(awk -v a="$(get flood1:wake_client_p99_ms)" -v b="$(get alone1:wake_client_p99_ms)" -v c="$(get alone2:wake_client_p99_ms)" 'BEGIN { m = (b > c) ? b : c; printf "%.2f", a / m }')
LOADAVG1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ----------------------------------------------------------------------------------

cat <<EOF2

== 1. facts leg of a wake: $(get cx:nodes) nodes, $(get cx:edges) current edges ($(get cx:mb) MB; built in $(get cx:build_s) s)
   wake, no hint (server latency_ms)   p50 $(get facts:wake_nohint_p50_ms) ms  p99 $(get facts:wake_nohint_p99_ms) ms
   wake, 2-word hint                   p50 $(get facts:wake_hint_p50_ms) ms  p99 $(get facts:wake_hint_p99_ms) ms  (mean $(get facts:hint_nodes_mean) nodes; wakes not live: $(get facts:dark_wakes))
   facts leg (hint - no hint)          p50 $(get leg:p50) ms  p99 $(get leg:p99) ms
   navigate, same hint (wall, in Lua)  p50 $(get facts:navigate_p50_ms) ms  p99 $(get facts:navigate_p99_ms) ms
   ceiling: bare FTS5 MATCH (sqlite3)  p50 $(get bare:p50) ms  p99 $(get bare:p99) ms CPU (user+sys), wall mean $(get bare:wall_mean) ms ($(get bare:n) queries)
   target: facts leg <= 0.3 ms p99    $(verdict "$(get leg:p99)" 0.3)

== 2. slow source (5 s feed, deadline 6000 ms), 200 wake+sleep cycles each (server latency_ms)
   no pull       p50 $(get quiet1:wake_server_p50_ms) / $(get quiet2:wake_server_p50_ms) ms  p99 $(get quiet1:wake_server_p99_ms) / $(get quiet2:wake_server_p99_ms) ms (before / after)
   pulls in flight p50 $(get slow1:wake_server_p50_ms) / $(get slow2:wake_server_p50_ms) ms  p99 $(get slow1:wake_server_p99_ms) / $(get slow2:wake_server_p99_ms) ms
   client side:  no pull p99 $(get quiet1:wake_client_p99_ms) / $(get quiet2:wake_client_p99_ms) ms; pulls p99 $(get slow1:wake_client_p99_ms) / $(get slow2:wake_client_p99_ms) ms
   difference    p50 $(get slow:d50) ms (noise $(get slow:n50))  p99 $(get slow:d99) ms (noise $(get slow:n99))
   pulls: $(get slow:pulls) answered ($(get slow:pulls200) with 200, mean $(get slow:pull_s) s, $(get slow:items) carrying the feed's item); most waiting at the feed at once: $(get slow:inflight_max)
   target: adds 0 ms                   $(awk -v d="$(get slow:d99)" -v n="$(get slow:n99)" 'BEGIN { print (d <= n) ? "PASS (within noise)" : "**MISS**" }')

== 3. tenant flood: calm's wake+sleep, 300 cycles (server latency_ms)
   alone                  p50 $(get alone1:wake_server_p50_ms) / $(get alone2:wake_server_p50_ms) ms  p99 $(get alone1:wake_server_p99_ms) / $(get alone2:wake_server_p99_ms) ms (before / after)
   flood (8 clients)      p50 $(get flood1:wake_server_p50_ms) ms  p99 $(get flood1:wake_server_p99_ms) ms   ratio $(get fl:ratio)x to the higher alone p99, $(get fl:ratio_lo)x to the lower (client side $(get fl:cratio)x)
   ceiling: 8 x /healthz  p50 $(get hello1:wake_server_p50_ms) ms  p99 $(get hello1:wake_server_p99_ms) ms   ratio $(get fl:hratio)x
   flood: $(get flood1.flood:requests) requests ($(get flood1.flood:wake_non200) wakes not 200: 429 or 409 already_awake), $(get flood1.flood:non200) not 200, $(get flood1.flood:cycles) cycles ($(get flood1.flood:rps) req/s); 429s counted by the host: $(get quota:refusals)
   target: ratio <= 2x                 $(verdict "$(get fl:ratio)" 2)

   server exit codes: ${SERVER_RCS[*]}; load average $LOADAVG0 -> $LOADAVG1; $(nproc) cores

| figure | MW | ceiling, same run | target |
| --- | --- | --- | --- |
| facts leg, $(get cx:edges) edges (wake with hint − without) | p50 $(get leg:p50) ms, p99 $(get leg:p99) ms (navigate alone p99 $(get facts:navigate_p99_ms) ms) | bare FTS5 MATCH (CPU) p50 $(get bare:p50) ms, p99 $(get bare:p99) ms; wall mean $(get bare:wall_mean) ms | ≤ 0.3 ms p99 $(verdict "$(get leg:p99)" 0.3) |
| wake with slow pulls in flight − without | p50 $(get slow:d50) ms, p99 $(get slow:d99) ms | noise (same-state repeats) p50 $(get slow:n50) ms, p99 $(get slow:n99) ms | 0 ms $(awk -v d="$(get slow:d99)" -v n="$(get slow:n99)" 'BEGIN { print (d <= n) ? "PASS" : "**MISS**" }') |
| calm's wake p99, flood vs alone | $(get flood1:wake_server_p99_ms) vs $(get fl:alone_p99) ms ($(get fl:ratio)×) | 8 × /healthz: $(get hello1:wake_server_p99_ms) ms ($(get fl:hratio)×) | ≤ 2× $(verdict "$(get fl:ratio)" 2) |
EOF2
