-- errors_spec.lua -- every row of the contract's error table against a real
-- host: the status, the `error.code`, a non-empty `error.message`, and, where
-- the call could have written, that nothing was written ("No error leaves a
-- partial write behind; the one write an error makes is marking a snapshot
-- unsafe").  skill_error and skill_timeout are covered by lifecycle_spec;
-- unavailable through a failed fsync by durability_spec (here: a locked store).
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"
local http = require "socket.http"
local ltn12 = require "ltn12"

-- ---- helpers ---------------------------------------------------------------

-- Asserts the contract's error shape; returns the error object.
local function is_error(status, code, st, body, raw)
  local why = "answer: " .. tostring(st) .. " " .. tostring(raw)
  assert.are.equal(status, st, why)
  assert.is_table(body, why)
  assert.is_table(body.error, why)
  assert.are.equal(code, body.error.code, why)
  assert.is_string(body.error.message, why)
  assert.is_true(#body.error.message > 0, why)
  return body.error
end

local function sql(h, query)
  local out, code = H.sh(string.format("sqlite3 -cmd '.timeout 3000' %s/mw.db %q", h.home, query))
  assert.are.equal(0, code, out)
  return out
end

-- Everything the store holds, as text: equal before and after means the call
-- wrote nothing at all (log, snapshots, sessions, streams, tokens).
local function dump(h)
  local out, code = H.sh("sqlite3 -readonly -cmd '.timeout 3000' " .. h.home .. "/mw.db .dump")
  assert.are.equal(0, code, out)
  assert.is_truthy(out:match("CREATE TABLE"), out)
  return out
end

-- Runs f and asserts the store is byte-for-byte the same afterwards.
local function writes_nothing(h, f)
  local before = dump(h)
  f()
  assert.are.equal(before, dump(h), "the failed call wrote to the store")
end

-- The log and the sessions, without the snapshots (whose `safe` an error may clear).
local function log_and_sessions(h)
  return sql(h, "SELECT stream, cursor, kind, body, hex(hash) FROM entries ORDER BY stream, cursor;"
    .. " SELECT id, closed_at, close_reason, committed FROM sessions ORDER BY id;"
    .. " SELECT id, last_cursor, head_snapshot FROM streams ORDER BY id;")
end

-- A request with headers of our own choosing (Authorization exactly as given).
local function request(h, method, path, body, headers)
  local chunks = {}
  local hd = { ["Content-Type"] = "application/json" }
  for k, v in pairs(headers or {}) do hd[k] = v end
  if body then hd["Content-Length"] = tostring(#body) end
  local _, st = http.request {
    url = h.url .. path, method = method, headers = hd,
    source = body and ltn12.source.string(body) or nil,
    sink = ltn12.sink.table(chunks),
  }
  local raw = table.concat(chunks)
  local ok, decoded = pcall(cjson.decode, raw)
  return st, ok and decoded or raw, raw
end

local function log_head(h, actor)
  local st, body, raw = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return 0, {} end
  assert.are.equal(200, st, raw)
  return body.head, body.entries
end

local function wake_ok(h, actor, extra, token)
  local st, w, raw = h:wake(actor, extra, token)
  assert.are.equal(200, st, raw)
  return w
end

local function run_ok(h, sid, input, token)
  local st, r, raw = h:post("/v1/run", { session_id = sid, input = input }, token)
  assert.are.equal(200, st, raw)
  return r
end

local function sleep_ok(h, sid, handover, token)
  local st, s, raw = h:post("/v1/sleep", { session_id = sid, handover = handover }, token)
  assert.are.equal(200, st, raw)
  return s
end

local function snapshots(h, actor)
  local st, body, raw = h:get("/v1/actors/" .. actor .. "/snapshots", h.operator)
  assert.are.equal(200, st, raw)
  local by = {}
  for _, s in ipairs(body.snapshots) do by[s.snapshot_id] = s end
  return body.snapshots, by
end

local function metric(h, name)
  local st, _, raw = h:get("/metrics")
  assert.are.equal(200, st)
  return tonumber(raw:match("\n" .. name:gsub("%p", "%%%0") .. " (%d+)"))
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function new_token(h, tenant, role)
  local out = H.sh(H.mw .. " token create --home " .. h.home .. " --tenant " .. tenant .. " --role " .. role)
  return assert(out:match("mw_%x+"), out)
end

-- One host per group of tests, on its own temp home (a host costs a few
-- hundred milliseconds to make); each test names its actors with A"name",
-- unique to the test, so that tests sharing a host never meet.
local tag = 0
before_each(function() tag = tag + 1 end)
local function A(name) return name .. "-" .. tag end

local function shared_host(opts)
  local box = {}
  setup(function() box.h = H.start(opts) end)
  teardown(function()
    if not box.h then return end   -- setup failed: nothing to stop
    local log = box.h:hostlog()
    box.h:stop()
    assert.is_nil(log:match("AddressSanitizer"), log)
    assert.is_nil(log:match("runtime error"), log)
  end)
  return box
end

-- ---- 400 bad_request ---------------------------------------------------------

describe("400 bad_request", function()
  local box = shared_host()

  local not_json = {
    ["plain text"] = "not json",
    ["a truncated object"] = '{"actor_id":"ACTOR"',
    ["an empty body"] = "",
    ["trailing data"] = '{"actor_id":"ACTOR"} x',
    ["single quotes"] = "{'actor_id':'ACTOR'}",
    ["invalid UTF-8 in a string"] = '{"actor_id":"ACTOR","context_hint":"\xff\xfe"}',
  }
  for name, body in pairs(not_json) do
    it("wake: the body is not JSON (" .. name .. ")", function()
      local h = box.h
      writes_nothing(h, function()
        is_error(400, "bad_request", h:post("/v1/wake", (body:gsub("ACTOR", A"arc"))))
      end)
      wake_ok(h, A"arc")   -- the refused wake left the actor asleep
    end)
  end

  it("wake: a body that is JSON but not an object", function()
    local h = box.h
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/wake", '["arc"]'))
      is_error(400, "bad_request", h:post("/v1/wake", '"arc"'))
      is_error(400, "bad_request", h:post("/v1/wake", "null"))
    end)
  end)

  it("run: the body is not JSON, and nothing is committed", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":'))
      is_error(400, "bad_request", h:post("/v1/run", "garbage"))
    end)
    assert.are.equal(1, log_head(h, A"arc"))
  end)

  it("duplicate keys (wake, and run's input), writing nothing", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/wake", ('{"actor_id":"%s","actor_id":"%s"}'):format(A"dup", A"dup")))
      is_error(400, "bad_request", h:post("/v1/run",
        '{"session_id":"' .. w.session_id .. '","input":{"a":1,"a":2}}'))
      -- the same key spelled with an escape is still the same key
      is_error(400, "bad_request", h:post("/v1/run",
        '{"session_id":"' .. w.session_id .. '","input":{"a":1,"\\u0061":2}}'))
    end)
    assert.are.equal(0, log_head(h, A"arc"))
    wake_ok(h, A"dup")
  end)

  it("a lone surrogate \\ud800 (wake, and run's input), writing nothing", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/wake", ('{"actor_id":"%s","context_hint":"\\ud800"}'):format(A"sur")))
      is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":"\\ud800"}'))
      is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":"\\udc00x"}'))
    end)
    -- a proper pair is fine
    run_ok(h, w.session_id, "\u{1F600}")
    assert.are.equal(1, log_head(h, A"arc"))
  end)

  -- the body object is level 1, so n arrays inside it reach depth n + 1
  local function nested(n) return ("["):rep(n) .. ("]"):rep(n) end

  it("nesting 257 deep is refused (wake, and run's input); 256 deep is accepted", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":' .. nested(256) .. "}"))
      is_error(400, "bad_request", h:post("/v1/wake", '{"actor_id":"' .. A"deep" .. '","x":' .. nested(256) .. "}"))
      is_error(400, "bad_request", h:post("/v1/wake", '{"actor_id":"' .. A"deep" .. '","x":{"a":' .. nested(255) .. "}}"))
    end)
    assert.are.equal(0, log_head(h, A"arc"))
    local st, _, raw = h:post("/v1/wake", '{"actor_id":"' .. A"deep" .. '","x":' .. nested(255) .. "}")
    assert.are.equal(200, st, raw)
  end)

  it("run: an input within the limit but too deep for the fold's state is refused whole, and the session lives on", function()
    -- The default fold keeps the input at state.last_run.input, two levels
    -- deeper than the request: at 255 levels the state would pass 256, which
    -- canonical JSON refuses.  The run is refused with nothing committed.
    local h = box.h
    local w = wake_ok(h, A"arc")
    local st, r, raw = h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":' .. nested(255) .. "}")
    assert.are.equal(500, st, raw)
    assert.are.equal("internal", r.error.code)
    assert.is_truthy(r.error.message:match("nesting deeper than 256"))
    assert.are.equal(0, log_head(h, A"arc"))
    local st2, r2, raw2 = h:post("/v1/run", '{"session_id":"' .. w.session_id .. '","input":' .. nested(250) .. "}")
    assert.are.equal(200, st2, raw2)
    assert.are.equal(1, r2.cursor)
    assert.are.equal(1, log_head(h, A"arc"))
  end)

  local wrong_types = {
    { "actor_id = 5", "/v1/wake", '{"actor_id":5}' },
    { "actor_id = null", "/v1/wake", '{"actor_id":null}' },
    { "actor_id missing", "/v1/wake", '{"profile":"builder"}' },
    { "context_hint = {}", "/v1/wake", '{"actor_id":"ACTOR","context_hint":{}}' },
    { "context_hint = 1", "/v1/wake", '{"actor_id":"ACTOR","context_hint":1}' },
    { "profile = 1", "/v1/wake", '{"actor_id":"ACTOR","profile":1}' },
    { "profile not one of the three", "/v1/wake", '{"actor_id":"ACTOR","profile":"admin"}' },
    { "from_snapshot = 7", "/v1/wake", '{"actor_id":"ACTOR","from_snapshot":7}' },
    { "load: actor_id = []", "/v1/load", '{"actor_id":[]}' },
  }
  for _, c in ipairs(wrong_types) do
    it("a field of the wrong type: " .. c[1] .. " on " .. c[2], function()
      local h = box.h
      writes_nothing(h, function()
        is_error(400, "bad_request", h:post(c[2], (c[3]:gsub("ACTOR", A"arc")), h.operator))
      end)
      wake_ok(h, A"arc")
    end)
  end

  it("a field of the wrong type on run, sleep, replay and direction, writing nothing", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    writes_nothing(h, function()
      is_error(400, "bad_request", h:post("/v1/run", { session_id = 5, input = 1 }))
      is_error(400, "bad_request", h:post("/v1/run", { session_id = { w.session_id }, input = 1 }))
      is_error(400, "bad_request", h:post("/v1/run", { session_id = w.session_id, skill = 5 }))
      is_error(400, "bad_request", h:post("/v1/run", { input = 1 }))
      is_error(400, "bad_request", h:post("/v1/sleep", { session_id = 5 }))
      is_error(400, "bad_request", h:post("/v1/actors/" .. A"arc" .. "/replay", { to = "x" }, h.operator))
      is_error(400, "bad_request", h:post("/v1/actors/" .. A"arc" .. "/replay", { to = -1 }, h.operator))
      is_error(400, "bad_request", h:post("/v1/actors/" .. A"arc" .. "/direction", { nodirection = 1 }, h.operator))
    end)
    -- the session is untouched: it still runs and sleeps
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
    sleep_ok(h, w.session_id)
  end)

  local malformed = {
    { "empty", "" },
    { "a dot", "." },
    { "two dots", ".." },
    { "a slash", "a/b" },
    { "65 chars", ("a"):rep(65) },
    { "a non-ASCII letter", "é" },
    { "a space", "a b" },
    { "a NUL", "a\0b" },
  }
  for _, c in ipairs(malformed) do
    it("a malformed actor_id (" .. c[1] .. ") on wake and load", function()
      local h = box.h
      writes_nothing(h, function()
        is_error(400, "bad_request", h:wake(c[2]))
        is_error(400, "bad_request", h:post("/v1/load", { actor_id = c[2] }, h.operator))
      end)
    end)
  end

  it("the edges of a well-formed actor_id are accepted: 64 chars, every allowed character", function()
    local h = box.h
    wake_ok(h, ("a"):rep(64))
    wake_ok(h, "AZaz09_.-")
    wake_ok(h, "...")
  end)

  it("context_hint over 2,000 bytes is refused; exactly 2,000 bytes is accepted", function()
    local h = box.h
    writes_nothing(h, function()
      is_error(400, "bad_request", h:wake(A"arc", { context_hint = ("x"):rep(2001) }))
      -- bytes, not characters: 1,001 two-byte characters are 2,002 bytes
      is_error(400, "bad_request", h:wake(A"arc", { context_hint = ("é"):rep(1001) }))
    end)
    wake_ok(h, A"arc", { context_hint = ("x"):rep(2000) })
    wake_ok(h, A"bob", { context_hint = ("é"):rep(1000) })
  end)
