-- bench/store.lua -- MW's storage figures beside ceilings measured in the same
-- run on the same machine: durable appends, batched appends, chain verify,
-- replay through the fold, snapshot read+verify, JSON decode.
-- Run from the repository root: `make bench` (or `lua5.4 bench/store.lua`).
-- Writes only under a temporary directory in /tmp, removed at the end, and
-- build/bench/ (bare, the C helper that measures the ceilings, and libmw.a).
--
-- Environment: MW_BENCH_N (entries for batch/verify/replay, default 200000),
-- MW_BENCH_SINGLE_SECS (time for single appends, default 4), MW_BENCH_KEEP=1
-- keeps the temporary directory.

package.cpath = "./build/?.so;" .. package.cpath

local mw = require "mw"
local ok_cjson, cjson = pcall(require, "cjson")
if not ok_cjson then error("bench needs lua-cjson (make deps)") end
local ok_socket, socket = pcall(require, "socket")
if not ok_socket then error("bench needs lua-socket for a wall clock (make deps)") end
local now = socket.gettime

local N = tonumber(os.getenv("MW_BENCH_N")) or 200000
local BATCH = 1000
local SINGLE_SECS = tonumber(os.getenv("MW_BENCH_SINGLE_SECS")) or 4
local SINGLE_MAX = 20000
local SNAP_ITERS = 2000
local DECODE_ITERS = 3000

local TARGET = {
  verify = 1e6,          -- entries/s
  replay = 400e3,        -- entries/s
  batch = 250e3,         -- entries/s
  snap_p50_us = 50,      -- µs
}

-- ---- plumbing ----------------------------------------------------------------

local function sh(cmd)
  local ok = os.execute(cmd)
  if not ok then error("command failed: " .. cmd) end
end

