-- triggers_spec.lua -- what brings an actor online besides a wake: heartbeats
-- (a C timer per actor: no overlap, awake actors skipped, idle beats write
-- nothing), skill entry (POST /v1/actors/{id}/skills/{name}, `mw skill run`),
-- the operator's load (`mw load`), and ctx.call (another actor's skill, run
-- after the caller's run commits).  Against real hosts on temporary homes.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"
require("socket.http").TIMEOUT = 20   -- a hung host fails the test, never the run

-- ---- helpers ------------------------------------------------------------------

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  os.execute("mkdir -p " .. q(path:match("^(.*)/[^/]*$")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- A fresh home (mw init) with `files` (path relative to the home -> text) in
-- place before the host starts; returns the started host, tokens set.
local function serve(files, args)
  local home = os.tmpname()
  os.remove(home)
  local out = H.sh(H.mw .. " init --home " .. q(home) .. " --json")
  local t = cjson.decode(out)
  for path, text in pairs(files or {}) do write(home .. "/" .. path, text) end
  local h = H.start({ home = home, args = args })
  h.agent, h.operator = t.agent_token, t.operator_token
  return h
end

local function log_of(h, actor)
  local st, body = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return { entries = {}, head = 0 } end
  assert.are.equal(200, st)
  return body
end

local function status(h)
  local st, body = h:get("/v1/status", h.operator)
  assert.are.equal(200, st)
  return body
end

local function timer(h, actor)
  for _, t in ipairs(status(h).timers) do
    if t.actor_id == actor then return t end
  end
end

-- Polls fn every 20 ms until it returns a truthy value or `secs` pass.
local function eventually(fn, secs)
  local deadline = socket.gettime() + (secs or 2)
  repeat
    local v = fn()
    if v then return v end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  return fn()
end

local function sessions_rows(h, where)
  local out = H.sh("sqlite3 -cmd '.timeout 5000' " .. q(h.home .. "/mw.db") ..
    " " .. q("select count(*) from sessions" .. (where and (" where " .. where) or "")))
  return assert(tonumber(out:match("%d+")), "sqlite3: " .. out)
end

local function kinds(entries)
  local k = {}
  for i, e in ipairs(entries) do k[i] = e.kind end
  return k
end

-- Side conditions every case ends with: the host is alive and logged no crash.
local function side_conditions(h, allow_errors)
  assert.is_true(h:alive(), "the host died")
  local log = h:hostlog()
  assert.is_nil(log:match("AddressSanitizer"), log)
  assert.is_nil(log:match("runtime error"), log)
  if not allow_errors then assert.is_nil(log:match('"level":"error"'), log) end
end

-- ---- heartbeats -------------------------------------------------------------------

describe("heartbeats", function()
  local h
  after_each(function() if h then h:stop() end; h = nil end)

  it("beat, commit, sleep; then idle beats write nothing and persist no session", function()
    h = serve({
      ["tenants/default/heartbeat.lua"] = [[return { { actor = "t", every_ms = 100, skill = "beat" } }]],
      ["tenants/default/skills/beat.lua"] = [[
return { name = "beat", description = "counts its first three beats, then idles",
  run = function(ctx)
    local n = (ctx.state.memory or {}).beats or 0
    if n < 3 then ctx.remember("beats", n + 1) end
    return { seen = n }
  end }]],
    })
    local t0 = socket.gettime()
    -- three beats of run + remember + handover each
    local log = eventually(function()
      local l = log_of(h, "t")
      return l.head >= 9 and l
    end, 1.5)
    assert.is_truthy(log, "the log did not show three beats within 1.5 s (head "
      .. log_of(h, "t").head .. ")")
    assert.is_true(socket.gettime() - t0 < 1.5)
    assert.are.same({ "run", "remember", "handover", "run", "remember", "handover",
                      "run", "remember", "handover" }, kinds(log.entries))
    for i = 0, 2 do
      assert.are.same({ input = cjson.null, skill = "beat" }, log.entries[3 * i + 1].body)
      assert.are.same({ key = "beats", value = i + 1 }, log.entries[3 * i + 2].body)
      assert.are.same({ handover = cjson.null, reason = "sleep" }, log.entries[3 * i + 3].body)
    end
    local tm = timer(h, "t")
    assert.is_table(tm, "no timer for t in /v1/status")
    assert.are.equal(100, tm.every_ms)
    assert.are.equal("beat", tm.skill)
    assert.are.equal("agent", tm.profile)
    assert.is_true(tm.ok > 0)
    assert.is_true(tm.ticks >= 3)
    assert.are.equal(0, tm.failed)

    -- idle beats: the head stops while the ticks keep rising
    local head, ticks, ok = log.head, tm.ticks, tm.ok
    socket.sleep(0.6)
    local tm2 = timer(h, "t")
    assert.are.equal(head, log_of(h, "t").head)
    assert.is_true(tm2.ticks >= ticks + 3, "ticks " .. ticks .. " -> " .. tm2.ticks)
    assert.is_true(tm2.ok > ok, "idle beats count as ok")
    assert.are.equal(0, tm2.failed)
    -- heartbeat sessions are held in memory only
    assert.are.equal(0, sessions_rows(h))
    local _, metrics = h:get("/metrics", false)
    assert.is_true(tonumber(metrics:match("\nmw_heartbeat_ticks_total (%d+)")) >= tm2.ticks)
    assert.is_true(tonumber(metrics:match("\nmw_heartbeat_ok_total (%d+)")) >= tm2.ok)
    side_conditions(h)
  end)

  it("a failing beat: the timer keeps firing, failures are counted, nothing is committed", function()
    h = serve({
      ["tenants/default/heartbeat.lua"] = [[return { { actor = "f", every_ms = 50, skill = "fail" } }]],
      ["tenants/default/skills/fail.lua"] = [[
return { name = "fail", description = "stages, then raises",
  run = function(ctx) ctx.remember("never", true); error("beat failed on purpose") end }]],
    })
    local tm = eventually(function()
      local t = timer(h, "f")
      return t and t.failed >= 3 and t
    end, 2)
    assert.is_truthy(tm, "three failed beats within 2 s")
    assert.are.equal(0, tm.ok)
    assert.is_true(tm.consecutive_failures >= 3)
    assert.is_truthy(tm.last_error:match("422"), tm.last_error)
    assert.is_truthy(tm.last_error:match("beat failed on purpose"), tm.last_error)
    assert.is_true(tm.last_error_at > 0)
    local tm2 = eventually(function()
      local t = timer(h, "f")
      return t.consecutive_failures > tm.consecutive_failures + 2 and t
    end, 2)
    assert.is_truthy(tm2, "consecutive_failures kept rising")
    assert.is_true(tm2.ticks > tm.ticks)
    assert.are.equal(tm2.failed, tm2.consecutive_failures)
    assert.are.equal(0, log_of(h, "f").head)
    assert.are.equal(0, sessions_rows(h))
    local _, metrics = h:get("/metrics", false)
    assert.is_true(tonumber(metrics:match("\nmw_heartbeat_failures_total (%d+)")) >= tm2.failed)
    side_conditions(h)
  end)

  it("never overlaps: a beat longer than the period skips ticks, and beats run one after another", function()
    h = serve({
      ["tenants/default/heartbeat.lua"] = [[return { { actor = "o", every_ms = 50, skill = "spin" } }]],
      ["tenants/default/skills/spin.lua"] = [[
return { name = "spin", description = "busy for 300 ms, then notes what it saw",
  run = function(ctx)
    local t0 = os.clock()
    while os.clock() - t0 < 0.3 do end
    ctx.remember("beat", { session = ctx.session_id, cursor = ctx.cursor })
    return {}
  end }]],
    })
    -- sample the open sessions until three beats are done (or 5 s pass)
    local most, tm = 0, nil
    local deadline = socket.gettime() + 5
    repeat
      local st = status(h)
      local n = 0
      for _, s in ipairs(st.sessions) do
        if s.actor_id == "o" then n = n + 1 end
      end
      if n > most then most = n end
      for _, t in ipairs(st.timers) do
        if t.actor_id == "o" then tm = t end
      end
      socket.sleep(0.01)
    until (tm and tm.ok >= 3) or socket.gettime() > deadline
    assert.is_true(tm.ok >= 3, cjson.encode(tm))
    assert.is_true(tm.skipped_overlap > 0, cjson.encode(tm))
    assert.are.equal(0, tm.failed, tm.last_error)
    assert.is_true(most <= 1, "two sessions for o at once")
    -- each beat is run, remember, handover, and saw the one before it complete
    local log = log_of(h, "o")
    assert.is_true(log.head >= 6)
    local seen, prev_handover = {}, 0
    for i = 1, log.head - log.head % 3, 3 do
      assert.are.same({ "run", "remember", "handover" },
        { log.entries[i].kind, log.entries[i + 1].kind, log.entries[i + 2].kind })
      local v = log.entries[i + 1].body.value
      assert.are.equal(prev_handover, v.cursor)
      assert.is_nil(seen[v.session])
      seen[v.session] = true
      prev_handover = log.entries[i + 2].cursor
    end
    side_conditions(h)
  end)

  it("skips an awake actor, leaves its API session alone, and resumes once it sleeps", function()
    h = serve({
      ["tenants/default/heartbeat.lua"] = [[return { { actor = "aw", every_ms = 50 } }]],
    })
    -- a beat may hold the actor for an instant: the API wake is then already_awake
    local st, w
    for _ = 1, 10 do
      st, w = h:wake("aw")
      if st ~= 409 then break end
      socket.sleep(0.01)
    end
    assert.are.equal(200, st)
    local before = timer(h, "aw")
    local tm = eventually(function()
      local t = timer(h, "aw")
      return t.skipped_awake >= before.skipped_awake + 3 and t
    end, 2)
    assert.is_truthy(tm, "ticks were skipped while the actor was awake")
    -- the API session is untouched: still the only one, and it runs and sleeps
    local mine = {}
    for _, s in ipairs(status(h).sessions) do
      if s.actor_id == "aw" then mine[#mine + 1] = s end
    end
    assert.are.equal(1, #mine)
    assert.are.equal(w.session_id, mine[1].session_id)
    assert.are.equal("wake", mine[1].trigger)
    local st2, r = h:post("/v1/run", { session_id = w.session_id, input = { x = 1 } })
    assert.are.equal(200, st2)
    assert.are.equal(1, r.cursor)
    local ok_awake = timer(h, "aw").ok
    local st3, s = h:post("/v1/sleep", { session_id = w.session_id })
    assert.are.equal(200, st3)
    assert.are.equal(2, s.cursor)
    local after = eventually(function()
      local t = timer(h, "aw")
      return t.ok >= ok_awake + 3 and t
    end, 2)
    assert.is_truthy(after, "beats resumed after the sleep")
    local skipped = after.skipped_awake
    socket.sleep(0.2)
    assert.are.equal(skipped, timer(h, "aw").skipped_awake)
    -- idle beats (the default skill stages nothing) added nothing to the log
    assert.are.equal(2, log_of(h, "aw").head)
    side_conditions(h)
  end)
end)

-- ---- skill entry -------------------------------------------------------------------

local ENTRY_SKILLS = {
  ["tenants/default/skills/note.lua"] = [[
return { name = "note", description = "stages a note; hands over what it is told",
  run = function(ctx, input)
    ctx.stage("note", { got = input })
    return { noted = true, handover = type(input) == "table" and input.handover or nil }
  end }]],
  ["tenants/default/skills/raise.lua"] = [[
return { name = "raise", description = "stages, then raises",
  run = function(ctx) ctx.stage("note", { lost = true }); error("raise: on purpose") end }]],
}

describe("skill entry over HTTP", function()
  local h
  setup(function() h = serve(ENTRY_SKILLS) end)
  teardown(function() h:stop() end)
  after_each(function() side_conditions(h) end)

  it("on a sleeping actor: 200 with result, cursor, committed, snapshot_id; run + staged + handover", function()
    local st, r = h:post("/v1/actors/se/skills/note", { input = { x = 1, handover = { next = "n" } } }, h.operator)
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.same({ noted = true, handover = { next = "n" } }, r.result)
    assert.are.equal(2, r.committed)
    assert.are.equal(3, r.cursor)
    assert.is_string(r.snapshot_id)
    assert.is_number(r.latency_ms)
    local log = log_of(h, "se")
    assert.are.same({ "run", "note", "handover" }, kinds(log.entries))
    assert.are.same({ input = { x = 1, handover = { next = "n" } }, skill = "note" }, log.entries[1].body)
    assert.are.same({ got = { x = 1, handover = { next = "n" } } }, log.entries[2].body)
    assert.are.same({ handover = { next = "n" }, reason = "sleep" }, log.entries[3].body)
    -- the head moved to the skill's sleep; the next wake resumes from it
    local st2, w = h:wake("se")
    assert.are.equal(200, st2)
    assert.are.equal(r.snapshot_id, w.snapshot_id)
    assert.are.same({ next = "n" }, w.boot_packet.state.handover)
    h:post("/v1/sleep", { session_id = w.session_id })
    -- skill entry keeps no session record
    assert.are.equal(0, sessions_rows(h, "actor = 'se' and trigger = 'skill'"))
  end)

  it("an agent token is 403 forbidden, writing nothing", function()
    local st, e = h:post("/v1/actors/se_agent/skills/note", { input = 1 }, h.agent)
    assert.are.equal(403, st)
    assert.are.equal("forbidden", e.error.code)
    assert.are.equal(0, log_of(h, "se_agent").head)
  end)

  it("an awake actor is 409 already_awake, and its session is left alone", function()
    local _, w = h:wake("se_awake")
    local st, e = h:post("/v1/actors/se_awake/skills/note", { input = 1 }, h.operator)
    assert.are.equal(409, st)
    assert.are.equal("already_awake", e.error.code)
    assert.are.equal(0, log_of(h, "se_awake").head)
    local st2, r = h:post("/v1/run", { session_id = w.session_id, input = 1 })
    assert.are.equal(200, st2)
    assert.are.equal(1, r.cursor)
    assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id })))
  end)

  it("an unknown skill is 404 not_found, and the actor is left asleep", function()
    local st, e = h:post("/v1/actors/se_unknown/skills/nope", { input = 1 }, h.operator)
    assert.are.equal(404, st)
    assert.are.equal("not_found", e.error.code)
    assert.are.equal(0, log_of(h, "se_unknown").head)
    assert.are.equal(200, (h:wake("se_unknown")))
  end)

  it("a failing skill is 422 skill_error, nothing committed, and the actor is left asleep", function()
    local st0 = h:post("/v1/actors/se_fail/skills/note", { input = 1 }, h.operator)
    assert.are.equal(200, st0)
    local head = log_of(h, "se_fail").head
    local st, e = h:post("/v1/actors/se_fail/skills/raise", { input = 1 }, h.operator)
    assert.are.equal(422, st)
    assert.are.equal("skill_error", e.error.code)
    assert.is_truthy(e.error.message:match("raise: on purpose"), e.error.message)
    assert.are.equal(head, log_of(h, "se_fail").head)
    assert.are.equal(200, (h:wake("se_fail")))
  end)
end)