end)

-- ---- 400 tenant_in_payload -----------------------------------------------------

describe("400 tenant_in_payload", function()
  local box = shared_host()

  it("a top-level tenant_id on wake, load, run, sleep, replay and direction writes nothing", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    writes_nothing(h, function()
      is_error(400, "tenant_in_payload", h:wake(A"bob", { tenant_id = "default" }))
      is_error(400, "tenant_in_payload", h:wake(A"bob", { tenant_id = "other" }))
      is_error(400, "tenant_in_payload", h:post("/v1/load", { actor_id = A"bob", tenant_id = "default" }, h.operator))
      is_error(400, "tenant_in_payload", h:post("/v1/run", { session_id = w.session_id, input = 2, tenant_id = "default" }))
      is_error(400, "tenant_in_payload", h:post("/v1/sleep", { session_id = w.session_id, tenant_id = "default" }))
      is_error(400, "tenant_in_payload", h:post("/v1/actors/" .. A"arc" .. "/replay", { to = 1, tenant_id = "x" }, h.operator))
      is_error(400, "tenant_in_payload", h:post("/v1/actors/" .. A"arc" .. "/direction", { direction = 1, tenant_id = "x" }, h.operator))
      -- even null
      is_error(400, "tenant_in_payload", h:post("/v1/wake", '{"actor_id":"' .. A"bob" .. '","tenant_id":null}'))
    end)
    -- bob was never woken, arc's session still works
    wake_ok(h, A"bob")
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
  end)

  it("a tenant_id nested below the top level is only data", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    local r = run_ok(h, w.session_id, { tenant_id = "other" })
    assert.are.equal(1, r.cursor)
    local _, entries = log_head(h, A"arc")
    assert.are.same({ tenant_id = "other" }, entries[1].body.input)
  end)
end)

