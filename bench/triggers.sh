#!/usr/bin/env bash
# bench/triggers.sh -- MW's triggers and skills: heartbeat lateness with 1,000
# actors, the sandboxed skill call, the idle host's RSS and per idle actor, hot
# reload (write -> live), and the sweep's rate; each beside a ceiling measured
# in the same run on the same machine (a bare libuv timer, a bare lua_pcall, a
# bare inotify event, a bare SQLite scan and lua-cjson decode), with the
# issue's target and PASS/MISS.
#
# Run from anywhere: `bash bench/triggers.sh`.  Needs make, cc, curl, sqlite3,
# lua5.4 with lua-cjson and lua-socket.  Writes only temporary homes under
# /tmp (removed at the end) and build/bench/{skillcall,timer_floor,trigclient}.
# Takes about 2 minutes.
#
# Environment: MW_BENCH_BEAT_SECS (seconds each heartbeat configuration is
# served, default 20), MW_BENCH_FLOOR_SECS (the bare timer floor, default 10),
# MW_BENCH_ACTORS (heartbeat actors, default 1000), MW_BENCH_CALLS (skill calls
# per round, default 20000), MW_BENCH_RELOADS (default 50), MW_BENCH_SWEEP_N
# (entries swept, default 200000), MW_BENCH_KEEP=1 keeps the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

BEAT_SECS=${MW_BENCH_BEAT_SECS:-20}
FLOOR_SECS=${MW_BENCH_FLOOR_SECS:-10}
ACTORS=${MW_BENCH_ACTORS:-1000}
CALLS=${MW_BENCH_CALLS:-20000}
RELOADS=${MW_BENCH_RELOADS:-50}
SWEEP_N=${MW_BENCH_SWEEP_N:-200000}
PERIOD=1000          # heartbeat period, ms
WARM=2               # seconds of a heartbeat configuration not counted (start-up)
T_START=$(date +%s)
HZ=$(getconf CLK_TCK)

say() { printf '%s\n' "$*" >&2; }

# ---- build ------------------------------------------------------------------------

say "== building"
make -s >&2
mkdir -p build/bench
# the objects `make` links into build/mw.so: CORE_OBJ and LUA_OBJ of the Makefile
# (no main.o, cli.o, server.o), asked of make itself rather than globbed
# shellcheck disable=SC2016  # make's variables, expanded by make
OBJS=$(make -s --no-print-directory -f Makefile -f <(printf 'print-objs:\n\t@echo $(CORE_OBJ) $(LUA_OBJ)\n') print-objs)
CFLAGS_B=(-O2 -g -std=c11 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE)
# shellcheck disable=SC2046,SC2086
cc "${CFLAGS_B[@]}" -Iinclude -Iruntime $(pkg-config --cflags lua5.4) bench/skillcall.c $OBJS \
  -o build/bench/skillcall $(pkg-config --libs lua5.4 sqlite3 libcrypto libuv) -lhttp_parser -lexpat -lpthread -lm
# shellcheck disable=SC2046
cc "${CFLAGS_B[@]}" bench/timer_floor.c -o build/bench/timer_floor $(pkg-config --cflags --libs libuv)
cc "${CFLAGS_B[@]}" -D_GNU_SOURCE -pthread bench/trigclient.c -o build/bench/trigclient

# ---- temp dir, homes, servers -----------------------------------------------------------