-- ---- the CLI's triggers -------------------------------------------------------------

describe("mw skill run and mw load", function()
  local h
  after_each(function() if h then h:stop() end; h = nil end)

  it("work in process with no host, and refuse with a clear message while a host serves the home", function()
    h = serve(ENTRY_SKILLS)
    h:stop(true)   -- the home stays; no host serves it now
    local home, agent, operator = h.home, h.agent, h.operator
    local out, code = H.sh(H.mw .. " skill run cli note '{\"x\":1}' --home " .. q(home))
    assert.are.equal(0, code, out)
    local r = cjson.decode(out)
    assert.are.same({ noted = true }, r.result)
    assert.are.equal(2, r.committed)
    assert.are.equal(3, r.cursor)
    assert.is_string(r.snapshot_id)

    out, code = H.sh(H.mw .. " load cli --home " .. q(home))
    assert.are.equal(0, code, out)
    local w = cjson.decode(out)
    assert.are.equal("load", w.boot_packet.trigger)
    assert.are.equal("cli", w.boot_packet.actor_id)
    assert.are.equal(3, w.boot_packet.cursor)
    assert.are.same({ x = 1 }, w.boot_packet.state.last_run.input)
    assert.are.equal(r.snapshot_id, w.snapshot_id)

    -- a failing skill: non-zero, the answer printed, nothing committed
    out, code = H.sh(H.mw .. " skill run cli raise --home " .. q(home))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:match("skill_error"), out)
    out, code = H.sh(H.mw .. " skill run cli nope --home " .. q(home))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:match("not_found"), out)

    -- with a host serving the home: refused, and nothing written
    h = H.start({ home = home })
    h.agent, h.operator = agent, operator
    out, code = H.sh(H.mw .. " skill run cli note '{\"x\":2}' --home " .. q(home))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:match("a host is serving"), out)
    assert.is_truthy(out:match("/v1/actors/A/skills/S"), out)
    out, code = H.sh(H.mw .. " load cli --home " .. q(home))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:match("a host is serving"), out)
    assert.is_truthy(out:match("/v1/load"), out)
    assert.are.equal(3, log_of(h, "cli").head)
    local st = h:wake("cli")   -- and the CLI left no session behind
    assert.are.equal(200, st)
    side_conditions(h)
  end)