-- ---- 401 unauthorized ----------------------------------------------------------

describe("401 unauthorized", function()
  local box = shared_host()

  it("no token", function()
    local h = box.h
    writes_nothing(h, function()
      is_error(401, "unauthorized", h:wake(A"arc", nil, false))
      is_error(401, "unauthorized", h:post("/v1/load", { actor_id = A"arc" }, false))
      is_error(401, "unauthorized", h:get("/v1/status", false))
      is_error(401, "unauthorized", h:get("/v1/actors/" .. A"arc" .. "/log", false))
      is_error(401, "unauthorized", h:post("/v1/actors/" .. A"arc" .. "/direction", { direction = 1 }, false))
      is_error(401, "unauthorized", h:get("/v1/nosuchroute", false))
    end)
  end)

  it("an unknown token", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    local fake = "mw_" .. ("0"):rep(64)
    writes_nothing(h, function()
      is_error(401, "unauthorized", h:wake(A"bob", nil, fake))
      is_error(401, "unauthorized", h:wake(A"bob", nil, "nonsense"))
      is_error(401, "unauthorized", h:wake(A"bob", nil, h.agent .. "x"))
      is_error(401, "unauthorized", h:wake(A"bob", nil, h.agent:sub(1, -2)))
      is_error(401, "unauthorized", h:post("/v1/run", { session_id = w.session_id, input = 1 }, fake))
      is_error(401, "unauthorized", h:post("/v1/sleep", { session_id = w.session_id }, fake))
      is_error(401, "unauthorized", h:post("/v1/actors/" .. A"arc" .. "/direction", { direction = 1 }, fake))
    end)
  end)

  local malformed = {
    { "Bearer alone", "Bearer" },
    { "Bearer and a space", "Bearer " },
    { "Basic credentials", "Basic xyz" },
    { "Basic with a real token", "Basic %s" },
    { "the token without a scheme", "%s" },
    { "an empty header", "" },
  }
  for _, c in ipairs(malformed) do
    it("a malformed Authorization header: " .. c[1], function()
      local h = box.h
      local value = c[2]:format(h.operator)
      writes_nothing(h, function()
        is_error(401, "unauthorized", request(h, "POST", "/v1/wake", '{"actor_id":"arc"}', { Authorization = value }))
        is_error(401, "unauthorized", request(h, "GET", "/v1/status", nil, { Authorization = value }))
      end)
    end)
  end

  it("a revoked token, revoked while the host runs, takes effect at once", function()
    local h = box.h
    local tok = new_token(h, "default", "agent")
    local w = wake_ok(h, A"arc", nil, tok)
    run_ok(h, w.session_id, 1, tok)
    local out, code = H.sh(H.mw .. " token revoke --home " .. h.home .. " --token " .. tok)
    assert.are.equal(0, code, out)
    writes_nothing(h, function()
      is_error(401, "unauthorized", h:post("/v1/run", { session_id = w.session_id, input = 2 }, tok))
      is_error(401, "unauthorized", h:post("/v1/sleep", { session_id = w.session_id, handover = "x" }, tok))
      is_error(401, "unauthorized", h:wake(A"bob", nil, tok))
    end)
    assert.are.equal(1, log_head(h, A"arc"))
    -- the session itself is still there for a valid token of the tenant
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
  end)
end)

