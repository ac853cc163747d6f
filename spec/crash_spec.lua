-- crash_spec.lua -- crash consistency and the proof of durability, against a
-- real host.
--
-- 1. Torture rounds: four client processes (a small Lua client this file
--    writes to a temp file) drive wake -> run ... -> sleep on distinct actors
--    of one home; each writes "try ..." before a call and "ok ..." after its
--    200, flushed each time.  The host is SIGKILLed at a seeded random moment
--    and restarted on the same home; then every run and sleep that got a 200
--    must be in the log at its cursor, every chain must verify, no call is in
--    the log twice, sessions whose wake was acknowledged are still usable or
--    were closed by a sleep that really committed (every fourth round restarts
--    with a 400 ms TTL: they must expire, with a handover "expired" when they
--    had committed), every wake without from_snapshot answers 200 (no head
--    points to a failing snapshot) with state = replay(cursor), SIGTERM exits
--    0, and the live Cortex dumps the same bytes as one rebuilt from the logs
--    on a copy of the home.  MW_TORTURE_ROUNDS (default 20) and
--    MW_TORTURE_SEED set the rounds and the seed (in the describe's name); a
--    fresh home every 20 rounds keeps long runs to rounds of bounded cost.
-- 2. Durability under strace: every "HTTP/1.1 200" written for a /v1/run or
--    /v1/sleep follows a completed fsync/fdatasync of mw.db-wal that began
--    after the request was read (pending when strace is not installed).
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function lines(path)
  local t = {}
  local f = io.open(path, "rb")
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

local ROUNDS = tonumber(os.getenv("MW_TORTURE_ROUNDS") or "") or 20
local SEED = tonumber(os.getenv("MW_TORTURE_SEED") or "") or (os.time() % 1000000)
local CLIENTS = 4
-- A fresh home every EPOCH rounds: the Cortex check (dump, copy, rebuild,
-- dump) costs time in proportion to every fact ever staged on the home, so
-- long runs are kept to rounds of bounded cost.
local EPOCH = 20

-- ---- the skill and the client --------------------------------------------------

-- Stages a fact (and sometimes an edge) when its input names a key, so that
-- the Cortex is written by every client concurrently.
local SKILL = [[
return {
  name = "crashfacts",
  description = "records a token; stages a fact about input.key",
  run = function(ctx, input)
    if type(input) == "table" and type(input.key) == "string" then
      ctx.fact { node = { key = input.key, kind = "topic", label = input.tok } }
      if type(input.edge) == "string" then
        ctx.fact { edge = { from = input.key, rel = "near", to = input.edge } }
      end
    end
    return { tok = type(input) == "table" and input.tok or nil }
  end,
}
]]

-- The client: arg = url token actor record seed tag [maxcycles].  One
-- keep-alive connection, no retries; any transport error ends it.
local CLIENT = [[
local socket = require "socket"
local cjson = require "cjson"
local url, token, actor, record, seed, tag, maxcycles = ...
math.randomseed(tonumber(seed))
maxcycles = tonumber(maxcycles) or math.huge
local out = assert(io.open(record, "a"))
local function note(...)
  out:write(table.concat({ ... }, " "), "\n")
  out:flush()
end
local host, port = url:match("^http://([%d%.]+):(%d+)")
local conn
local function call(path, body)
  if not conn then
    conn = socket.tcp()
    conn:settimeout(10)
    if not conn:connect(host, tonumber(port)) then return nil end
    conn:setoption("tcp-nodelay", true)
  end
  local req = "POST " .. path .. " HTTP/1.1\r\nHost: mw\r\nAuthorization: Bearer " .. token ..
    "\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
  if not conn:send(req) then return nil end
  local line = conn:receive("*l")
  if not line then return nil end
  local status = tonumber(line:match("^HTTP/1%.1 (%d+)"))
  local len, close = 0, false
  while true do
    local l = conn:receive("*l")
    if not l then return nil end
    if l == "" then break end
    local n = l:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
    if n then len = tonumber(n) end
    if l:lower():match("^connection:%s*close") then close = true end
  end
  local b = len > 0 and conn:receive(len) or ""
  if not b then return nil end
  if close then conn:close(); conn = nil end
  return status, b
end
local n = 0
local function tok() n = n + 1; return tag .. "-" .. n end
local function cycle()
  note("try", "wake", "-", "-")
  local st, b = call("/v1/wake", cjson.encode { actor_id = actor })
  if not st then return false end
  if st ~= 200 then note("err", "wake", st, (b:gsub("%s", "_"))); return false end
  local w = cjson.decode(b)
  note("ok", "wake", w.session_id, w.boot_packet.cursor)
  for _ = 1, math.random(0, 5) do
    local t = tok()
    local input = { tok = t }
    if math.random() < 0.5 then input.key = "k" .. math.random(1, 6) end
    if input.key and math.random() < 0.3 then input.edge = "k" .. math.random(1, 6) end
    note("try", "run", w.session_id, t)
    st, b = call("/v1/run", cjson.encode { session_id = w.session_id, skill = "crashfacts", input = input })
    if not st then return false end
    if st ~= 200 then note("err", "run", st, (b:gsub("%s", "_"))); return false end
    local r = cjson.decode(b)
    note("ok", "run", w.session_id, t, r.cursor, r.committed)
  end
  local t = tok()
  note("try", "sleep", w.session_id, t)
  st, b = call("/v1/sleep", cjson.encode { session_id = w.session_id, handover = { tok = t } })
  if not st then return false end
  if st ~= 200 then note("err", "sleep", st, (b:gsub("%s", "_"))); return false end
  local s = cjson.decode(b)
  note("ok", "sleep", w.session_id, t, s.cursor, s.snapshot_id)
  return true
end
local c = 0
while c < maxcycles and cycle() do c = c + 1 end
out:close()
os.exit(0)
]]

-- ---- processes -----------------------------------------------------------------

local cleanup_paths, client_pids = {}, {}
local client_path

local function cleanup_all()
  for _, p in ipairs(cleanup_paths) do os.execute("rm -rf " .. q(p)) end
  cleanup_paths = {}
  client_path = nil
end

local function client_script()
  if not client_path then
    client_path = os.tmpname()
    cleanup_paths[#cleanup_paths + 1] = client_path
    write(client_path, CLIENT)
  end
  return client_path
end

-- Starts a client in the background; returns {pid file, done file, record}.
local function spawn_client(h, actor, record, seed, tag, maxcycles)
  local base = os.tmpname()
  cleanup_paths[#cleanup_paths + 1] = base
  local pidf, donef, errf = base .. ".pid", base .. ".done", base .. ".err"
  for _, p in ipairs { pidf, donef, errf } do cleanup_paths[#cleanup_paths + 1] = p end
  local inner = string.format("echo $$ > %s; exec lua5.4 %s %s %s %s %s %d %s %s",
    q(pidf), q(client_script()), q(h.url), q(h.agent), q(actor), q(record), seed, q(tag), q(maxcycles or ""))
  os.execute(string.format("( sh -c %s 2>%s; echo $? > %s ) >/dev/null 2>&1 &", q(inner), q(errf), q(donef)))
  local c = { pidf = pidf, donef = donef, errf = errf, record = record }
  client_pids[#client_pids + 1] = c
  return c
end

-- Waits for the clients to end; kills (by pid) any still running after `secs`.
local function wait_clients(cs, secs)
  local deadline = socket.gettime() + secs
  local stuck = {}
  for _, c in ipairs(cs) do
    while socket.gettime() < deadline and not (H.read_file(c.donef) or ""):match("%d") do socket.sleep(0.005) end
    if not (H.read_file(c.donef) or ""):match("%d") then
      local pid = tonumber(H.read_file(c.pidf) or "")
      if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
      stuck[#stuck + 1] = c.record
    end
  end
  return stuck
end

-- ---- the host --------------------------------------------------------------------

local function start_host()
  local h0 = H.start()
  h0:stop(true)
  local dir = h0.home .. "/tenants/default/skills"
  os.execute("mkdir -p " .. q(dir))
  write(dir .. "/crashfacts.lua", SKILL)
  local h = H.start({ home = h0.home })
  h.agent, h.operator = h0.agent, h0.operator
  return h
end

local function metrics(h)
  local st, _, raw = h:get("/metrics", false)
  assert.are.equal(200, st, raw)
  local m = {}
  for name, v in raw:gmatch("\n([%w_]+) ([%d%.]+)") do m[name] = tonumber(v) end
  return m
end

-- The whole log of an actor: entries by cursor, and the head.
local function full_log(h, actor)
  local entries, from = {}, 1
  while true do
    local st, body, raw = h:get("/v1/actors/" .. actor .. "/log?from=" .. from .. "&limit=1000", h.operator)
    if st == 404 then return entries, 0, false end
    assert(st == 200, "log of " .. actor .. ": " .. tostring(st) .. " " .. tostring(raw))
    for _, e in ipairs(body.entries) do entries[e.cursor] = e end
    if #body.entries < 1000 then return entries, body.head, true end
    from = from + 1000
  end
end

local function verify_chain(h, actor)
  local out, code = H.sh(H.mw .. " log verify --home " .. q(h.home) .. " --tenant default --actor " .. q(actor))
  return code == 0, out
end

local function cortex_dump(home)
  local out, code = H.sh(H.mw .. " cortex dump --home " .. q(home) .. " --tenant default")
  assert(code == 0, "mw cortex dump: " .. out)
  return out
end

-- Where two strings first differ, with some context.
local function first_diff(a, b)
  local n = math.min(#a, #b)
  local i = 1
  while i <= n and a:byte(i) == b:byte(i) do i = i + 1 end
  return string.format("sizes %d vs %d, first difference at byte %d:\n  live:    %s\n  rebuilt: %s",
    #a, #b, i, a:sub(math.max(1, i - 80), i + 120), b:sub(math.max(1, i - 80), i + 120))
end

local function side_conditions(log)
  assert.is_nil(log:match("AddressSanitizer"), log)
  assert.is_nil(log:match("runtime error"), log)
end

-- ---- the torture rounds -----------------------------------------------------------

describe(("crash consistency (seed %d, %d rounds; MW_TORTURE_SEED=%d reproduces)"):format(SEED, ROUNDS, SEED), function()
  local h
  local acked = {}        -- every 200 run/sleep so far: {actor, kind, tok, cursor, committed, sid}
  local tried = {}        -- tok -> {actor, kind, sid} for every call attempted
  local report = {}
  local t_start

  setup(function()
    t_start = socket.gettime()
    h = start_host()
  end)

  teardown(function()
    wait_clients(client_pids, 0)
    if h then
      local log = h:hostlog()
      h:stop()
      side_conditions(log)
    end
    cleanup_all()
    io.write(("\n[crash] seed %d: %d rounds in %.1f s; %s; %s; %d sessions left open by a crash checked as expired\n"):format(
      SEED, ROUNDS, socket.gettime() - t_start, report.busiest or "no metrics", table.concat(report, "; "),
      report.expired or 0))
  end)

  local rng = { state = SEED }
  local function rand()   -- a small LCG, independent of math.random's state in busted
    rng.state = (rng.state * 1103515245 + 12345) % 2147483648
    return rng.state / 2147483648
  end

  for round = 1, ROUNDS do
    local delay = 0.02 + rand() * 0.8
    it(("round %d: SIGKILL %.0f ms after the first 200, restart, every acknowledged write is there"):format(round, delay * 1000), function()
      local t0 = socket.gettime()
      local phases = {}
      local tp = t0
      local function phase(name)
        local now = socket.gettime()
        phases[#phases + 1] = ("%s %.2f"):format(name, now - tp)
        tp = now
      end
      if round > 1 and (round - 1) % EPOCH == 0 then
        side_conditions(h:hostlog())
        h:stop()
        h = start_host()
        acked, tried = {}, {}
      end
      if not h:alive() then h:restart() end
      -- a failed earlier round may have left sessions open: close them, so
      -- that one failure does not cascade into every later round
      local st0, status0 = h:get("/v1/status", h.operator)
      assert.are.equal(200, st0)
      for _, s in ipairs(status0.sessions or {}) do
        local st1, sl = h:post("/v1/sleep", { session_id = s.session_id, handover = { tok = "check-pre" .. round .. "-" .. s.actor_id } })
        if st1 == 200 then
          acked[#acked + 1] = { actor = s.actor_id, kind = "sleep", sid = s.session_id, tok = "check-pre" .. round .. "-" .. s.actor_id,
                                cursor = sl.cursor }
        end
      end
      local records, cs = {}, {}
      for i = 1, CLIENTS do
        local rec = os.tmpname()
        cleanup_paths[#cleanup_paths + 1] = rec
        records[i] = rec
        cs[i] = spawn_client(h, "c" .. i, rec, SEED * 100 + round * 10 + i, ("r%dc%d"):format(round, i))
      end
      -- the delay runs from the first acknowledged call, so that a slow first
      -- wake (the tenant's Lua state is built then) does not empty the round
      local t_first = socket.gettime() + 10
      while socket.gettime() < t_first do
        local any = false
        for _, rec in ipairs(records) do
          if (H.read_file(rec) or ""):find("\nok run", 1, true) then any = true break end
        end
        if any then break end
        socket.sleep(0.005)
      end
      socket.sleep(delay)
      local m = metrics(h)
      local mark = #h:hostlog()
      h:signal("KILL")
      assert.is_false(h:alive(), "the host survived SIGKILL")
      local stuck = wait_clients(cs, 10)
      assert.are.same({}, stuck, "clients did not end after the host died")

      -- what the clients saw
      local last_wake, slept, ran, errs, n_ok = {}, {}, {}, {}, 0
      for i, rec in ipairs(records) do
        local actor = "c" .. i
        for _, l in ipairs(lines(rec)) do
          local f = {}
          for w in l:gmatch("%S+") do f[#f + 1] = w end
          if f[1] == "err" then
            errs[#errs + 1] = actor .. ": " .. l
          elseif f[1] == "try" and f[2] ~= "wake" then
            tried[f[4]] = { actor = actor, kind = f[2], sid = f[3] }
          elseif f[1] == "ok" and f[2] == "wake" then
            last_wake[actor] = f[3]
          elseif f[1] == "ok" and f[2] == "run" then
            n_ok = n_ok + 1
            acked[#acked + 1] = { actor = actor, kind = "run", sid = f[3], tok = f[4], cursor = tonumber(f[5]),
                                  committed = tonumber(f[6]) }
            ran[f[3]] = tonumber(f[5])
          elseif f[1] == "ok" and f[2] == "sleep" then
            n_ok = n_ok + 1
            acked[#acked + 1] = { actor = actor, kind = "sleep", sid = f[3], tok = f[4], cursor = tonumber(f[5]) }
            slept[f[3]] = f[4]
          end
        end
      end
      assert.are.same({}, errs, "a call before the kill was not answered 200:\n" .. h:hostlog():sub(-3000))
      assert.is_true(n_ok > 0, "no client got a 200 before the kill: the round tested nothing\n" .. h:hostlog():sub(-2000))
      local calls = (m.mw_wakes_total or 0) + (m.mw_runs_total or 0) + (m.mw_sleeps_total or 0)
      assert.is_true((m.mw_fsyncs_total or 0) <= calls + 1, "more group commits than calls: " .. cjson.encode(m))
      if (m.mw_fsyncs_total or 0) > 0 and calls > (report.busiest_calls or 0) then
        report.busiest_calls = calls
        report.busiest = ("busiest round (%d): /metrics before the kill: %d wakes+runs+sleeps, %d entries, %d commits,"
          .. " %d fsyncs = %.2f calls and %.2f entries per fsync"):format(round, calls,
          m.mw_entries_appended_total or 0, m.mw_commits_total or 0, m.mw_fsyncs_total, calls / m.mw_fsyncs_total,
          (m.mw_entries_appended_total or 0) / m.mw_fsyncs_total)
      end

      phase("load+kill")
      -- restart on the same home; every fourth round with a short session TTL,
      -- so that the sessions the crash left open must expire as the contract says
      local expiring = round % 4 == 0
      h:restart(expiring and { args = "--session-ttl 400" } or nil)
      phase("restart")
      local logs, heads, exists = {}, {}, {}
      for i = 1, CLIENTS do logs["c" .. i], heads["c" .. i], exists["c" .. i] = full_log(h, "c" .. i) end

      -- every acknowledged run and sleep is in the log, at its cursor
      local missing = {}
      for _, a in ipairs(acked) do
        local e = logs[a.actor]
        if a.kind == "run" then
          local first = a.cursor - a.committed + 1
          local en = e[first]
          if not (en and en.kind == "run" and type(en.body) == "table" and type(en.body.input) == "table"
                  and en.body.input.tok == a.tok) then
            missing[#missing + 1] = ("%s run %s at %d: %s"):format(a.actor, a.tok, first, en and cjson.encode(en) or "nothing")
          end
          for c = first + 1, a.cursor do
            if not (e[c] and e[c].kind == "fact") then
              missing[#missing + 1] = ("%s run %s: its fact at %d: %s"):format(a.actor, a.tok, c,
                e[c] and cjson.encode(e[c]) or "nothing")
            end
          end
        else
          local en = e[a.cursor]
          if not (en and en.kind == "handover" and type(en.body) == "table" and type(en.body.handover) == "table"
                  and en.body.handover.tok == a.tok and en.body.reason == "sleep") then
            missing[#missing + 1] = ("%s sleep %s at %d: %s"):format(a.actor, a.tok, a.cursor, en and cjson.encode(en) or "nothing")
          end
        end
        if #missing > 10 then break end
      end
      assert.are.same({}, missing, "acknowledged writes lost or moved after SIGKILL (round " .. round .. ")")

      -- no call is in the log twice; nothing is in it that no client sent
      local seen, dup = {}, {}
      for actor, e in pairs(logs) do
        for c = 1, heads[actor] do
          local en = e[c]
          assert(en, actor .. ": the log has a hole at cursor " .. c .. " (head " .. heads[actor] .. ")")
          local t = en.kind == "run" and type(en.body.input) == "table" and en.body.input.tok
            or en.kind == "handover" and type(en.body.handover) == "table" and en.body.handover.tok or nil
          if t then
            if seen[t] then dup[#dup + 1] = actor .. " " .. t .. " at " .. seen[t] .. " and " .. c end
            seen[t] = c
            if not tried[t] and not t:match("^check") then dup[#dup + 1] = actor .. ": " .. t .. " was never sent" end
          end
        end
      end
      assert.are.same({}, dup, "entries duplicated or invented")

      phase("log checks")
      -- every chain verifies
      for i = 1, CLIENTS do
        if exists["c" .. i] then   -- an actor whose first wake was cut by the kill has no log yet
          local ok, out = verify_chain(h, "c" .. i)
          assert(ok, "mw log verify c" .. i .. ": " .. out)
        end
      end

      phase("verify")
      -- sessions whose wake was acknowledged: still usable, or closed by a sleep that committed
      local st, status, raw = h:get("/v1/status", h.operator)
      assert.are.equal(200, st, raw)
      local open = {}
      for _, s in ipairs(status.sessions or {}) do open[s.session_id] = s end
      if expiring then
        -- every restored session is slept by the host once idle past the TTL
        local deadline = socket.gettime() + 5
        while #(status.sessions or {}) > 0 and socket.gettime() < deadline do
          socket.sleep(0.05)
          st, status, raw = h:get("/v1/status", h.operator)
          assert.are.equal(200, st, raw)
        end
        assert.are.same({}, status.sessions, "sessions restored after the crash did not expire (TTL 400 ms)")
        for i = 1, CLIENTS do
          local actor = "c" .. i
          local sid = last_wake[actor]
          if sid then
            local st2, r, raw2 = h:post("/v1/run", { session_id = sid, input = { tok = "check-x" .. round .. "-" .. actor } })
            assert.are.equal(409, st2, actor .. ": a session the host should have expired: " .. tostring(raw2))
            assert.are.equal("session_closed", r.error.code, raw2)
            local lg, head = full_log(h, actor)
            local closing
            for c = head, (ran[sid] or 0) + 1, -1 do
              if lg[c].kind == "handover" then closing = lg[c] break end
            end
            if ran[sid] and not slept[sid] then
              report.expired = (report.expired or 0) + 1
              -- it committed: expiry appended a handover "expired" (or its own sleep did, unacknowledged)
              assert(closing, actor .. ": session " .. sid .. " committed, expired, and no handover follows its last run")
              local t = type(closing.body.handover) == "table" and closing.body.handover.tok
              assert(closing.body.reason == "expired" or (closing.body.reason == "sleep" and tried[t] and tried[t].sid == sid),
                actor .. ": the handover closing session " .. sid .. ": " .. cjson.encode(closing))
            end
          end
        end
      end
      for i = 1, CLIENTS do
        local actor = "c" .. i
        local sid = last_wake[actor]
        if sid and not expiring then
          local st2, r, raw2 = h:post("/v1/run", { session_id = sid, input = { tok = "check-r" .. round .. "-" .. actor } })
          if slept[sid] then
            assert.are.equal(409, st2, actor .. ": a session whose sleep was acknowledged: " .. tostring(raw2))
            assert.are.equal("session_closed", r.error.code, raw2)
          elseif st2 == 200 then
            assert.is_truthy(open[sid], actor .. ": a usable session missing from /v1/status")
            acked[#acked + 1] = { actor = actor, kind = "run", sid = sid, tok = "check-r" .. round .. "-" .. actor,
                                  cursor = r.cursor, committed = r.committed }
            assert.are.equal(heads[actor] + 1, r.cursor, raw2)
          else
            -- closed: only by a sleep of this session that committed although its 200 was lost
            assert.are.equal(409, st2, actor .. ": the session of an acknowledged wake after restart: " .. tostring(raw2))
            assert.are.equal("session_closed", r.error.code, raw2)
            local found
            for c = heads[actor], 1, -1 do
              local en = logs[actor][c]
              if en.kind == "handover" and type(en.body.handover) == "table" then
                local t = en.body.handover.tok
                found = tried[t] and tried[t].sid == sid
                break
              end
            end
            assert(found, actor .. ": session " .. sid .. " is closed but its sleep is not the last handover in the log")
          end
        end
      end
      -- sleep everything still open (wakes whose 200 was lost, sessions kept above)
      st, status, raw = h:get("/v1/status", h.operator)
      assert.are.equal(200, st, raw)
      for _, s in ipairs(status.sessions or {}) do
        local st3, sl, raw3 = h:post("/v1/sleep", { session_id = s.session_id, handover = { tok = "check-s" .. round .. "-" .. s.actor_id } })
        assert.are.equal(200, st3, "sleep of a session open after restart: " .. tostring(raw3))
        acked[#acked + 1] = { actor = s.actor_id, kind = "sleep", sid = s.session_id,
                              tok = "check-s" .. round .. "-" .. s.actor_id, cursor = sl.cursor }
      end

      -- every head verifies: a wake without from_snapshot answers 200, state = replay(cursor)
      for i = 1, CLIENTS do
        local actor = "c" .. i
        local st4, w, raw4 = h:wake(actor)
        assert.are_not.equal("snapshot_corrupt", type(w) == "table" and w.error and w.error.code,
          actor .. ": the head fails verification after SIGKILL: " .. tostring(raw4))
        assert.are.equal(200, st4, actor .. ": " .. tostring(raw4))
        local _, head = full_log(h, actor)
        assert.are.equal(head, w.boot_packet.cursor)
        if head > 0 then
          local st5, rp, raw5 = h:post("/v1/actors/" .. actor .. "/replay", { to = head }, h.operator)
          assert.are.equal(200, st5, raw5)
          assert.are.same(rp.state, w.boot_packet.state)
        end
        local st6, _, raw6 = h:post("/v1/sleep", { session_id = w.session_id })
        assert.are.equal(200, st6, raw6)
      end

      phase("sessions+wakes")
      -- the live Cortex equals one rebuilt from the logs (host stopped, on a copy)
      local log = h:hostlog()
      h:signal("TERM")
      assert.are.equal(0, h:exit_status(), "SIGTERM: the host did not drain and exit 0\n" .. log:sub(mark + 1):sub(-2000))
      side_conditions(h:hostlog())
      local live = cortex_dump(h.home)
      local copy = h.home .. ".copy"
      cleanup_paths[#cleanup_paths + 1] = copy
      os.execute("rm -rf " .. q(copy))
      local out, code = H.sh("cp -a " .. q(h.home) .. " " .. q(copy))
      assert.are.equal(0, code, out)
      out, code = H.sh(H.mw .. " cortex rebuild --home " .. q(copy) .. " --tenant default")
      assert.are.equal(0, code, out)
      local rebuilt = cortex_dump(copy)
      os.execute("rm -rf " .. q(copy))
      if live ~= rebuilt then
        error("round " .. round .. ": the live Cortex differs from a rebuild from the logs: " .. first_diff(live, rebuilt))
      end
      assert.is_truthy(live:find('"k%d"') or live:find('"k', 1, true), "the Cortex holds no fact: the clients staged none")
      phase("cortex")
      if round == ROUNDS or round == 1 then
        report[#report + 1] = ("round %d: %d acknowledged runs+sleeps so far, %.2f s (%s)"):format(round, #acked,
          socket.gettime() - t0, table.concat(phases, ", "))
      end
    end)
  end
end)

-- ---- durability under strace --------------------------------------------------------

-- One parsed syscall: name, pid, start and end times, the text of its arguments and result.
local function parse_trace(path)
  local calls, pending = {}, {}
  for l in io.lines(path) do
    local pid, ts, rest = l:match("^(%d+)%s+(%d+%.%d+)%s+(.*)$")
    if pid then
      ts = tonumber(ts)
      local name, tail = rest:match("^<%.%.%. (%w+) resumed>(.*)$")
      if name then
        local p = pending[pid]
        pending[pid] = nil
        if p then
          calls[#calls + 1] = { pid = pid, name = p.name, t0 = p.t0, t1 = ts, text = p.text .. tail }
        end
      elseif rest:match("<unfinished %.%.%.>$") then
        pending[pid] = { name = rest:match("^(%w+)%("), t0 = ts, text = rest:gsub("%s*<unfinished %.%.%.>$", "") }
      elseif rest:match("^%w+%(") then
        local dur = tonumber(rest:match("<(%d+%.%d+)>%s*$") or "0")
        calls[#calls + 1] = { pid = pid, name = rest:match("^(%w+)%("), t0 = ts, t1 = ts + dur, text = rest }
      end
    end
  end
  return calls
end

describe("durability under strace", function()
  local h, trace, strace_pid, child
  local extra = {}

  after_each(function()
    wait_clients(client_pids, 0)
    if strace_pid and not child then   -- a host strace started but the test never found
      child = tonumber((H.read_file(("/proc/%d/task/%d/children"):format(strace_pid, strace_pid)) or ""):match("%d+"))
    end
    if child then os.execute("kill -9 " .. child .. " 2>/dev/null") end
    if h then
      local log = h:hostlog()
      h:stop()
      side_conditions(log)
    end
    if strace_pid then os.execute("kill " .. strace_pid .. " 2>/dev/null") end
    for _, p in ipairs(extra) do os.execute("rm -rf " .. q(p)) end
    cleanup_all()
  end)

  it("every 200 to /v1/run and /v1/sleep is written after an fsync of mw.db-wal issued after its request was read", function()
    local _, has = H.sh("command -v strace")
    if has ~= 0 then
      pending("strace is not installed (apt-get install strace; .ci/run installs it)")
      return
    end
    trace = os.tmpname()
    extra[#extra + 1] = trace
    local h0 = H.start()
    h0:stop(true)
    os.execute("mkdir -p " .. q(h0.home .. "/tenants/default/skills"))
    write(h0.home .. "/tenants/default/skills/crashfacts.lua", SKILL)
    h = H.start({ home = h0.home, env = ("strace -f -y -ttt -T -s 200 -e trace=fdatasync,fsync,write,writev,sendto,sendmsg,"
      .. "read,readv,recvfrom,recvmsg -o %s "):format(q(trace)) })
    h.agent, h.operator = h0.agent, h0.operator
    -- h.pid is strace's; the host is its child
    strace_pid = h.pid
    local deadline = socket.gettime() + 5
    repeat   -- not pgrep: under `make sanitize` (libasan preloaded) it can deadlock at start
      child = tonumber((H.read_file(("/proc/%d/task/%d/children"):format(strace_pid, strace_pid)) or ""):match("%d+"))
      if not child then socket.sleep(0.01) end
    until child or socket.gettime() > deadline
    assert(child, "no host under strace")
    h.pid = child
    assert.is_truthy((H.read_file("/proc/" .. h.pid .. "/cmdline") or ""):find("serve", 1, true))

    -- two clients at once, so that commits are grouped
    local cs = {}
    for i = 1, 2 do
      local rec = os.tmpname()
      extra[#extra + 1] = rec
      cs[i] = spawn_client(h, "s" .. i, rec, 7 + i, "st" .. i, 4)
    end
    assert.are.same({}, wait_clients(cs, 60), "clients under strace did not finish")
    local runs, sleeps = 0, 0
    for _, c in ipairs(cs) do
      for _, l in ipairs(lines(c.record)) do
        assert.is_nil(l:match("^err"), l)
        if l:match("^ok run") then runs = runs + 1 end
        if l:match("^ok sleep") then sleeps = sleeps + 1 end
      end
    end
    assert.are.equal(8, sleeps, "clients under strace: " .. (H.read_file(cs[1].record) or "") .. (H.read_file(cs[1].errf) or ""))
    h:signal("TERM")
    child = nil
    local t_end = socket.gettime() + 5
    while socket.gettime() < t_end and os.execute("kill -0 " .. strace_pid .. " 2>/dev/null") do socket.sleep(0.01) end
    strace_pid = nil

    local calls = parse_trace(trace)
    local syncs, socks = {}, {}
    local checked = { ["/v1/run"] = 0, ["/v1/sleep"] = 0 }
    local bad = {}
    for _, c in ipairs(calls) do
      local fdpath = c.text:match("^%w+%(%d+<([^>]*)>")
      if (c.name == "fdatasync" or c.name == "fsync") and fdpath and fdpath:match("/mw%.db%-wal$")
         and c.text:match("%)%s*=%s*0") then
        syncs[#syncs + 1] = c
      end
      local sock = fdpath and fdpath:match("^socket:%[(%d+)%]$")
      if sock then
        local s = socks[sock] or {}
        socks[sock] = s
        local ok = c.text:match("%)%s*=%s*(%d+)") and tonumber(c.text:match("%)%s*=%s*(%d+)")) > 0
        if ok and (c.name == "read" or c.name == "readv" or c.name == "recvfrom" or c.name == "recvmsg") then
          s.read_end = c.t1
          local m, p = c.text:match('"(%u+) (/[^ ]*) HTTP/1%.1')
          if m then s.route = p end
        elseif ok and c.text:find("HTTP/1.1 ", 1, true) then
          local code = tonumber(c.text:match("HTTP/1%.1 (%d+)"))
          if code == 200 and (s.route == "/v1/run" or s.route == "/v1/sleep") then
            checked[s.route] = checked[s.route] + 1
            local found
            for _, y in ipairs(syncs) do
              if y.t0 >= s.read_end and y.t1 <= c.t0 then found = y break end
            end
            if not found then
              bad[#bad + 1] = ("%s 200 written at %.6f (request read by %.6f) with no completed WAL fsync between"):format(
                s.route, c.t0, s.read_end)
            end
          end
          s.route = nil
        end
      end
    end
    assert.is_true(#syncs > 0, "no fsync/fdatasync of mw.db-wal in the trace")
    assert.are.equal(runs, checked["/v1/run"], "200s to /v1/run in the trace vs. what the clients got")
    assert.are.equal(sleeps, checked["/v1/sleep"], "200s to /v1/sleep in the trace vs. what the clients got")
    assert.are.same({}, bad)
  end)
end)