end)

-- ---- ctx.call ---------------------------------------------------------------------

describe("ctx.call", function()
  local h
  setup(function()
    h = serve({
      ["tenants/default/skills/caller.lua"] = [[
return { name = "caller", description = "asks another actor to run callee",
  run = function(ctx, input)
    ctx.call(input.to, "callee", { from = ctx.actor_id, n = input.n })
    if input.fail then error("caller fails after ctx.call") end
    return { called = input.to }
  end }]],
      ["tenants/default/skills/callee.lua"] = [[
return { name = "callee", description = "remembers who called",
  run = function(ctx, input) ctx.remember("called_by", input); return { ok = true } end }]],
    })
  end)
  teardown(function() h:stop() end)

  it("runs the callee's skill on another actor after the caller's run commits", function()
    local _, w = h:wake("A")
    local st, r = h:post("/v1/run", { session_id = w.session_id, skill = "caller", input = { to = "B", n = 1 } })
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.same({ called = "B" }, r.result)
    assert.are.equal(1, r.committed)
    local log = eventually(function()
      local l = log_of(h, "B")
      return l.head >= 3 and l
    end, 2)
    assert.is_truthy(log, "B's log got the callee's entries")
    assert.are.same({ "run", "remember", "handover" }, kinds(log.entries))
    assert.are.same({ input = { from = "A", n = 1 }, skill = "callee" }, log.entries[1].body)
    assert.are.same({ key = "called_by", value = { from = "A", n = 1 } }, log.entries[2].body)
    assert.are.same({ handover = cjson.null, reason = "sleep" }, log.entries[3].body)
    assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id })))
    side_conditions(h)
  end)

  it("a caller that raises after ctx.call commits nothing anywhere", function()
    local _, w = h:wake("A2")
    local st, e = h:post("/v1/run", { session_id = w.session_id, skill = "caller",
      input = { to = "B2", n = 2, fail = true } })
    assert.are.equal(422, st)
    assert.are.equal("skill_error", e.error.code)
    assert.is_truthy(e.error.message:match("caller fails after ctx.call"), e.error.message)
    socket.sleep(0.3)
    assert.are.equal(0, log_of(h, "B2").head)
    assert.are.equal(0, log_of(h, "A2").head)
    -- B2 was never woken: it can be woken now
    assert.are.equal(200, (h:wake("B2")))
    assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id })))
    side_conditions(h)
  end)
end)