-- ---- 403 forbidden ---------------------------------------------------------------

describe("403 forbidden", function()
  local box = shared_host()

  local routes = {
    { "POST", "/v1/load", '{"actor_id":"ACTOR"}' },
    { "GET", "/v1/actors/ACTOR/log" },
    { "GET", "/v1/actors/ACTOR/snapshots" },
    { "POST", "/v1/actors/ACTOR/replay", '{"to":0}' },
    { "POST", "/v1/actors/ACTOR/direction", '{"direction":{"goal":"take over"}}' },
    { "GET", "/v1/status" },
  }
  for _, c in ipairs(routes) do
    it("an agent token on " .. c[1] .. " " .. c[2], function()
      local h = box.h
      -- x has a log, so that a leak would show
      local x = A"x"
      local path, payload = c[2]:gsub("ACTOR", x), c[3] and c[3]:gsub("ACTOR", x)
      local w = wake_ok(h, x)
      run_ok(h, w.session_id, 1)
      sleep_ok(h, w.session_id)
      writes_nothing(h, function()
        local st, body, raw = h:request(c[1], path, payload, h.agent)
        is_error(403, "forbidden", st, body, raw)
        assert.is_nil(body.entries)
        assert.is_nil(body.snapshots)
        assert.is_nil(body.state)
        assert.is_nil(body.sessions)
      end)
      -- the same call with the operator token is allowed
      local st = h:request(c[1], path, payload, h.operator)
      assert.are.equal(200, st)
    end)
  end
end)

