-- bench/extra_facts.lua -- the facts leg of a wake on a large Cortex, through
-- mw.host (the engine in process, no HTTP).  Run by bench/extra.sh from the
-- repository's root:  lua5.4 bench/extra_facts.lua HOME HINTS_FILE N
-- Wakes fresh actors, in turn: one with no context_hint (an actor with no
-- direction nor handover: the hint is empty and the Cortex is not searched),
-- one with a two-word hint that matches labels; each then sleeps.  In the
-- hinted session it also calls navigate with the same hint (the facts leg
-- alone, through the engine, with no session write).  Prints `key value` lines:
-- the answers' latency_ms p50/p99 (server side) of each.
package.cpath = "./build/?.so;" .. package.cpath
local mw = require "mw"
local socket = require "socket"
local HOME, HINTS, N = arg[1], arg[2], tonumber(arg[3] or "300")
local WARM = 20

local hints = {}
for l in io.lines(HINTS) do hints[#hints + 1] = l end
assert(#hints > 0, "no hints")

local h = assert(mw.host { home = HOME, scripts = "scripts", skills = "skills" })
local AG = { role = "agent" }

local function pct(t, p)
  table.sort(t)
  local i = math.floor(#t * p) + 1
  if i > #t then i = #t end
  return t[i]
end

local bare, hinted, nav, nodes = {}, {}, {}, {}
local status_bad, dark = 0, 0
local function wake(actor, hint)
  local body = { actor_id = actor }
  if hint then body.context_hint = hint end
  local st, a = h:call("wake", body, AG)
  if st ~= 200 then status_bad = status_bad + 1; error("wake " .. actor .. ": " .. tostring(st)) end
  return a
end
local function sleep(sid)
  local st = h:call("sleep", { session_id = sid }, AG)
  if st ~= 200 then status_bad = status_bad + 1 end
end

for i = 1, WARM + N do
  local a = wake(string.format("plain%04d", i))
  local la = a.latency_ms
  sleep(a.session_id)
  local bpa = a.boot_packet or {}
  if not (bpa.briefing and bpa.briefing.facts and bpa.briefing.facts.status == "live") then dark = dark + 1 end
  local hint = hints[(i - 1) % #hints + 1]
  local b = wake(string.format("hinted%04d", i), hint)
  local bp = b.boot_packet or {}
  local facts = bp.briefing and bp.briefing.facts or {}
  if facts.status ~= "live" then dark = dark + 1 end
  -- navigate answers carry no latency_ms: timed here (mw.host answers synchronously)
  local t0 = socket.gettime()
  local st = h:call("navigate", { session_id = b.session_id, hint = hint, limit = 12 }, AG)
  local tn = (socket.gettime() - t0) * 1e3
  if st ~= 200 then status_bad = status_bad + 1 end
  sleep(b.session_id)
  if i > WARM then
    bare[#bare + 1] = la
    hinted[#hinted + 1] = b.latency_ms
    nav[#nav + 1] = tn
    nodes[#nodes + 1] = facts.nodes and #facts.nodes or 0
  end
end
h:close()

local nsum = 0
for _, v in ipairs(nodes) do nsum = nsum + v end
print(string.format("facts_n %d", N))
print(string.format("wake_nohint_p50_ms %.3f", pct(bare, 0.5)))
print(string.format("wake_nohint_p99_ms %.3f", pct(bare, 0.99)))
print(string.format("wake_hint_p50_ms %.3f", pct(hinted, 0.5)))
print(string.format("wake_hint_p99_ms %.3f", pct(hinted, 0.99)))
print(string.format("navigate_p50_ms %.3f", pct(nav, 0.5)))
print(string.format("navigate_p99_ms %.3f", pct(nav, 0.99)))
print(string.format("hint_nodes_mean %.1f", nsum / #nodes))
print(string.format("dark_wakes %d", dark))
print(string.format("bad_status %d", status_bad))