TMP=$(mktemp -d /tmp/mw-triggers.XXXXXX)
PID=
BG=
SERVER_RCS=()
cleanup() {
  if [ -n "$BG" ]; then kill "$BG" 2>/dev/null || true; wait "$BG" 2>/dev/null || true; fi
  if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ "${MW_BENCH_KEEP:-}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

declare -A R   # R[label:key] = value
kv() { local k v; while read -r k v; do R[$1:$k]=$v; done <"$2"; }
get() { echo "${R[$1]:--}"; }

# new_home NAME: an `mw init` home at $TMP/NAME; sets HOME_DIR, OP (operator token), AG (agent token)
new_home() {
  HOME_DIR=$TMP/$1
  local j
  j=$(build/mw init --home "$HOME_DIR" --json)
  OP=$(sed -n 's/.*"operator_token":"\([^"]*\)".*/\1/p' <<<"$j")
  AG=$(sed -n 's/.*"agent_token":"\([^"]*\)".*/\1/p' <<<"$j")
  if [ -z "$OP" ] || [ -z "$AG" ]; then say "mw init gave no tokens"; exit 1; fi
  mkdir -p "$HOME_DIR/tenants/default/skills"
}

start_server() {
  : >"$TMP/out"
  build/mw serve --home "$HOME_DIR" --listen 127.0.0.1:0 >"$TMP/out" 2>>"$TMP/server.log" &
  PID=$!
  for _ in $(seq 250); do grep -q listening "$TMP/out" && break; sleep 0.02; done
  PORT=$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/out")
  [ -n "$PORT" ] || { say "mw serve did not start:"; cat "$TMP/server.log" >&2; exit 1; }
}

stop_server() {
  local rc=0
  kill -TERM "$PID"
  wait "$PID" || rc=$?
  SERVER_RCS+=("$rc")
  PID=
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }   # utime + stime; comm is "mw", no spaces
now() { date +%s.%N; }
status_to() { curl -sS -H "Authorization: Bearer $OP" "http://127.0.0.1:$PORT/v1/status" >"$1"; }
psi_cpu() { awk '/^some/ { sub("avg10=", "", $2); print $2 }' /proc/pressure/cpu 2>/dev/null || echo -; }

# ---- 1. heartbeats ------------------------------------------------------------------------

# The tenant's files: ACTORS actors on PERIOD ms; with STAGE=1 the ten actors
# a1, a111, a222, ... a999 run `mark` (one remember per beat), the rest `idle`.
write_beats() {
  cat >"$HOME_DIR/tenants/default/heartbeat.lua" <<EOF
-- written by bench/triggers.sh
local stage = $1 == 1
local t = {}
for i = 1, $ACTORS do
  local marks = stage and (i == 1 or i % 111 == 0) and i <= 999
  t[i] = { actor = "a" .. i, every_ms = $PERIOD, skill = marks and "mark" or "idle" }
end
return t
EOF
  cat >"$HOME_DIR/tenants/default/skills/idle.lua" <<'EOF'
return {
  name = "idle",
  description = "an idle beat: stages nothing, calls nothing, no handover",
  run = function(ctx, input) return {} end,
}
EOF
  cat >"$HOME_DIR/tenants/default/skills/mark.lua" <<'EOF'
return {
  name = "mark",
  description = "a beat that writes: one remember entry, whose ts the bench reads",
  run = function(ctx, input) ctx.remember("beat", ctx.cursor) return {} end,
}
EOF
}

# shellcheck disable=SC2016  # Lua source, not shell
TIMERS_LUA='
local c = require "cjson"
local s = c.decode(io.read("a"))
local k = { "ticks", "ok", "failed", "skipped_overlap", "skipped_awake" }
local sum = { timers = #s.timers }
for _, x in ipairs(k) do sum[x] = 0 end
for _, t in ipairs(s.timers) do for _, x in ipairs(k) do sum[x] = sum[x] + t[x] end end
for _, x in ipairs({ "timers", table.unpack(k) }) do print(x, math.tointeger(sum[x]) or sum[x]) end
'

# The log of the ten `mark` actors: "actor cursor kind ts" lines on stdin.
# shellcheck disable=SC2016
BEATS_LUA='
local PERIOD = tonumber(os.getenv("B_PERIOD"))
local runs, per = {}, {}   -- per[actor] = { {kind, ts} ... } in cursor order
for line in io.lines() do
  local a, _, kind, ts = line:match("^(%S+) (%d+) (%S+) (%d+)$")
  per[a] = per[a] or {}
  table.insert(per[a], { kind = kind, ts = tonumber(ts) })
end
local function pct(v, p)
  if #v == 0 then return "-" end
  table.sort(v)
  return v[math.max(1, math.ceil(p * #v))]
end
local raw, mod, dur, lag, multiples = {}, {}, {}, {}, {}
local first = {}   -- the ts of a1 beats: the start of each round
for _, e in ipairs(per.a1 or {}) do if e.kind == "remember" then first[#first + 1] = e.ts end end
local beats = 0
for a, es in pairs(per) do
  local prev, run_ts
  for _, e in ipairs(es) do
    if e.kind == "run" then run_ts = e.ts end
    if e.kind == "handover" and run_ts then dur[#dur + 1] = e.ts - run_ts; run_ts = nil end
    if e.kind == "remember" then
      beats = beats + 1
      if prev then
        local sp = e.ts - prev
        local k = math.floor(sp / PERIOD + 0.5)
        raw[#raw + 1] = sp - PERIOD
        mod[#mod + 1] = sp - k * PERIOD
        multiples[k] = (multiples[k] or 0) + 1
      end
      prev = e.ts
      if a ~= "a1" then
        -- the a1 beat of the same round: the latest at or before this one, within half a period
        local best
        for _, t in ipairs(first) do if t <= e.ts and e.ts - t < PERIOD / 2 then best = t end end
        if best then lag[#lag + 1] = e.ts - best end
      end
    end
  end
end
local function out(k, v) print(k, v) end
out("beats", beats)
out("spacings", #raw)
local spread = {}
for k, n in pairs(multiples) do spread[#spread + 1] = string.format("%dx%d", k, n) end
table.sort(spread)
out("spacing_multiples", table.concat(spread, ","))
out("raw_p50_ms", pct(raw, .5)); out("raw_p99_ms", pct(raw, .99))
out("mod_p50_ms", pct(mod, .5)); out("mod_p99_ms", pct(mod, .99)); out("mod_max_ms", pct(mod, 1))
out("dur_n", #dur); out("dur_p50_ms", pct(dur, .5)); out("dur_p99_ms", pct(dur, .99))
out("lag_n", #lag); out("lag_p50_ms", pct(lag, .5)); out("lag_p99_ms", pct(lag, .99)); out("lag_max_ms", pct(lag, 1))
'

# run_beats LABEL STAGE TRICKLE SECS: one configuration, served SECS seconds
run_beats() {
  local label=$1 stage=$2 trickle=$3 secs=$4 c0 c1 t0 t1
  new_home "beats_$label"
  write_beats "$stage"
  start_server
  sleep "$WARM"
  c0=$(cpu_ticks)
  t0=$(now)
  if [ "$trickle" = 1 ]; then
    build/bench/trigclient trickle -p "$PORT" -g 100 -n $((secs - WARM)) >"$TMP/$label.trickle" &
    BG=$!
  fi
  sleep $((secs - WARM))
  c1=$(cpu_ticks)
  t1=$(now)
  R[$label:rss_kb]=$(rss_kb)
  status_to "$TMP/$label.status"
  if [ -n "$BG" ]; then wait "$BG" || true; BG=; fi
  stop_server
  lua5.4 -e "$TIMERS_LUA" <"$TMP/$label.status" >"$TMP/$label.timers"
  kv "$label" "$TMP/$label.timers"
  R[$label:cpu_pct]=$(awk -v a="$c0" -v b="$c1" -v x="$t0" -v y="$t1" -v hz="$HZ" 'BEGIN { printf "%.1f", (b - a) / hz / (y - x) * 100 }')
  R[$label:cpu_s]=$(awk -v a="$c0" -v b="$c1" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
  R[$label:wall_s]=$(awk -v x="$t0" -v y="$t1" 'BEGIN { printf "%.1f", y - x }')
  R[$label:entries]=$(sqlite3 "$HOME_DIR/mw.db" "SELECT count(*) FROM entries")
  R[$label:streams]=$(sqlite3 "$HOME_DIR/mw.db" "SELECT count(*) FROM streams")
  R[$label:sessions]=$(sqlite3 "$HOME_DIR/mw.db" "SELECT count(*) FROM sessions")
  R[$label:sweeps]=$(sqlite3 "$HOME_DIR/mw.db" "SELECT count(*) FROM sweeps")
  if [ "$stage" = 1 ]; then
    sqlite3 -separator ' ' "$HOME_DIR/mw.db" \
      "SELECT s.actor, e.cursor, e.kind, e.ts FROM entries e JOIN streams s ON s.id = e.stream ORDER BY s.actor, e.cursor" |
      B_PERIOD=$PERIOD lua5.4 -e "$BEATS_LUA" >"$TMP/$label.beats"
    kv "$label" "$TMP/$label.beats"
  fi
  rm -rf "$HOME_DIR"
}

floor() {
  build/bench/timer_floor "$ACTORS" "$PERIOD" "$FLOOR_SECS" >"$TMP/$1.txt"
  kv "$1" "$TMP/$1.txt"
}

LOADAVG0=$(cut -d' ' -f1-3 /proc/loadavg)
PSI0=$(psi_cpu)
say "== heartbeats: the bare libuv floor, $ACTORS timers of $PERIOD ms, ${FLOOR_SECS}s"
floor floor0
say "== heartbeats A: $ACTORS idle actors, ${BEAT_SECS}s, no other traffic"
run_beats A 0 0 "$BEAT_SECS"
say "== heartbeats B: $ACTORS actors, 10 of them write a remember each beat, ${BEAT_SECS}s, no other traffic"
run_beats B 1 0 "$BEAT_SECS"
say "== heartbeats C: as B, with GET /healthz every 100 ms on the side, ${BEAT_SECS}s"
run_beats C 1 1 "$BEAT_SECS"
say "== heartbeats: the bare libuv floor again"
floor floor1

# ---- 2. the sandboxed skill call --------------------------------------------------------

say "== skill call: $CALLS calls per round, 9 rounds, the variants in turn"
build/bench/skillcall "$PWD/scripts" "$CALLS" 9 >"$TMP/skill.txt"
kv skill "$TMP/skill.txt"

# ---- 3. RSS, idle host and per idle actor; 4. reload, on the same host ------------------

say "== RSS: a fresh home, then $ACTORS actors woken and slept (nothing run)"
new_home rss
cat >"$HOME_DIR/tenants/default/skills/ver.lua" <<'EOF'
return { name = "ver", description = "the reload probe, as written at start", run = function(ctx, input) return 1000 end }
EOF
start_server
sleep 0.5
R[rss:idle_kb]=$(rss_kb)
build/bench/trigclient wakesleep -p "$PORT" -t "$AG" -a first -n 1 >"$TMP/ws1.txt"
sleep 0.2
R[rss:one_kb]=$(rss_kb)
build/bench/trigclient wakesleep -p "$PORT" -t "$AG" -a idle -n "$ACTORS" >"$TMP/wsN.txt"
kv wsN "$TMP/wsN.txt"
sleep 0.2
R[rss:many_kb]=$(rss_kb)
# the same number of wake+sleeps again on the same actors: what stays per session, not per actor
build/bench/trigclient wakesleep -p "$PORT" -t "$AG" -a idle -n "$ACTORS" >"$TMP/wsN2.txt"
sleep 0.2
R[rss:again_kb]=$(rss_kb)

say "== reload: the bare inotify floor, then $RELOADS overwrites of a skill, each polled until live"
mkdir -p "$TMP/inotify"
build/bench/trigclient inotify -d "$TMP/inotify" -n "$RELOADS" >"$TMP/inotify.txt"
kv inotify "$TMP/inotify.txt"
build/bench/trigclient reload -p "$PORT" -t "$AG" -f "$HOME_DIR/tenants/default/skills/ver.lua" -n "$RELOADS" \
  >"$TMP/reload.txt"
kv reload "$TMP/reload.txt"
status_to "$TMP/reload.status"
# shellcheck disable=SC2016
lua5.4 -e 'local s = require("cjson").decode(io.read("a")).reloads
  print("version", math.tointeger(s.version)) print("failures", math.tointeger(s.failures))' <"$TMP/reload.status" >"$TMP/reloads.txt"
kv reloads "$TMP/reloads.txt"
stop_server
rm -rf "$HOME_DIR"

# ---- 5. the sweep -------------------------------------------------------------------------

say "== sweep: $SWEEP_N entries for one actor, wakes through mw.host, 3 rounds"
new_home sweep
lua5.4 bench/triggers_sweep.lua "$HOME_DIR" "$SWEEP_N" "$PWD/scripts" "$PWD/skills" 3 >"$TMP/sweep.txt" ||
  { say "triggers_sweep.lua failed"; cat "$TMP/sweep.txt" >&2; exit 1; }
kv sweep "$TMP/sweep.txt"
# best of 3 of the scan, and of the CLI doing nothing (its own start-up, to show apart)
best_of3() {
  local best=1e9 t0 t1
  for _ in 1 2 3; do
    t0=$(now)
    sqlite3 "$HOME_DIR/mw.db" "$1" >"$TMP/sqlite.out"
    t1=$(now)
    best=$(awk -v b="$best" -v x="$t0" -v y="$t1" 'BEGIN { d = y - x; print (d < b ? d : b) }')
  done
  echo "$best"
}
scan=$(best_of3 "select count(length(body)) from entries")
R[sqlite:rows]=$(cat "$TMP/sqlite.out")
noop=$(best_of3 "select 1")
R[sqlite:ms]=$(awk -v d="$scan" 'BEGIN { printf "%.1f", d * 1e3 }')
R[sqlite:noop_ms]=$(awk -v d="$noop" 'BEGIN { printf "%.1f", d * 1e3 }')
R[sqlite:per_s]=$(awk -v d="$scan" -v n="${R[sqlite:rows]}" 'BEGIN { printf "%.0f", n / d }')
R[sqlite:net_per_s]=$(awk -v d="$scan" -v z="$noop" -v n="${R[sqlite:rows]}" 'BEGIN { printf "%.0f", n / (d - z) }')
rm -rf "$HOME_DIR"
LOADAVG1=$(cut -d' ' -f1-3 /proc/loadavg)
PSI1=$(psi_cpu)

# ---- the host's own record ------------------------------------------------------------------

LOG_LINES=$(wc -l <"$TMP/server.log")
LOG_NON2XX=$(grep -c '"status":[^2]' "$TMP/server.log" || true)
LOG_ERRORS=$(grep -c '"level":"error"' "$TMP/server.log" || true)

# ---- report -----------------------------------------------------------------------------------

verdict() { awk -v x="$1" -v op="$2" -v t="$3" 'BEGIN { if (x == "-" || x == "") { print "n/a"; exit }
  ok = op == "<=" ? x + 0 <= t + 0 : x + 0 >= t + 0; print (ok ? "PASS" : "MISS") }'; }
k() { awk -v x="$1" 'BEGIN { if (x >= 1e6) printf "%.2fM", x / 1e6; else if (x >= 1e3) printf "%.0fk", x / 1e3; else printf "%.0f", x }'; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

EXPECT_TICKS=$(( ACTORS * (BEAT_SECS) ))
echo
echo "## MW triggers, skills, reload, sweep -- $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%Y-%m-%dT%H:%MZ)," \
     "$(nproc) cores, $(uname -r), libuv $(pkg-config --modversion libuv)"
echo "load average at start $LOADAVG0, at end $LOADAVG1; CPU pressure (PSI some avg10) $PSI0% at start, $PSI1% at end"
echo
echo "### 1. heartbeats: $ACTORS actors every $PERIOD ms, each configuration served ${BEAT_SECS}s (counters over the whole run; CPU over the last $((BEAT_SECS - WARM))s)"
printf '%-34s %8s %8s %8s %8s %8s %8s %8s %8s\n' config timers ticks ok skipped skip_awk failed "CPU %" "RSS MB"
for L in A B C; do
  case $L in A) name="A: all idle";; B) name="B: 10 write, 990 idle";; C) name="C: as B + /healthz every 100 ms";; esac
  printf '%-34s %8s %8s %8s %8s %8s %8s %8s %8s\n' "$name" "$(get "$L:timers")" "$(get "$L:ticks")" "$(get "$L:ok")" \
    "$(get "$L:skipped_overlap")" "$(get "$L:skipped_awake")" "$(get "$L:failed")" "$(get "$L:cpu_pct")" \
    "$(calc '%.1f' "$(get "$L:rss_kb") / 1024")"
done
echo "(about $EXPECT_TICKS ticks are due in ${BEAT_SECS}s; 'skipped' is skipped_overlap: the previous beat of that timer had not finished)"
for L in A C; do
  printf 'CPU per beat that ran, %s: ~%s us  (%s s of CPU over %s s; beats in that window taken as ok x %s/%s)\n' "$L" \
    "$(calc '%.0f' "$(get $L:cpu_s) * 1e6 / ($(get $L:ok) * ($(get $L:wall_s)) / $BEAT_SECS)")" "$(get $L:cpu_s)" "$(get $L:wall_s)" \
    "$(get $L:wall_s)" "$BEAT_SECS"
done
printf 'idle beats write nothing, A: %s entries, %s streams, %s session records, %s sweep records in mw.db\n' \
  "$(get A:entries)" "$(get A:streams)" "$(get A:sessions)" "$(get A:sweeps)"
for f in floor0 floor1; do
  printf 'bare libuv floor (%s): %s callbacks; late vs due p50 %s p99 %s max %s ms; spacing-%s p50 %s p99 %s ms; a round of %s callbacks p50 %s max %s ms\n' \
    "$([ $f = floor0 ] && echo before || echo after)" "$(get $f:ticks)" "$(get $f:late_p50_ms)" "$(get $f:late_p99_ms)" \
    "$(get $f:late_max_ms)" "$PERIOD" "$(get $f:spacing_p50_ms)" "$(get $f:spacing_p99_ms)" "$ACTORS" "$(get $f:round_p50_ms)" \
    "$(get $f:round_max_ms)"
done
for L in B C; do
  printf '%s: the 10 writing actors: %s beats; spacing of consecutive remember ts, in periods: %s\n' "$L" "$(get $L:beats)" "$(get $L:spacing_multiples)"
  printf '   spacing - %s ms: p50 %s p99 %s ms;  spacing - nearest multiple of %s: p50 %s p99 %s max %s ms\n' \
    "$PERIOD" "$(get $L:raw_p50_ms)" "$(get $L:raw_p99_ms)" "$PERIOD" "$(get $L:mod_p50_ms)" "$(get $L:mod_p99_ms)" "$(get $L:mod_max_ms)"
  printf '   in-round lag (ts of a111..a999 - ts of a1, same round): p50 %s p99 %s max %s ms (n %s)\n' \
    "$(get $L:lag_p50_ms)" "$(get $L:lag_p99_ms)" "$(get $L:lag_max_ms)" "$(get $L:lag_n)"
  printf '   beat duration (its handover ts - its run ts): p50 %s p99 %s ms (n %s)\n' "$(get $L:dur_p50_ms)" "$(get $L:dur_p99_ms)" "$(get $L:dur_n)"
done
echo
echo "### 2. skill call: best of 9 rounds of $CALLS calls (us per call; each row adds to the one above)"
S0=$(get skill:bare_us)
for v in bare decode ctx coroutine encode gcstep tenant; do
  case $v in
    bare) d="bare lua_pcall of the skill's run (plain lua_State)";;
    decode) d="+ fresh ctx, mw__ljson_decode of state {} and input null";;
    ctx) d="+ the ctx fields push_run sets, inside a protected call";;
    coroutine) d="+ a coroutine per call, count hook, 2 clock reads";;
    encode) d="+ mw__ljson_encode of the result";;
    gcstep) d="+ lua_gc(LUA_GCSTEP, 0) after the call";;
    tenant) d="mw__tenant_run (the sandbox, its allocator, budgets)";;
  esac
  printf '  %-62s %7s us  (+%s)\n' "$d" "$(get "skill:${v}_us")" "$(calc '%.3f' "$(get "skill:${v}_us") - $S0")"
done
printf '  mw__tenant_new (what a reload rebuilds; scripts + 1 skill, no home): best %s ms, p50 %s ms; tenant Lua heap %s bytes\n' \
  "$(get skill:tenant_new_best_ms)" "$(get skill:tenant_new_p50_ms)" "$(get skill:tenant_mem_bytes)"
echo
echo "### 3. RSS"
printf '  idle host, listening, fresh home: %s kB; after 1 actor woken+slept (tenant state built): %s kB\n' "$(get rss:idle_kb)" "$(get rss:one_kb)"
printf '  after %s more actors woken+slept (%s s, %s non-200): %s kB; after the same %s again: %s kB\n' \
  "$ACTORS" "$(get wsN:secs)" "$(get wsN:non200)" "$(get rss:many_kb)" "$ACTORS" "$(get rss:again_kb)"
PER_ACTOR=$(calc '%.2f' "($(get rss:many_kb) - $(get rss:idle_kb)) / $ACTORS")
PER_ACTOR2=$(calc '%.2f' "($(get rss:many_kb) - $(get rss:one_kb)) / $ACTORS")
printf '  per idle actor: (after - idle)/%s = %s kB; (after - after 1)/%s = %s kB\n' "$ACTORS" "$PER_ACTOR" "$ACTORS" "$PER_ACTOR2"
echo
echo "### 4. reload: $RELOADS overwrites of HOME/tenants/default/skills/ver.lua, POST /v1/run polled until the new number answers"
printf '  write -> live: p50 %s ms, p99 %s ms, max %s ms (lower bound, last poll before: p50 %s, p99 %s ms)\n' \
  "$(get reload:live_p50_ms)" "$(get reload:live_p99_ms)" "$(get reload:live_max_ms)" "$(get reload:lower_p50_ms)" "$(get reload:lower_p99_ms)"
printf '  %s polls, poll round trip p50 %s p99 %s ms (each poll is a run: one durable commit); reloads: version %s, failures %s\n' \
  "$(get reload:polls)" "$(get reload:poll_rtt_p50_ms)" "$(get reload:poll_rtt_p99_ms)" "$(get reloads:version)" "$(get reloads:failures)"
FLOOR_RELOAD=$(calc '%.1f' "$(get inotify:event_p50_ms) + 25 + $(get skill:tenant_new_p50_ms)")
printf '  floor: bare inotify event p50 %s p99 %s ms; + the 25 ms debounce; + mw__tenant_new p50 %s ms = %s ms\n' \
  "$(get inotify:event_p50_ms)" "$(get inotify:event_p99_ms)" "$(get skill:tenant_new_p50_ms)" "$FLOOR_RELOAD"
echo
echo "### 5. sweep: $SWEEP_N run entries of one actor (head at the last one: wakes replay nothing)"
for r in 1 2 3; do
  printf '  round %s: first wake %s ms (CPU %s ms more than the second; run-queue wait %s ms), second wake %s ms\n' "$r" \
    "$(get "sweep:round${r}_wake1_ms")" "$(get "sweep:round${r}_cpu_diff_ms")" "$(get "sweep:round${r}_wake1_runqueue_ms")" \
    "$(get "sweep:round${r}_wake2_ms")"
done
printf '  sweep = first - second wake: best %s ms = %s entries/s, median %s entries/s (by CPU time: %s entries/s); corpus.entries %s\n' \
  "$(get sweep:sweep_best_ms)" "$(k "$(get sweep:sweep_best_per_s)")" "$(k "$(get sweep:sweep_median_per_s)")" \
  "$(k "$(get sweep:sweep_cpu_best_per_s)")" "$(get sweep:corpus_entries)"
printf '  ceilings: sqlite3 CLI count(length(body)) over %s rows %s ms = %s rows/s (%s/s without the CLI'"'"'s own %s ms start-up);\n' \
  "$(get sqlite:rows)" "$(get sqlite:ms)" "$(k "$(get sqlite:per_s)")" "$(k "$(get sqlite:net_per_s)")" "$(get sqlite:noop_ms)"
printf '            cjson.decode of the bodies %s/s; mw.json.decode %s/s\n' "$(k "$(get sweep:cjson_decode_per_s)")" "$(k "$(get sweep:mwjson_decode_per_s)")"
printf '  breakdown: sweep.lua in plain Lua over cjson-decoded entries %s/s; cjson decode + that fold %s/s\n' \
  "$(k "$(get sweep:plain_sweep_per_s)")" "$(k "$(get sweep:plain_decode_sweep_per_s)")"
printf '  skill entry keeps no sweep record (host:call "skill", ms): 1st %s, 2nd %s; then a wake %s (stores it); then 3rd %s\n' \
  "$(get sweep:entry1_ms)" "$(get sweep:entry2_ms)" "$(get sweep:entry_wake_ms)" "$(get sweep:entry3_ms)"
echo
printf 'server: exit codes on SIGTERM: %s; log: %s lines, %s non-2xx, %s level=error\n' \
  "${SERVER_RCS[*]}" "$LOG_LINES" "$LOG_NON2XX" "$LOG_ERRORS"
if [ "$LOG_NON2XX" != 0 ] || [ "$LOG_ERRORS" != 0 ]; then
  grep -E '"status":[^2]|"level":"error"' "$TMP/server.log" | head -5 | sed 's/^/  /'
fi

# ---- the summary table --------------------------------------------------------------------------

DIFF_US=$(calc '%.2f' "$(get skill:tenant_us) - $(get skill:bare_us)")
RSS_MB=$(calc '%.1f' "$(get rss:idle_kb) / 1024")
echo
echo "| figure | MW | ceiling, same run | target | |"
echo "| --- | --- | --- | --- | --- |"
printf '| heartbeat spacing - %s ms, 10 writing actors among %s (B) | p50 %s ms, p99 %s ms | bare libuv timers, same definition: p50 %s / %s ms, p99 %s / %s ms (before / after) | p99 <= 5 ms | %s |\n' \
  "$PERIOD" "$ACTORS" "$(get B:raw_p50_ms)" "$(get B:raw_p99_ms)" "$(get floor0:spacing_p50_ms)" "$(get floor1:spacing_p50_ms)" \
  "$(get floor0:spacing_p99_ms)" "$(get floor1:spacing_p99_ms)" "$(verdict "$(get B:raw_p99_ms)" "<=" 5)"
printf '| the same, beats that ran only (spacing - nearest multiple) | p50 %s ms, p99 %s ms | as above | p99 <= 5 ms | %s |\n' \
  "$(get B:mod_p50_ms)" "$(get B:mod_p99_ms)" "$(verdict "$(get B:mod_p99_ms)" "<=" 5)"
printf '| heartbeat lateness within a round (a111..a999 after a1) | p50 %s ms, p99 %s ms | bare libuv: a round of %s callbacks p50 %s / %s ms; late vs due p99 %s / %s ms | p99 <= 5 ms | %s |\n' \
  "$(get B:lag_p50_ms)" "$(get B:lag_p99_ms)" "$ACTORS" "$(get floor0:round_p50_ms)" "$(get floor1:round_p50_ms)" \
  "$(get floor0:late_p99_ms)" "$(get floor1:late_p99_ms)" "$(verdict "$(get B:lag_p99_ms)" "<=" 5)"
printf '| idle beats, %s actors (A) | %s ticks, %s ok, %s skipped_overlap, %s failed; %s%% CPU | %s ticks due | every tick runs | %s |\n' \
  "$ACTORS" "$(get A:ticks)" "$(get A:ok)" "$(get A:skipped_overlap)" "$(get A:failed)" "$(get A:cpu_pct)" "$EXPECT_TICKS" \
  "$([ "$(get A:skipped_overlap)" = 0 ] && echo PASS || echo MISS)"
printf '| skill call overhead | mw__tenant_run %s us | bare lua_pcall %s us | <= 2 us more | %s (+%s us) |\n' \
  "$(get skill:tenant_us)" "$(get skill:bare_us)" "$(verdict "$DIFF_US" "<=" 2)" "$DIFF_US"
printf '| idle host RSS | %s MB | - | <= 10 MB | %s |\n' "$RSS_MB" "$(verdict "$(get rss:idle_kb)" "<=" 10240)"
printf '| RSS per idle actor | %s kB ((after - idle)/%s); %s kB ((after - after 1)/%s) | - | <= 10 kB | %s |\n' \
  "$PER_ACTOR" "$ACTORS" "$PER_ACTOR2" "$ACTORS" "$(verdict "$PER_ACTOR" "<=" 10)"
printf '| reload, write -> live | p50 %s ms, p99 %s ms | inotify p50 %s ms + 25 ms debounce + rebuild %s ms = %s ms | p99 <= 100 ms | %s |\n' \
  "$(get reload:live_p50_ms)" "$(get reload:live_p99_ms)" "$(get inotify:event_p50_ms)" "$(get skill:tenant_new_p50_ms)" "$FLOOR_RELOAD" \
  "$(verdict "$(get reload:live_p99_ms)" "<=" 100)"
printf '| sweep | %s entries/s (best of 3; median %s/s) | sqlite3 scan %s rows/s (%s/s net of CLI start-up); cjson.decode %s/s; decode + sweep.lua in plain Lua %s/s | >= 300k/s | %s |\n' \
  "$(k "$(get sweep:sweep_best_per_s)")" "$(k "$(get sweep:sweep_median_per_s)")" "$(k "$(get sqlite:per_s)")" \
  "$(k "$(get sqlite:net_per_s)")" "$(k "$(get sweep:cjson_decode_per_s)")" "$(k "$(get sweep:plain_decode_sweep_per_s)")" "$(verdict "$(get sweep:sweep_best_per_s)" ">=" 300000)"
echo
printf 'total bench time: %s s\n' $(( $(date +%s) - T_START ))