-- ---- 404 unknown_session ---------------------------------------------------------

describe("404 unknown_session", function()
  local box = shared_host()

  it("no such session: run and sleep write nothing", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      for _, id in ipairs { "ses_00000000000000000000000000000000", "nope", "", w.session_id .. "0",
                            w.session_id:upper() } do
        is_error(404, "unknown_session", h:post("/v1/run", { session_id = id, input = 1 }))
        is_error(404, "unknown_session", h:post("/v1/sleep", { session_id = id, handover = "x" }))
      end
    end)
  end)

  it("another tenant's session is unknown too, and is left untouched", function()
    local h = box.h
    local other = new_token(h, "other", "agent")
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    writes_nothing(h, function()
      is_error(404, "unknown_session", h:post("/v1/run", { session_id = w.session_id, input = 2 }, other))
      is_error(404, "unknown_session", h:post("/v1/sleep", { session_id = w.session_id, handover = "x" }, other))
    end)
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
    assert.are.equal(3, sleep_ok(h, w.session_id).cursor)
  end)
end)

-- ---- 404 not_found ----------------------------------------------------------------

describe("404 not_found", function()
  local box = shared_host()

  it("no such route", function()
    local h = box.h
    writes_nothing(h, function()
      is_error(404, "not_found", h:get("/nope", false))
      is_error(404, "not_found", h:get("/", false))
      is_error(404, "not_found", h:get("/v1/nope"))
      is_error(404, "not_found", h:get("/v1/wake"))                       -- wrong method
      is_error(404, "not_found", h:post("/v1/status", "{}", h.operator))  -- wrong method
      is_error(404, "not_found", h:post("/v1/actors/" .. A"arc" .. "/nope", "{}", h.operator))
      is_error(404, "not_found", h:get("/v1/actors/arc", h.operator))
      is_error(404, "not_found", h:post("/v2/wake", { actor_id = A"arc" }))
    end)
  end)

  it("no such actor: log, snapshots and replay", function()
    local h = box.h
    -- an actor of another tenant is no actor of this one
    local other_op = new_token(h, "other", "operator")
    local w = wake_ok(h, A"ghost", nil, other_op)
    run_ok(h, w.session_id, 1, other_op)
    writes_nothing(h, function()
      for _, actor in ipairs { A"nobody", A"ghost" } do
        is_error(404, "not_found", h:get("/v1/actors/" .. actor .. "/log", h.operator))
        is_error(404, "not_found", h:get("/v1/actors/" .. actor .. "/snapshots", h.operator))
        is_error(404, "not_found", h:post("/v1/actors/" .. actor .. "/replay", { to = 0 }, h.operator))
      end
    end)
  end)

  it("no such skill: nothing committed", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      is_error(404, "not_found", h:post("/v1/run", { session_id = w.session_id, skill = "nope", input = 1 }))
    end)
    assert.are.equal(1, run_ok(h, w.session_id, 1).cursor)
  end)

  it("no such snapshot in from_snapshot: the actor is not left awake", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    sleep_ok(h, w.session_id)
    writes_nothing(h, function()
      is_error(404, "not_found", h:wake(A"arc", { from_snapshot = "s_00000000000000000000000000000000" }))
      is_error(404, "not_found", h:wake(A"fresh", { from_snapshot = "s_00000000000000000000000000000000" }))
    end)
    wake_ok(h, A"arc")
    wake_ok(h, A"fresh")
  end)
end)

-- ---- 409 already_awake ---------------------------------------------------------------

describe("409 already_awake", function()
  local box = shared_host()

  it("wake or load for an actor with an open session, whoever opened it", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    local st, l = h:post("/v1/load", { actor_id = A"bob" }, h.operator)
    assert.are.equal(200, st)
    writes_nothing(h, function()
      is_error(409, "already_awake", h:wake(A"arc"))
      is_error(409, "already_awake", h:wake(A"arc", { from_snapshot = "genesis" }))
      is_error(409, "already_awake", h:post("/v1/load", { actor_id = A"arc" }, h.operator))
      is_error(409, "already_awake", h:wake(A"bob"))
      is_error(409, "already_awake", h:post("/v1/load", { actor_id = A"bob" }, h.operator))
    end)
    -- the open sessions are the ones there were
    sleep_ok(h, w.session_id)
    sleep_ok(h, l.session_id, nil, h.operator)
    wake_ok(h, A"arc")
  end)
end)

-- ---- 409 session_closed ----------------------------------------------------------------