local function capture(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local ok = p:close()
  if not ok then error("command failed: " .. cmd .. "\n" .. out) end
  return out
end

local function kv(text)
  local t = {}
  for k, v in text:gmatch("(%S+) (%S+)\n") do t[k] = tonumber(v) or v end
  return t
end

local function fmt_rate(x)
  if x >= 1e6 then return string.format("%.2fM/s", x / 1e6) end
  if x >= 1e3 then return string.format("%.1fk/s", x / 1e3) end
  return string.format("%.0f/s", x)
end

local function pct(sorted, p)
  return sorted[math.max(1, math.min(#sorted, math.floor(#sorted * p) + 1))]
end

local rows = {}   -- the summary table

local function report(name, mw_fig, ceilings, target)
  print(string.format("%-34s MW %s", name, mw_fig))
  for _, c in ipairs(ceilings) do print(string.format("%-34s    vs %s", "", c)) end
  if target then print(string.format("%-34s    target %s", "", target)) end
  rows[#rows + 1] = {name, mw_fig, table.concat(ceilings, "; "), target or "-"}
end

local function verdict(ok) return ok and "PASS" or "MISS" end

-- ---- setup ---------------------------------------------------------------------

local tmp, HOME   -- set by the parent process only
local BARE = "build/bench/bare"

-- The helper links the store's objects from build/obj through an archive, so
-- that only what it calls (and what that calls) is pulled in: the host's
-- objects need libraries the helper has no use for.
local function build_helper()
  sh("mkdir -p build/bench && rm -f build/bench/libmw.a")
  sh("ar rcs build/bench/libmw.a $(ls build/obj/*.o | grep -v -e '/main\\.o$' -e '/cli\\.o$')")
  sh("cc -O2 -std=c11 -Wall -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Iruntime"
     .. " $(pkg-config --cflags lua5.4) bench/bare.c build/bench/libmw.a"
     .. " -o " .. BARE .. " -llua5.4 -lsqlite3 -lcrypto -lm")
end

-- Bodies the way an actor's log looks: runs, facts, remembered notes, now and
-- then a handover; canonical JSON text of 100-250 bytes.
local WORDS = {"architecture", "decision", "wake", "sleep", "fold", "cursor", "snapshot",
               "mentee", "source", "delta", "sweep", "briefing", "cortex", "handover"}
local function words(i, n)
  local t = {}
  for k = 1, n do t[k] = WORDS[(i * 7 + k * 13) % #WORDS + 1] end
  return table.concat(t, " ")
end

local function entry(i)
  local m = i % 20
  if m < 10 then
    return "run", string.format('{"input":{"n":%d,"text":"%s"},"skill":"note"}', i, words(i, 10))
  elseif m < 16 then
    return "remember", string.format('{"key":"k%d","value":{"at":%d,"text":"%s"}}', i % 64, i, words(i, 8))
  elseif m < 19 then
    return "fact", string.format('{"claim":"%s","source":"repo","trust":"claim","valid_from":%d}',
                                 words(i, 9), i)
  else
    return "handover", string.format('{"handover":{"next":"%s","open":[%d,%d]},"reason":"sleep"}',
                                     words(i, 6), i - 1, i)
  end
end

-- ---- the benchmarks ------------------------------------------------------------

-- fsync latency on a shared virtual disk drifts by a factor of several, so MW
-- and bare take turns: four rounds of each, the best of each.
local function bench_single(home)
  local mw_best, bare_best, total = 0, 0, 0
  for round = 1, 4 do
    local log = assert(home:log("bench", "single" .. round))
    local n, t0 = 0, now()
    repeat
      n = n + 1
      local kind, body = entry(n)
      assert(log:append(kind, body))
    until n >= SINGLE_MAX or now() - t0 >= SINGLE_SECS / 4
    mw_best = math.max(mw_best, n / (now() - t0))
    total = total + n
    local b = kv(capture(string.format("%s insert %s bench single%d %s/bare1.db 1", BARE, HOME, round, tmp)))
    assert(b.rows == n, "bare helper saw a different number of rows")
    bare_best = math.max(bare_best, b.rows / b.secs)
  end
  os.remove(tmp .. "/bare1.db")
  report("durable append, 1 entry/tx", string.format("%s (%d entries)", fmt_rate(mw_best), total),
         {string.format("bare SQLite INSERT tx %s (%.0f%%)", fmt_rate(bare_best), 100 * mw_best / bare_best)})
end

-- Two rounds on two streams (the first is kept for verify and replay), and
-- two bare rounds; the best of each.
local function bench_batch(home)
  local batches = {}
  for b = 1, N // BATCH do
    local items = {}
    for j = 1, BATCH do
      local kind, body = entry((b - 1) * BATCH + j)
      items[j] = {kind, body}
    end
    batches[b] = items
  end
  local n = #batches * BATCH
  local best = math.huge
  for _, actor in ipairs{"replay", "batch2"} do
    local log = assert(home:log("bench", actor))
    collectgarbage()
    local t0 = now()
    for b = 1, #batches do assert(log:append_batch(batches[b])) end
    best = math.min(best, now() - t0)
  end
  batches = nil
  collectgarbage()
  local mw_rate = n / best
  local bare = math.huge
  for _ = 1, 2 do
    local b = kv(capture(string.format("%s insert %s bench replay %s/bare1000.db %d", BARE, HOME, tmp, BATCH)))
    assert(b.rows == n)
    bare = math.min(bare, b.secs)
  end
  os.remove(tmp .. "/bare1000.db")
  local bare_rate = n / bare
  -- The breakdown: the same rows through mw_log_append from C (no Lua).
  local c = kv(capture(string.format("%s mwappend %s bench replay %d", BARE, HOME, BATCH)))
  report("durable append, 1000 entries/tx", fmt_rate(mw_rate),
         {string.format("bare SQLite INSERT x1000 tx %s (%.0f%%)", fmt_rate(bare_rate), 100 * mw_rate / bare_rate),
          string.format("(mw_log_append from C, no Lua %s)", fmt_rate(c.rows / c.secs))},
         string.format(">= %s %s", fmt_rate(TARGET.batch), verdict(mw_rate >= TARGET.batch)))
  return assert(home:log("bench", "replay")), n
end

local function bench_verify(log, n)
  local best = math.huge
  for _ = 1, 3 do
    local t0 = now()
    assert(log:verify())
    best = math.min(best, now() - t0)
  end
  local mw_rate = n / best
  local b = kv(capture(string.format("%s verify %s bench replay", BARE, HOME)))
  assert(b.rows == n and b.mismatches == 0, "bare verify disagrees with the log")
  report("verify (SHA-256 chain)", fmt_rate(mw_rate),
         {string.format("bare SQLite scan %s", fmt_rate(n / b.scan_secs)),
          string.format("bare SHA-256 of framed bytes %s (%.0f B/entry)", fmt_rate(n / b.sha_secs),
                        b.framed_bytes / n),
          string.format("bare scan+frame+SHA-256 %s (%.0f%%)", fmt_rate(n / b.scan_sha_secs),
                        100 * mw_rate / (n / b.scan_sha_secs))},
         string.format(">= %s %s", fmt_rate(TARGET.verify), verdict(mw_rate >= TARGET.verify)))
  return {hmac = n / b.hmac_secs, hmac_reuse = n / b.hmac_reuse_secs}
end

local function best_rate(n, rounds, fn)
  local best = math.huge
  for _ = 1, rounds do
    collectgarbage()
    local t0 = now()
    fn()
    best = math.min(best, now() - t0)
  end
  return n / best
end

local function bench_replay(home, log, n)
  local fold = assert(home:fold("scripts/fold.lua"))
  local mw_rate = best_rate(n, 3, function()
    local state, info = log:hydrate(fold, {to = n, checkpoint_every = -1})
    assert(state, info)
    assert(info.replayed == n and info.checkpoints_saved == 0, "replay did not fold every entry")
  end)

  -- Ceilings: the same bodies, already in memory, decoded by cjson; and the
  -- fold's own Lua over cjson-decoded entries (no sandbox, no SQLite).
  local entries = assert(log:read(1, n))
  local bodies = {}
  for i = 1, #entries do bodies[i] = entries[i].body end
  local decode, mwdecode = cjson.decode, mw.json.decode
  local cj = best_rate(n, 3, function() for i = 1, n do decode(bodies[i]) end end)
  local mj = best_rate(n, 3, function() for i = 1, n do mwdecode(bodies[i]) end end)
  local f = dofile("scripts/fold.lua")
  local plain = best_rate(n, 3, function()
    local st = f.initial()
    for i = 1, n do
      local e = entries[i]
      st = f.fold(st, {cursor = e.cursor, ts = e.ts, kind = e.kind, body = decode(e.body)})
    end
  end)
  entries, bodies = nil, nil
  collectgarbage()
  report("replay through scripts/fold.lua", fmt_rate(mw_rate),
         {string.format("bare cjson.decode of the bodies %s (%.0f%%)", fmt_rate(cj), 100 * mw_rate / cj),
          string.format("(mw.json.decode of the bodies %s)", fmt_rate(mj)),
          string.format("(fold.lua in plain Lua over cjson.decode %s)", fmt_rate(plain))},
         string.format(">= %s %s", fmt_rate(TARGET.replay), verdict(mw_rate >= TARGET.replay)))
  fold:close()
end

local function bench_snapshot(home)
  local log = assert(home:log("bench", "snap"))
  local fold = assert(home:fold("scripts/fold.lua"))
  -- ~10 KB of state: 40 remembered notes of ~230 bytes each, then a head.
  for i = 1, 40 do
    assert(log:append("remember", {key = string.format("note%02d", i),
                                   value = {text = words(i, 28), n = i, tags = mw.array{"a", "b"}}}))
  end
  local id = assert(log:snapshot(fold, {head = true}))
  local state, info
  local times = {}
  for i = -SNAP_ITERS // 10, SNAP_ITERS do
    local t0 = now()
    state, info = log:hydrate(fold)
    local dt = now() - t0
    assert(state, info)
    if i > 0 then times[#times + 1] = dt * 1e6 end
  end
  assert(info.replayed == 0 and info.head_id == id and info.start_id == id, "hydrate did not start at the head")
  table.sort(times)
  local b = kv(capture(string.format("%s snap %s bench snap %s %d", BARE, HOME, id, SNAP_ITERS)))
  local name = string.format("snapshot read+verify (%.1f KB)", #state / 1024)
  report(name, string.format("get+verify p50 %.1f µs, p99 %.1f µs", b.mw_p50_us, b.mw_p99_us),
         {string.format("bare SELECT+SHA-256+link p50 %.1f µs, p99 %.1f µs", b.bare_p50_us, b.bare_p99_us),
          string.format("(log:hydrate, replayed 0, incl. decode+encode: p50 %.1f µs, p99 %.1f µs)",
                        pct(times, 0.5), pct(times, 0.99))},
         string.format("p50 <= %d µs %s", TARGET.snap_p50_us, verdict(b.mw_p50_us <= TARGET.snap_p50_us)))
  fold:close()
  return state
end

-- mw and cjson take turns, five rounds each, the best of each.
local function bench_decode(state)
  local function round(fn)
    local t0 = now()
    for _ = 1, DECODE_ITERS do fn(state) end
    return (now() - t0) / DECODE_ITERS * 1e6
  end
  assert(mw.json.decode(state))
  local m, c = math.huge, math.huge
  for _ = 1, 5 do
    collectgarbage()
    m = math.min(m, round(mw.json.decode))
    collectgarbage()
    c = math.min(c, round(cjson.decode))
  end
  report(string.format("decode %.1f KB state into Lua", #state / 1024),
         string.format("mw.json.decode %.1f µs", m),
         {string.format("cjson.decode %.1f µs (mw/cjson %.2f)", c, m / c)},
         string.format("no slower than cjson %s", verdict(m <= c)))
end

-- A keyed home (HMAC-SHA-256 chain) needs MW_CHAIN_KEY_FILE when it is
-- opened, so its verify runs in a child process: `store.lua --keyed DIR N`.
local function keyed_child(dir, n)
  local home = assert(mw.open(dir, {create = true}))
  local log = assert(home:log("bench", "keyed"))
  for b = 1, n // BATCH do
    local items = {}
    for j = 1, BATCH do
      local kind, body = entry((b - 1) * BATCH + j)
      items[j] = {kind, body}
    end
    assert(log:append_batch(items))
  end
  local best = math.huge
  for _ = 1, 3 do
    local t0 = now()
    assert(log:verify())
    best = math.min(best, now() - t0)
  end
  home:close()
  print(string.format("rate %.1f", (n // BATCH * BATCH) / best))
end

local function bench_keyed(bare)
  local key = assert(io.open(tmp .. "/chain.key", "wb"))
  key:write(mw.sha256("bench chain key"))
  key:close()
  local lua = arg and arg[-1] or "lua5.4"
  local b = kv(capture(string.format("MW_CHAIN_KEY_FILE=%s/chain.key %s bench/store.lua --keyed %s/keyed %d",
                                     tmp, lua, tmp, N)))
  report("verify (HMAC-SHA-256 chain)", fmt_rate(b.rate),
         {string.format("bare HMAC() per entry %s", fmt_rate(bare.hmac)),
          string.format("bare EVP_MAC context reused %s", fmt_rate(bare.hmac_reuse))})
end

-- ---- main --------------------------------------------------------------------

local function main()
  build_helper()
  local home = assert(mw.open(HOME, {create = true}))
  print(string.format("MW store bench -- %s, %s, %d entries, %s",
                      os.date("!%Y-%m-%d"), capture("uname -m"):gsub("%s+$", ""), N,
                      capture("nproc"):gsub("%s+$", "") .. " cores"))
  local function loadavg()
    local f = io.open("/proc/loadavg")
    local l = f and f:read("l") or "?"
    if f then f:close() end
    return l:match("^(%S+ %S+ %S+)") or l
  end
  print(string.format("home %s (WAL, synchronous=FULL); load average %s", HOME, loadavg()))
  print("(other work on this machine moves every figure; compare MW with its ceiling)\n")
  local t0 = now()
  bench_single(home)
  local log, n = bench_batch(home)
  local hmac = bench_verify(log, n)
  bench_keyed(hmac)
  bench_replay(home, log, n)
  local state = bench_snapshot(home)
  bench_decode(state)
  home:close()
  print(string.format("\n(%.0f s; load average now %s)\n\n| figure | MW | ceiling | target |\n| --- | --- | --- | --- |",
                      now() - t0, loadavg()))
  for _, r in ipairs(rows) do print("| " .. table.concat(r, " | ") .. " |") end
end

if arg[1] == "--keyed" then
  keyed_child(arg[2], tonumber(arg[3]))
  os.exit(0)
end

tmp = capture("mktemp -d /tmp/mw-bench.XXXXXX"):gsub("%s+$", "")
HOME = tmp .. "/home"

local ok, err = xpcall(main, debug.traceback)
if os.getenv("MW_BENCH_KEEP") == "1" then
  print("kept " .. tmp)
else
  os.execute("rm -rf '" .. tmp .. "'")
end
if not ok then
  io.stderr:write(err, "\n")
  os.exit(1)
end
