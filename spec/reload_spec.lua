-- reload_spec.lua -- hot reload against a running host: a changed skill answers
-- at once; a broken one (syntax, runtime error, wrong shape, endless loop at
-- load) leaves the last good version serving and says why in /v1/status and
-- /metrics; SIGHUP reloads; a changed fold refolds; heartbeats follow their
-- file.  The repo's scripts/ is never edited: the host gets a copy.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"
require("socket.http").TIMEOUT = 20

-- ---- helpers ------------------------------------------------------------------

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  os.execute("mkdir -p " .. q(path:match("^(.*)/[^/]*$")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- The way most tools save: a temporary file beside it, renamed over it.
local function replace(path, text)
  local dir, name = path:match("^(.*)/([^/]*)$")
  local tmp = dir .. "/." .. name .. ".tmp"
  write(tmp, text)
  assert(os.rename(tmp, path))
end

local function serve(files, args)
  local home = os.tmpname()
  os.remove(home)
  local t = cjson.decode((H.sh(H.mw .. " init --home " .. q(home) .. " --json")))
  for path, text in pairs(files or {}) do write(home .. "/" .. path, text) end
  local h = H.start({ home = home, args = args })
  h.agent, h.operator = t.agent_token, t.operator_token
  return h
end

local function status(h)
  local st, body = h:get("/v1/status", h.operator)
  assert.are.equal(200, st)
  return body
end

local function metric(h, name)
  local _, text = h:get("/metrics", false)
  return tonumber(text:match("\n" .. name .. " (%d+)"))
end

local function eventually(fn, secs, every)
  local deadline = socket.gettime() + (secs or 2)
  repeat
    local v = fn()
    if v then return v end
    socket.sleep(every or 0.02)
  until socket.gettime() > deadline
  return fn()
end

local function side_conditions(h)
  assert.is_true(h:alive(), "the host died")
  local log = h:hostlog()
  assert.is_nil(log:match("AddressSanitizer"), log)
  assert.is_nil(log:match("runtime error"), log)
end

local function ver_skill(n)
  return string.format([[
return { name = "ver", description = "says which version it is",
  run = function(ctx, input) return { version = %d } end }
]], n)
end

local SKILL = "tenants/default/skills/ver.lua"

-- ---- skills -----------------------------------------------------------------------

describe("reloading a tenant's skill", function()
  local h, sid, current, path
  setup(function()
    h = serve({ [SKILL] = ver_skill(1) }, "--skill-time 300")
    path = h.home .. "/" .. SKILL
    local st, w = h:wake("r")   -- the first call loads the tenant and watches its files
    assert.are.equal(200, st)
    sid = w.session_id
    current = 1
  end)
  teardown(function() h:stop() end)
  after_each(function()
    side_conditions(h)
    -- a case that failed half-way may leave a broken file: put the last good one back
    local f = io.open(path, "rb")
    local text = f and f:read("a")
    if f then f:close() end
    if text ~= ver_skill(current) then
      local v0 = status(h).reloads.version
      replace(path, ver_skill(current))
      eventually(function() return status(h).reloads.version > v0 end, 2)
    end
  end)

  -- The version the skill answers now (or the failing status).
  local function ask()
    local st, r = h:post("/v1/run", { session_id = sid, skill = "ver" })
    if st ~= 200 then return "status " .. tostring(st) .. " " .. cjson.encode(r) end
    return r.result.version
  end

  it("answers version 1 before any change", function()
    assert.are.equal(1, ask())
  end)

  for _, how in ipairs { "renamed over", "overwritten in place" } do
    it("a new version " .. how .. " answers within a second (the figure is printed)", function()
      local v = current + 1
      local t0 = socket.gettime()
      if how == "renamed over" then replace(path, ver_skill(v)) else write(path, ver_skill(v)) end
      local seen = eventually(function() return ask() == v end, 1, 0.002)
      local ms = (socket.gettime() - t0) * 1000
      print(string.format("\nreload latency (%s): %.1f ms", how, ms))
      assert.is_true(seen, "version " .. v .. " not answering after " .. ms .. " ms")
      assert.is_true(ms < 1000)
      current = v
    end)
  end

  for _, c in ipairs {
    { "a syntax error",
      "return { name = \"ver\", description = \"broken\",\n  run = function() return { version = 99 } end\n  oops oops }\n",
      "ver%.lua:3:" },
    { "a runtime error at load",
      "local config = nil\nlocal port = config.port\nreturn { name = \"ver\", description = \"d\", run = function() return {} end }\n",
      "ver%.lua:2:" },
    { "the wrong shape (no run)",
      "return { name = \"ver\", description = \"no run\" }\n",
      "ver%.lua: skill run must be a function" },
    { "an endless loop at load",
      "-- never returns\nwhile true do end\nreturn { name = \"ver\", description = \"d\", run = function() return {} end }\n",
      "budget exceeded.*ver%.lua:2:" },
  } do
    it("a replacement with " .. c[1] .. " keeps the old version serving and says why; the fix goes live", function()
      local before = status(h).reloads
      local m0 = metric(h, "mw_reload_failures_total")
      local version0 = before.version
      replace(path, c[2])
      local rl = eventually(function()
        local r = status(h).reloads
        return r.failures > before.failures and r
      end, 3)
      assert.is_truthy(rl, "no reload failure reported")
      assert.are.equal(version0, rl.version)
      assert.is_truthy(rl.last_error:find(path, 1, true), rl.last_error)
      assert.is_truthy(rl.last_error:match(c[3]), rl.last_error)
      assert.is_true(rl.last_error_at >= before.last_error_at and rl.last_error_at > 0)
      assert.is_true(metric(h, "mw_reload_failures_total") > m0)
      assert.is_truthy(h:hostlog():match("reload failed; the old version keeps serving"))
      -- the last good version still answers
      assert.are.equal(current, ask())
      -- the fix goes live
      local v = current + 1
      local reloads0 = metric(h, "mw_reloads_total")
      replace(path, ver_skill(v))
      assert.is_true(eventually(function() return ask() == v end, 2), "the fixed version did not go live")
      current = v
      assert.is_true(status(h).reloads.version > version0)
      assert.is_true(metric(h, "mw_reloads_total") > reloads0)
    end)
  end

  it("SIGHUP reloads: the version goes up, the skill still answers", function()
    local v0 = status(h).reloads.version
    H.sh("kill -HUP " .. h.pid)
    local v1 = eventually(function()
      local v = status(h).reloads.version
      return v > v0 and v
    end, 2)
    assert.is_truthy(v1, "the version did not go up after SIGHUP")
    assert.is_truthy(h:hostlog():match("reloading on SIGHUP"))
    assert.are.equal(current, ask())
  end)
end)

-- ---- the shared scripts --------------------------------------------------------------

describe("reloading the shared scripts", function()
  local h, scripts
  setup(function()
    scripts = os.tmpname()
    os.remove(scripts)
    local src = os.getenv("MW_SCRIPTS") or "scripts"
    assert.are.equal(0, select(2, H.sh("cp -r " .. q(src) .. " " .. q(scripts))))
    h = serve({}, "--scripts " .. q(scripts))
  end)
  teardown(function()
    h:stop()
    os.execute("rm -rf " .. q(scripts))
  end)
  after_each(function() side_conditions(h) end)

  it("a changed fold.lua: the next wake says refolded and its state is the new fold's", function()
    local _, w = h:wake("f")
    assert.is_false(w.boot_packet.refolded)
    h:post("/v1/run", { session_id = w.session_id, input = { remember = { key = "k", value = "v" } } })
    local _, s = h:post("/v1/sleep", { session_id = w.session_id, handover = "h" })
    local _, w1 = h:wake("f")
    assert.is_false(w1.boot_packet.refolded)
    assert.is_nil(w1.boot_packet.state.fold_version)
    h:post("/v1/sleep", { session_id = w1.session_id })

    local path = scripts .. "/fold.lua"
    local f = assert(io.open(path, "rb"))
    local text = f:read("a")
    f:close()
    local changed, n = text:gsub("state%.cursor = e%.cursor", "state.cursor = e.cursor\n    state.fold_version = 2")
    assert.are.equal(1, n, "fold.lua no longer has the line this test edits")
    local v0 = status(h).reloads.version
    replace(path, changed)
    assert.is_truthy(eventually(function() return status(h).reloads.version > v0 end, 2), "no reload")

    local st, w2 = h:wake("f")
    assert.are.equal(200, st)
    local bp = w2.boot_packet
    assert.is_true(bp.refolded)
    assert.are_not.equal(w1.boot_packet.fold, bp.fold)
    assert.are.equal(2, bp.state.fold_version)
    assert.are.equal("v", bp.state.memory.k)
    assert.are.equal(s.cursor, bp.cursor)
    h:post("/v1/sleep", { session_id = w2.session_id, handover = "again" })
    -- the snapshot this sleep made is the new fold's: no refold next time
    local _, w3 = h:wake("f")
    assert.is_false(w3.boot_packet.refolded)
    assert.are.equal(2, w3.boot_packet.state.fold_version)
    h:post("/v1/sleep", { session_id = w3.session_id })
  end)
end)

-- ---- heartbeats ------------------------------------------------------------------

describe("heartbeats follow reloads", function()
  it("a changed every_ms changes the timer, a broken file keeps it, a removed file stops it", function()
    local h = serve({ ["tenants/default/heartbeat.lua"] = [[return { { actor = "hb", every_ms = 100 } }]] })
    local path = h.home .. "/tenants/default/heartbeat.lua"
    local function timers() return status(h).timers end
    local ok, err = pcall(function()
      local t = timers()
      assert.are.equal(1, #t)
      assert.are.equal(100, t[1].every_ms)

      replace(path, [[return { { actor = "hb", every_ms = 250 } }]])
      assert.is_truthy(eventually(function()
        local tt = timers()
        return #tt == 1 and tt[1].every_ms == 250
      end, 2), "the timer did not change: " .. cjson.encode(timers()))

      -- a broken file: the reload fails, the timer keeps its last good period and ticks on
      local before = status(h).reloads
      replace(path, [[return { { actor = "hb", every_ms = 5 } }]])
      local rl = eventually(function()
        local r = status(h).reloads
        return r.failures > before.failures and r
      end, 2)
      assert.is_truthy(rl, "no reload failure for every_ms = 5")
      assert.is_truthy(rl.last_error:match("heartbeat%.lua"), rl.last_error)
      assert.is_truthy(rl.last_error:match("every_ms must be an integer >= 10"), rl.last_error)
      local t1 = timers()
      assert.are.equal(1, #t1)
      assert.are.equal(250, t1[1].every_ms)
      assert.is_truthy(eventually(function() return timers()[1].ticks > t1[1].ticks end, 2))

      -- two actors
      replace(path, [[return { { actor = "hb", every_ms = 250 }, { actor = "hb2", every_ms = 50, profile = "companion" } }]])
      assert.is_truthy(eventually(function() return #timers() == 2 end, 2))

      -- removed: no timer, no more ticks
      os.remove(path)
      assert.is_truthy(eventually(function() return #timers() == 0 end, 2), cjson.encode(timers()))
      assert.are.equal(0, metric(h, "mw_heartbeats"))
      local ticks = metric(h, "mw_heartbeat_ticks_total")
      socket.sleep(0.3)
      assert.are.equal(ticks, metric(h, "mw_heartbeat_ticks_total"))
      side_conditions(h)
    end)
    h:stop()
    assert(ok, err)
  end)
end)