describe("409 session_closed", function()
  local box = shared_host()

  it("run and sleep after sleep write nothing, also after a restart", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    sleep_ok(h, w.session_id, "bye")
    local function closed()
      writes_nothing(h, function()
        is_error(409, "session_closed", h:post("/v1/run", { session_id = w.session_id, input = 2 }))
        is_error(409, "session_closed", h:post("/v1/sleep", { session_id = w.session_id }))
        is_error(409, "session_closed", h:post("/v1/sleep", { session_id = w.session_id, handover = "again" }))
      end)
    end
    closed()
    h:restart()
    closed()
    assert.are.equal(2, log_head(h, A"arc"))
  end)
end)

-- ---- 409 snapshot_corrupt ----------------------------------------------------------------

describe("409 snapshot_corrupt", function()
  local box = shared_host()

  -- wake, run, sleep: returns the sleep's answer
  local function cycle(h, actor, n)
    local w = wake_ok(h, actor)
    run_ok(h, w.session_id, { n = n })
    return sleep_ok(h, w.session_id, { after = n })
  end

  local function corrupt(h, id)
    sql(h, "UPDATE snapshots SET state='{\"x\":1}' WHERE id='" .. id .. "'")
  end

  -- the head corrupt, two heads in the log; returns the ids and the replay
  -- of the whole log taken before the corruption
  local function two_heads_second_corrupt(h)
    local s1 = cycle(h, A"arc", 1)
    local s2 = cycle(h, A"arc", 2)
    assert.are_not.equal(s1.snapshot_id, s2.snapshot_id)
    assert.are.equal(2, s1.cursor)
    assert.are.equal(4, s2.cursor)
    local st, r, raw = h:post("/v1/actors/" .. A"arc" .. "/replay", { to = 4 }, h.operator)
    assert.are.equal(200, st, raw)
    corrupt(h, s2.snapshot_id)
    return s1.snapshot_id, s2.snapshot_id, r, raw
  end

  -- asserts the wake answers snapshot_corrupt naming bad and last_safe
  local function corrupt_wake(h, bad, last_safe)
    local e = is_error(409, "snapshot_corrupt", h:wake(A"arc"))
    assert.are.equal(bad, e.snapshot_id)
    assert.are.equal(last_safe, e.last_safe_snapshot_id)
    return e
  end

  it("a corrupt head: 409 with snapshot_id and last_safe_snapshot_id, marked unsafe, nothing else written", function()
    local h = box.h
    local s1, s2 = two_heads_second_corrupt(h)
    local before = log_and_sessions(h)
    local failures = metric(h, "mw_snapshot_verification_failures_total")
    corrupt_wake(h, s2, s1)
    local _, by = snapshots(h, A"arc")
    assert.is_false(by[s2].safe)
    assert.is_true(by[s2].head)
    assert.is_true(by[s1].safe)
    assert.is_true(metric(h, "mw_snapshot_verification_failures_total") > failures)
    -- every wake without from_snapshot answers the same, and so does load
    corrupt_wake(h, s2, s1)
    local e = is_error(409, "snapshot_corrupt", h:post("/v1/load", { actor_id = A"arc" }, h.operator))
    assert.are.equal(s2, e.snapshot_id)
    assert.are.equal(before, log_and_sessions(h))
  end)

  it("recovery from the last safe snapshot: 200, its sleep moves the head, then plain wakes work", function()
    local h = box.h
    local s1, s2, r = two_heads_second_corrupt(h)
    corrupt_wake(h, s2, s1)
    corrupt_wake(h, s2, s1)
    local st, w, raw = h:wake(A"arc", { from_snapshot = s1 })
    assert.are.equal(200, st, raw)
    assert.are.equal(4, w.boot_packet.cursor)
    assert.are.equal(2, w.replayed)   -- from s1 (cursor 2) to the end of the log
    -- the state is replay(cursor), not the corrupt head's
    assert.are.same(r.state, w.boot_packet.state)
    assert.is_nil(w.boot_packet.state.x)
    run_ok(h, w.session_id, { n = 3 })
    local s3 = sleep_ok(h, w.session_id, { after = 3 })
    assert.are.equal(6, s3.cursor)
    local list, by = snapshots(h, A"arc")
    assert.is_true(by[s3.snapshot_id].head)
    assert.is_true(by[s3.snapshot_id].safe)
    for _, s in ipairs(list) do
      if s.snapshot_id ~= s3.snapshot_id then assert.is_false(s.head, s.snapshot_id) end
    end
    assert.is_false(by[s2].safe)
    -- a plain wake now resumes from the new head
    local w2 = wake_ok(h, A"arc")
    assert.are.equal(s3.snapshot_id, w2.snapshot_id)
    assert.is_true(w2.resumed_from_prior)
    assert.are.equal(6, w2.boot_packet.cursor)
    assert.are.equal(0, w2.replayed)
    assert.are.same({ after = 3 }, w2.boot_packet.state.handover)
  end)

  it("recovery from genesis: 200, its sleep moves the head, then plain wakes work", function()
    local h = box.h
    local s1, s2, r = two_heads_second_corrupt(h)
    corrupt_wake(h, s2, s1)
    local st, w, raw = h:wake(A"arc", { from_snapshot = "genesis" })
    assert.are.equal(200, st, raw)
    assert.are.equal(4, w.boot_packet.cursor)
    assert.are.equal(4, w.replayed)
    assert.are.same(r.state, w.boot_packet.state)
    local s3 = sleep_ok(h, w.session_id, { after = "genesis" })
    local _, by = snapshots(h, A"arc")
    assert.is_true(by[s3.snapshot_id].head)
    assert.is_false(by[s2].head)
    local w2 = wake_ok(h, A"arc")
    assert.are.equal(s3.snapshot_id, w2.snapshot_id)
    assert.are.same({ after = "genesis" }, w2.boot_packet.state.handover)
  end)

  it("replay to the last cursor is not stopped by a corrupt head: the same bytes as before", function()
    local h = box.h
    local s1, s2, _, before = two_heads_second_corrupt(h)
    local st, _, raw = h:post("/v1/actors/" .. A"arc" .. "/replay", { to = 4 }, h.operator)
    assert.are.equal(200, st, raw)
    assert.are.equal(before, raw)
    corrupt_wake(h, s2, s1)            -- now it is marked unsafe, too
    st, _, raw = h:post("/v1/actors/" .. A"arc" .. "/replay", { to = 4 }, h.operator)
    assert.are.equal(200, st, raw)
    assert.are.equal(before, raw)
  end)

  it("recovery from the corrupt snapshot itself is refused", function()
    local h = box.h
    local s1, s2 = two_heads_second_corrupt(h)
    corrupt_wake(h, s2, s1)
    local st, body, raw = h:wake(A"arc", { from_snapshot = s2 })
    assert.are_not.equal(200, st, raw)
    assert.is_table(body.error, raw)
    -- and it did not open a session: recovery still works
    local st2, _, raw2 = h:wake(A"arc", { from_snapshot = s1 })
    assert.are.equal(200, st2, raw2)
  end)

  it("last_safe_snapshot_id is null when no snapshot is safe", function()
    local h = box.h
    local s1 = cycle(h, A"arc", 1)
    corrupt(h, s1.snapshot_id)
    local e = corrupt_wake(h, s1.snapshot_id, cjson.null)
    assert.are.equal(cjson.null, e.last_safe_snapshot_id)
    local w = wake_ok(h, A"arc", { from_snapshot = "genesis" })
    assert.are.equal(2, w.replayed)
  end)
end)

