-- triggers_sweep.lua -- a helper of bench/triggers.sh: the sweep's rate, measured
-- through mw.host (the engine in process), beside a bare lua-cjson decode of the
-- same bodies and plain Lua running scripts/sweep.lua over them.
--
--   lua5.4 bench/triggers_sweep.lua HOME N SCRIPTS SKILLS ROUNDS
--
-- HOME is an `mw init` home.  Writes N `run` entries {"input":{"i":n},"skill":"x"}
-- for actor "a" in batches of 10,000 and a head snapshot at the last one, so a wake
-- replays nothing and what differs between the first wake (it sweeps all N: no
-- sweep record yet) and the second (the record is at N: it sweeps nothing) is the
-- sweep.  Each round: a fresh host, one uncounted wake+sleep of another actor (the
-- tenant's state is built), then wake1, sleep, wake2, sleep; between rounds the
-- host is closed and the sweep record deleted (sqlite3 CLI).  Prints `key value`.
package.cpath = "./build/?.so;" .. package.cpath
local mw = require "mw"
local cjson = require "cjson"
local socket = require "socket"

local HOME, N, SCRIPTS, SKILLS, ROUNDS = arg[1], tonumber(arg[2]), arg[3], arg[4], tonumber(arg[5] or 3)
local now = socket.gettime
-- run-queue wait of this process (every thread), ns: /proc/PID/task/*/schedstat
local PID = assert(io.open("/proc/self/stat")):read("l"):match("^(%d+)")
local function rq()
  local sum = 0
  local ls = io.popen("ls /proc/" .. PID .. "/task")
  for tid in ls:lines() do
    local f = io.open("/proc/" .. PID .. "/task/" .. tid .. "/schedstat")
    if f then
      local _, wait = f:read("l"):match("^(%d+) (%d+)")
      sum = sum + tonumber(wait)
      f:close()
    end
  end
  ls:close()
  return sum
end
local function out(k, v) io.write(k, " ", tostring(v), "\n") end
local function fail(msg) io.stderr:write("triggers_sweep: ", msg, "\n") os.exit(1) end

-- ---- the history ----------------------------------------------------------------
local t0 = now()
do
  local home = assert(mw.open(HOME))
  local log = assert(home:log("default", "a"))
  local i = 0
  while i < N do
    local m = math.min(10000, N - i)
    local batch = {}
    for j = 1, m do
      batch[j] = { "run", string.format('{"input":{"i":%d},"skill":"x"}', i + j) }
    end
    assert(log:append_batch(batch))
    i = i + m
  end
  local fold = assert(home:fold(SCRIPTS .. "/fold.lua"))
  assert(log:snapshot(fold, { head = true }))
  fold:close()
  home:close()
end
out("build_s", string.format("%.2f", now() - t0))

-- ---- wakes through mw.host ----------------------------------------------------------
local function host_open()
  return assert(mw.host { home = HOME, scripts = SCRIPTS, skills = SKILLS })
end

local function wake(host, actor)
  local q = rq()
  local t, c = now(), os.clock()
  local status, ans, raw = host:call("wake", { actor_id = actor })
  local dt, dc = now() - t, os.clock() - c
  ans.rq_ms = (rq() - q) / 1e6
  if status ~= 200 then fail("wake " .. actor .. " -> " .. status .. " " .. tostring(raw):sub(1, 300)) end
  local s2, _, raw2 = host:call("sleep", { session_id = ans.session_id })
  if s2 ~= 200 then fail("sleep " .. actor .. " -> " .. s2 .. " " .. tostring(raw2):sub(1, 300)) end
  return dt, ans, dc
end

local function reset_sweep()
  local rc = os.execute(string.format(
    "sqlite3 '%s/mw.db' \"DELETE FROM sweeps WHERE stream = (SELECT id FROM streams WHERE actor = 'a')\"", HOME))
  if not rc then fail("could not delete the sweep record") end
end

local w1, w2, diffs, cdiffs = {}, {}, {}, {}
for r = 1, ROUNDS do
  if r > 1 then reset_sweep() end
  local host = host_open()
  wake(host, "warm")
  local d1, a1, c1cpu = wake(host, "a")
  local d2, a2, c2cpu = wake(host, "a")
  host:close()
  local c1, c2 = a1.boot_packet.briefing.corpus, a2.boot_packet.briefing.corpus
  if c1.entries ~= N or c2.entries ~= N then
    fail(string.format("corpus.entries %s / %s, expected %d", tostring(c1.entries), tostring(c2.entries), N))
  end
  if a1.replayed ~= 0 or a2.replayed ~= 0 then
    fail(string.format("replayed %s / %s, expected 0 (the head is at the last entry)", a1.replayed, a2.replayed))
  end
  w1[r], w2[r], diffs[r], cdiffs[r] = d1, d2, d1 - d2, c1cpu - c2cpu
  out("round" .. r .. "_wake1_ms", string.format("%.1f", d1 * 1e3))
  out("round" .. r .. "_wake2_ms", string.format("%.2f", d2 * 1e3))
  out("round" .. r .. "_cpu_diff_ms", string.format("%.1f", (c1cpu - c2cpu) * 1e3))
  out("round" .. r .. "_wake1_runqueue_ms", string.format("%.1f", a1.rq_ms))
end
table.sort(diffs)
table.sort(w2)
local best = diffs[1]
out("corpus_entries", N)
out("sweep_best_ms", string.format("%.1f", best * 1e3))
out("sweep_median_ms", string.format("%.1f", diffs[(#diffs + 1) // 2] * 1e3))
out("sweep_best_per_s", string.format("%.0f", N / best))
out("sweep_median_per_s", string.format("%.0f", N / diffs[(#diffs + 1) // 2]))
table.sort(cdiffs)
out("sweep_cpu_best_ms", string.format("%.1f", cdiffs[1] * 1e3))
out("sweep_cpu_best_per_s", string.format("%.0f", N / cdiffs[1]))
out("wake2_best_ms", string.format("%.2f", w2[1] * 1e3))

-- ---- the ceilings: the same bodies decoded by lua-cjson, and sweep.lua in plain Lua ----
local home = assert(mw.open(HOME))
local log = assert(home:log("default", "a", false))
local rows = log:read(1, N)
home:close()
if #rows ~= N then fail("read " .. #rows .. " entries") end
local bodies = {}
for i = 1, N do bodies[i] = rows[i].body end

local function best_of(k, f)
  local b = math.huge
  for _ = 1, k do
    local t = now()
    f()
    b = math.min(b, now() - t)
  end
  return b
end

local dec = best_of(3, function()
  local d = cjson.decode
  for i = 1, N do d(bodies[i]) end
end)
out("cjson_decode_ms", string.format("%.1f", dec * 1e3))
out("cjson_decode_per_s", string.format("%.0f", N / dec))

local mwdec = best_of(3, function()
  local d = mw.json.decode
  for i = 1, N do d(bodies[i]) end
end)
out("mwjson_decode_per_s", string.format("%.0f", N / mwdec))

-- sweep.lua as it is, in plain Lua, over entries decoded beforehand by cjson
local function mark(t) return setmetatable(t or {}, nil) end
local env = setmetatable({ json = { object = mark, array = mark, null = cjson.null } }, { __index = _G })
local src = assert(io.open(SCRIPTS .. "/sweep.lua")):read("a")
local sw = assert(load(src, "=sweep.lua", "t", env))()
local entries = {}
for i = 1, N do
  entries[i] = { cursor = rows[i].cursor, ts = rows[i].ts, kind = rows[i].kind, body = cjson.decode(bodies[i]) }
end
rows = nil
local folded
local plain = best_of(3, function()
  local c = sw.initial()
  local fold = sw.fold
  for i = 1, N do c = fold(c, entries[i]) or c end
  folded = c
end)
if folded.entries ~= N then fail("plain sweep folded " .. tostring(folded.entries)) end
out("plain_sweep_per_s", string.format("%.0f", N / plain))
out("plain_decode_sweep_per_s", string.format("%.0f", N / (plain + dec)))

-- ---- skill entry keeps no sweep record: each one sweeps from the stored cursor ----
-- (wall ms of each host:call("skill"); the record is deleted first, as if the actor had never been woken over HTTP)
reset_sweep()
local host = host_open()
wake(host, "warm")
local function skill_entry()
  local t = now()
  local status, _, raw = host:call("skill", { input = mw.null }, { actor = "a", skill = "default" })
  if status ~= 200 then fail("skill entry -> " .. status .. " " .. tostring(raw):sub(1, 300)) end
  return now() - t
end
local e1 = skill_entry()
local e2 = skill_entry()
local dw = wake(host, "a")        -- an HTTP-style wake stores the record
local e3 = skill_entry()
host:close()
out("entry1_ms", string.format("%.1f", e1 * 1e3))
out("entry2_ms", string.format("%.1f", e2 * 1e3))
out("entry_wake_ms", string.format("%.1f", dw * 1e3))
out("entry3_ms", string.format("%.1f", e3 * 1e3))