describe("a corrupt checkpoint", function()
  -- K = 5 (--checkpoint-every) rather than the default 100, to build the case
  -- in a few calls: a checkpoint is newer than the head only when a wake
  -- replays more than K entries and its session sleeps without writing.
  local box = shared_host({ args = "--checkpoint-every 5" })

  it("is marked unsafe and skipped: the wake replays further, answers 200, and it is counted", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    local head = sleep_ok(h, w.session_id, "h")            -- head at cursor 2
    assert.are.equal(2, head.cursor)
    for i = 1, 7 do                                          -- cursors 3..9
      local st, d, raw = h:post("/v1/actors/" .. A"arc" .. "/direction", { direction = { step = i } }, h.operator)
      assert.are.equal(200, st, raw)
      assert.are.equal(2 + i, d.cursor)
    end
    local w1 = wake_ok(h, A"arc")                             -- replays 7 > K: a checkpoint at 9
    assert.are.equal(7, w1.replayed)
    local s = sleep_ok(h, w1.session_id)                     -- writes nothing: the head stays
    assert.are.equal(head.snapshot_id, s.snapshot_id)
    local list = snapshots(h, A"arc")
    local ckpt
    for _, snap in ipairs(list) do
      if snap.cursor == 9 then ckpt = snap end
    end
    assert.is_table(ckpt, "no checkpoint at cursor 9: " .. cjson.encode(list))
    assert.is_false(ckpt.head)
    assert.is_true(ckpt.safe)
    -- the checkpoint is used while it is good: nothing to replay
    local w2 = wake_ok(h, A"arc")
    assert.are.equal(0, w2.replayed)
    sleep_ok(h, w2.session_id)

    sql(h, "UPDATE snapshots SET state='{\"x\":1}' WHERE id='" .. ckpt.snapshot_id .. "'")
    local failures = metric(h, "mw_snapshot_verification_failures_total")
    local st, w3, raw = h:wake(A"arc")
    assert.are.equal(200, st, raw)
    assert.are.equal(head.snapshot_id, w3.snapshot_id)
    assert.are.equal(9, w3.boot_packet.cursor)
    assert.are.equal(7, w3.replayed)
    assert.is_nil(w3.boot_packet.state.x)
    local _, r = h:post("/v1/actors/" .. A"arc" .. "/replay", { to = 9 }, h.operator)
    assert.are.same(r.state, w3.boot_packet.state)
    local _, by = snapshots(h, A"arc")
    assert.is_false(by[ckpt.snapshot_id].safe)
    assert.is_true(by[head.snapshot_id].safe)
    assert.is_true(by[head.snapshot_id].head)
    assert.are.equal(failures + 1, metric(h, "mw_snapshot_verification_failures_total"))
  end)
end)

-- ---- 413 payload_too_large ------------------------------------------------------------

describe("413 payload_too_large", function()
  local box = shared_host({ args = "--max-body 1024" })

  -- a wake body of exactly n bytes
  local function wake_body(actor, n)
    local pre, post = '{"actor_id":"' .. actor .. '","context_hint":"', '"}'
    return pre .. ("x"):rep(n - #pre - #post) .. post
  end

  it("a body over --max-body is refused; one at the limit is accepted", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    writes_nothing(h, function()
      local b = wake_body(A"big", 1025)
      assert.are.equal(1025, #b)
      is_error(413, "payload_too_large", h:post("/v1/wake", b))
      is_error(413, "payload_too_large", h:post("/v1/wake", wake_body(A"big", 100000)))
      local run = '{"session_id":"' .. w.session_id .. '","input":"' .. ("y"):rep(1100) .. '"}'
      is_error(413, "payload_too_large", h:post("/v1/run", run))
    end)
    assert.are.equal(0, log_head(h, A"arc"))
    local b = wake_body(A"big", 1024)
    assert.are.equal(1024, #b)
    local st, _, raw = h:post("/v1/wake", b)
    assert.are.equal(200, st, raw)
  end)
end)

-- ---- 503 unavailable (a locked store) -------------------------------------------------------

describe("503 unavailable", function()
  local box = shared_host()

  it("while another process holds the store's write lock: nothing committed, and the host recovers", function()
    local h = box.h
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    local marker = h.home .. ".locked"
    os.remove(marker)
    local lock = assert(io.popen("sqlite3 " .. h.home .. "/mw.db >/dev/null 2>&1", "w"))
    lock:write(".timeout 5000\nBEGIN IMMEDIATE;\n.once " .. marker .. "\nSELECT 'locked';\n")
    lock:flush()
    local deadline = socket.gettime() + 5
    while not H.read_file(marker) and socket.gettime() < deadline do socket.sleep(0.01) end
    local ok, err = pcall(function()
      assert.is_truthy(H.read_file(marker), "the lock was not taken")
      local before = log_and_sessions(h)
      is_error(503, "unavailable", h:post("/v1/run", { session_id = w.session_id, input = 2 }))
      is_error(503, "unavailable", h:post("/v1/sleep", { session_id = w.session_id, handover = "x" }))
      is_error(503, "unavailable", h:wake(A"bob"))
      is_error(503, "unavailable", h:post("/v1/actors/" .. A"arc" .. "/direction", { direction = 1 }, h.operator))
      assert.are.equal(before, log_and_sessions(h))
      -- reads still work
      assert.are.equal(1, log_head(h, A"arc"))
    end)
    lock:write("ROLLBACK;\n.quit\n")
    lock:close()
    os.remove(marker)
    assert(ok, err)
    -- back by itself: the same session goes on, bob can wake
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
    assert.are.equal(3, sleep_ok(h, w.session_id, "x").cursor)
    wake_ok(h, A"bob")
    local out, code = H.sh(H.mw .. " log verify --home " .. h.home .. " --tenant default --actor " .. A"arc")
    assert.are.equal(0, code, out)
  end)
end)

-- ---- 500 internal ------------------------------------------------------------------------

describe("500 internal", function()
  local h
  setup(function()
    local first = H.start()
    first:stop(true)
    local dir = first.home .. "/tenants/default/skills"
    os.execute("mkdir -p " .. dir)
    -- a staged entry the fold cannot fold: `remember` with a body that is not an object
    write(dir .. "/badentry.lua", [[
return { name = "badentry", description = "stages what the fold chokes on",
  run = function(ctx) ctx.stage("remember", 5); return { ok = true } end }]])
    h = H.start({ home = first.home })
    h.agent, h.operator = first.agent, first.operator
  end)
  teardown(function() if h then h:stop() end end)

  it("a fold that fails on a staged entry: 500 internal with a message, nothing committed, host serving", function()
    local w = wake_ok(h, A"arc")
    run_ok(h, w.session_id, 1)
    writes_nothing(h, function()
      is_error(500, "internal", h:post("/v1/run", { session_id = w.session_id, skill = "badentry" }))
    end)
    assert.are.equal(1, log_head(h, A"arc"))
    assert.are.equal(200, (h:get("/healthz")))
    assert.are.equal(2, run_ok(h, w.session_id, 2).cursor)
    assert.are.equal(3, sleep_ok(h, w.session_id).cursor)
  end)
end)
