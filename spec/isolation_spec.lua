-- isolation_spec.lua -- tenant isolation, as a matrix: every route of the
-- contract x every kind of caller that is not tenant A (no token, malformed
-- tokens, A's own token revoked, tenant B's operator and agent) against A's
-- actors and sessions.  Only A's tokens ever read or change A's data: after
-- the matrix A's log, snapshots, sessions, streams, tokens and Cortex are
-- byte-for-byte as before; no answer to a non-A caller (headers included)
-- carries any of A's bytes (state values, fact labels, handovers, session
-- ids, entry hashes, snapshot ids, state hashes, tokens, its roster, its
-- tenant name); unauthenticated answers are the same whatever the route; and
-- /healthz and /metrics name no tenant and no actor.  A's agent token is the
-- last row: agent routes work on A's data, operator routes answer 403.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function rnd_hex(n)
  local t = {}
  for i = 1, n do t[i] = ("%x"):format(math.random(0, 15)) end
  return table.concat(t)
end

-- A request with the Authorization header exactly as given (nil: none);
-- returns status, decoded body (or raw), the whole answer (headers and body).
local function request(h, method, path, body, auth)
  if type(body) == "table" then body = cjson.encode(body) end
  body = body or ""
  local host, port = h.url:match("http://([%d%.]+):(%d+)")
  local c = assert(socket.tcp())
  c:settimeout(5)
  assert(c:connect(host, tonumber(port)))
  local req = method .. " " .. path .. " HTTP/1.1\r\nHost: mw\r\nConnection: close\r\n"
    .. (auth and ("Authorization: " .. auth .. "\r\n") or "")
    .. "Content-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
  assert(c:send(req))
  local parts = {}
  while true do
    local s, err, partial = c:receive(65536)
    if s then parts[#parts + 1] = s
    else
      if partial and #partial > 0 then parts[#parts + 1] = partial end
      break
    end
  end
  c:close()
  local raw = table.concat(parts)
  local status = tonumber(raw:match("^HTTP/1%.1 (%d+)"))
  local b = raw:match("\r\n\r\n(.*)$") or ""
  local ok, decoded = pcall(cjson.decode, b)
  return status, ok and decoded or b, raw
end

local function mw(args)
  local out, code = H.sh(H.mw .. " " .. args)
  return code, out
end

local function token(home, tenant, role)
  local code, out = mw(("token create --home %s --tenant %s --role %s --json"):format(q(home), tenant, role))
  assert(code == 0, out)
  return cjson.decode(out).token
end

-- Everything the store holds for tenant t, as text.
local function tenant_rows(home, t)
  local sql = ([[
SELECT 'stream', id, actor, last_cursor, hex(last_hash), head_snapshot, created_at FROM streams WHERE tenant='%s' ORDER BY id;
SELECT 'entry', e.stream, e.cursor, e.ts, e.kind, e.body, hex(e.prev), hex(e.hash) FROM entries e JOIN streams s ON s.id=e.stream WHERE s.tenant='%s' ORDER BY 2, 3;
SELECT 'snapshot', sn.id, sn.stream, sn.cursor, sn.state, hex(sn.state_hash), hex(sn.entry_hash), sn.fold, sn.created_at, sn.safe, sn.is_head FROM snapshots sn JOIN streams s ON s.id=sn.stream WHERE s.tenant='%s' ORDER BY 2;
SELECT 'session', * FROM sessions WHERE tenant='%s' ORDER BY id;
SELECT 'sweep', sw.* FROM sweeps sw JOIN streams s ON s.id=sw.stream WHERE s.tenant='%s' ORDER BY 2;
SELECT 'consolidation', * FROM consolidation WHERE tenant='%s' ORDER BY 2, 3, 4;
SELECT 'token', hex(hash), role, created_at, revoked_at FROM tokens WHERE tenant='%s' ORDER BY 2;
]]):format(t, t, t, t, t, t, t)
  local out, code = H.sh("sqlite3 -readonly -cmd '.timeout 5000' " .. q(home .. "/mw.db") .. " " .. q(sql))
  assert(code == 0, out)
  assert(out:match("'?stream"), "no rows for tenant " .. t .. ": " .. out)
  return out
end

local function cortex_dump(home, t)
  local code, out = mw(("cortex dump --home %s --tenant %s"):format(q(home), t))
  assert(code == 0, out)
  return out
end

-- The first of `needles` found in `hay`, or nil.
local function leaked(hay, needles)
  for _, n in ipairs(needles) do
    if #n >= 6 and hay:find(n, 1, true) then return n end
  end
end

-- "200", "404 unknown_session", alternatives joined by "|"
local function matches(expect, st, body)
  for alt in expect:gmatch("[^|]+") do
    local s, code = alt:match("^(%d+)%s*(%S*)$")
    if tonumber(s) == st and (code == "" or (type(body) == "table" and type(body.error) == "table"
        and body.error.code == code)) then
      return true
    end
  end
  return false
end

local SKILL = [[
return {
  name = "facts",
  description = "stages the facts in input.facts",
  run = function(ctx, input)
    for _, f in ipairs((input or {}).facts or {}) do ctx.fact(f) end
    return { staged = #((input or {}).facts or {}) }
  end,
}
]]

describe("tenant isolation", function()
  local h, home
  local TA, TB = "tenantalpha" .. rnd_hex(6), "tenantbravo" .. rnd_hex(6)
  local tok = {}
  local secret = {}
  local a = {}          -- A's ids: sessions, snapshots, hashes
  local a_bytes = {}    -- every string that is A's and must never reach a non-A caller
  local answers = {}    -- every answer a non-A caller got: {who, route, raw}

  local function call(who, method, path, body)
    local auth
    if who == "none" then auth = nil
    elseif who == "bare" then auth = "Bearer"
    elseif who == "garbage" then auth = "Bearer mw_" .. ("0"):rep(64)
    elseif who == "a_op_plus" then auth = "Bearer " .. tok.a_op .. "0"
    elseif who == "a_op_trunc" then auth = "Bearer " .. tok.a_op:sub(1, -2)
    elseif who == "basic" then auth = "Basic " .. tok.a_op
    elseif who == "revoked" then auth = "Bearer " .. tok.a_revoked
    else auth = "Bearer " .. assert(tok[who], who) end
    local st, body, raw = request(h, method, path, body, auth)
    if who ~= "a_agent" and who ~= "a_op" then answers[#answers + 1] = { who = who, route = method .. " " .. path, raw = raw } end
    return st, body, raw
  end

  local function ok(who, method, path, body)
    local st, b, raw = call(who, method, path, body)
    assert(st == 200, who .. " " .. method .. " " .. path .. ": " .. tostring(raw))
    return b, raw
  end

  setup(function()
    local h0 = H.start()
    h0:stop(true)
    home = h0.home
    tok.a_agent = token(home, TA, "agent")
    tok.a_op = token(home, TA, "operator")
    tok.a_revoked = token(home, TA, "operator")
    tok.b_op = token(home, TB, "operator")
    tok.b_agent = token(home, TB, "agent")
    for _, k in ipairs { "state", "fact", "handover", "direction", "only", "run", "feed" } do
      secret[k] = "alpha-" .. k .. "-" .. rnd_hex(16)
    end
    for t, feed in pairs { [TA] = "http://" .. secret.feed .. ".invalid/feed", [TB] = "http://bravo-feed.invalid/feed" } do
      local dir = home .. "/tenants/" .. t
      os.execute("mkdir -p " .. q(dir .. "/skills"))
      write(dir .. "/skills/facts.lua", SKILL)
      write(dir .. "/roster.lua", ('return { { id = "feed", locator = %q, does = "news", subjects = { "mundo" } } }'):format(feed))
    end
    h = H.start({ home = home })
    h.agent, h.operator = tok.a_agent, tok.a_op

    -- A's data: arcA slept with a head, a direction, onlyA slept, arcA awake again
    local w = ok("a_agent", "POST", "/v1/wake", { actor_id = "arcA" })
    a.sid_closed = w.session_id
    ok("a_agent", "POST", "/v1/run", { session_id = w.session_id, input = { remember = { key = "k", value = secret.state } } })
    ok("a_agent", "POST", "/v1/run", { session_id = w.session_id, skill = "facts",
      input = { facts = { { node = { key = "alpha:n1", kind = "topic", label = secret.fact } } } } })
    ok("a_agent", "POST", "/v1/sleep", { session_id = w.session_id, handover = { note = secret.handover } })
    ok("a_op", "POST", "/v1/actors/arcA/direction", { direction = { goal = secret.direction } })
    w = ok("a_agent", "POST", "/v1/wake", { actor_id = "onlyA" })
    a.sid_only = w.session_id
    ok("a_agent", "POST", "/v1/run", { session_id = w.session_id, input = { remember = { key = "k", value = secret.only } } })
    ok("a_agent", "POST", "/v1/sleep", { session_id = w.session_id })
    w = ok("a_agent", "POST", "/v1/wake", { actor_id = "arcA" })
    a.sid_open = w.session_id
    a.head_hash = w.boot_packet.continuity.head_hash
    local r = ok("a_agent", "POST", "/v1/run", { session_id = w.session_id, input = { x = secret.run } })
    a.cursor_open = r.cursor
    -- B's own arcA, with its own state
    local wb = ok("b_agent", "POST", "/v1/wake", { actor_id = "arcA" })
    ok("b_agent", "POST", "/v1/run", { session_id = wb.session_id, input = { remember = { key = "k", value = "bravo-value" } } })
    ok("b_agent", "POST", "/v1/sleep", { session_id = wb.session_id })
    answers = {}

    -- A's bytes
    for _, v in pairs(secret) do a_bytes[#a_bytes + 1] = v end
    for _, v in ipairs { a.sid_closed, a.sid_only, a.sid_open, a.head_hash, tok.a_agent, tok.a_op, tok.a_revoked, TA } do
      a_bytes[#a_bytes + 1] = v
    end
    for _, actor in ipairs { "arcA", "onlyA" } do
      local lg = ok("a_op", "GET", "/v1/actors/" .. actor .. "/log?limit=1000")
      for _, e in ipairs(lg.entries) do a_bytes[#a_bytes + 1] = e.hash end
      local sn = ok("a_op", "GET", "/v1/actors/" .. actor .. "/snapshots")
      for _, s in ipairs(sn.snapshots) do
        a_bytes[#a_bytes + 1] = s.snapshot_id
        a_bytes[#a_bytes + 1] = s.state_hash
      end
    end
    assert(#a_bytes > 20, "too few of A's bytes to look for")
  end)

  teardown(function()
    if h then
      local log = h:hostlog()
      h:stop()
      assert.is_nil(log:match("AddressSanitizer"), log)
      assert.is_nil(log:match("runtime error"), log)
    end
  end)

  -- ---- the matrix ----------------------------------------------------------------

  -- route, method, path, body (a function of the ids), and what each caller may get
  local function routes()
    return {
      { "wake A's awake actor", "POST", "/v1/wake", { actor_id = "arcA" },
        b_op = "200", b_agent = "200", a_agent = "409 already_awake" },
      { "wake an actor only A has", "POST", "/v1/wake", { actor_id = "onlyA" },
        b_op = "200", b_agent = "200", a_agent = "200" },
      { "load A's awake actor", "POST", "/v1/load", { actor_id = "arcA" },
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "run on A's open session", "POST", "/v1/run", { session_id = a.sid_open, input = { from = "caller" } },
        b_op = "404 unknown_session", b_agent = "404 unknown_session", a_agent = "200" },
      { "run on A's closed session", "POST", "/v1/run", { session_id = a.sid_closed, input = 1 },
        b_op = "404 unknown_session", b_agent = "404 unknown_session", a_agent = "409 session_closed" },
      { "sleep A's closed session", "POST", "/v1/sleep", { session_id = a.sid_closed },
        b_op = "404 unknown_session", b_agent = "404 unknown_session", a_agent = "409 session_closed" },
      { "navigate A's open session", "POST", "/v1/navigate", { session_id = a.sid_open, hint = secret.fact },
        b_op = "404 unknown_session", b_agent = "404 unknown_session", a_agent = "200" },
      { "delta on A's open session", "POST", "/v1/delta", { session_id = a.sid_open },
        b_op = "404 unknown_session|404 not_found", b_agent = "404 unknown_session|404 not_found",
        a_agent = "200|404 not_found" },
      { "delta of A's actor", "POST", "/v1/actors/arcA/delta", {},
        b_op = "200|404 not_found", b_agent = "403 forbidden|404 not_found", a_agent = "403 forbidden|404 not_found" },
      { "log of A's actor", "GET", "/v1/actors/arcA/log?from=1&limit=1000", nil,
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "log of an actor only A has", "GET", "/v1/actors/onlyA/log", nil,
        b_op = "200|404 not_found", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "snapshots of A's actor", "GET", "/v1/actors/arcA/snapshots", nil,
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "snapshots of an actor only A has", "GET", "/v1/actors/onlyA/snapshots", nil,
        b_op = "200|404 not_found", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "replay A's actor", "POST", "/v1/actors/arcA/replay", { to = 1 },
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "replay an actor only A has", "POST", "/v1/actors/onlyA/replay", { to = 1 },
        b_op = "400 bad_request|404 not_found", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "direction of A's actor", "POST", "/v1/actors/arcA/direction", { direction = { goal = "set by the caller" } },
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "the roster", "GET", "/v1/sources", nil,
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "status", "GET", "/v1/status", nil,
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "a skill on A's actor", "POST", "/v1/actors/arcA/skills/default", { input = { from = "caller" } },
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "a skill on an actor only A has", "POST", "/v1/actors/onlyA/skills/facts",
        { input = { facts = { { node = { key = "n:caller", kind = "topic", label = "caller" } } } } },
        b_op = "200", b_agent = "403 forbidden", a_agent = "403 forbidden" },
      { "sleep A's open session", "POST", "/v1/sleep", { session_id = a.sid_open },
        b_op = "404 unknown_session", b_agent = "404 unknown_session", a_agent = nil },
    }
  end

  local UNAUTH = { "none", "bare", "garbage", "a_op_plus", "a_op_trunc", "basic", "revoked" }
  local before = {}

  it("A's revoked token worked until it was revoked, and is refused at once after", function()
    local st, _, raw = call("revoked", "GET", "/v1/status")
    assert.are.equal(200, st, raw)
    local code, out = mw(("token revoke --home %s --token %s"):format(q(home), tok.a_revoked))
    assert.are.equal(0, code, out)
    st, _, raw = call("revoked", "GET", "/v1/status")
    assert.are.equal(401, st, raw)
    before.rows = tenant_rows(home, TA)
    before.cortex = cortex_dump(home, TA)
    answers = {}
  end)

  it("B's operator cannot tell an actor only A has from one nobody has", function()
    for _, p in ipairs { { "GET", "/log" }, { "GET", "/snapshots" }, { "POST", "/replay", { to = 1 } } } do
      local st1, _, raw1 = call("b_op", p[1], "/v1/actors/onlyA" .. p[2], p[3])
      local st2, _, raw2 = call("b_op", p[1], "/v1/actors/nobodyZ" .. p[2], p[3])
      assert.are.equal(st2, st1, raw1)
      assert.are.equal(raw2:match("\r\n\r\n(.*)$"), raw1:match("\r\n\r\n(.*)$"))
      assert.is_true(st1 == 404, "onlyA" .. p[2] .. " for B: " .. raw1)
    end
  end)

  it("every route x every non-A caller: the contract's answer, and A's data untouched", function()
    assert(before.rows, "the previous test did not record A's data")
    local wrong = {}
    local function check(who, r, st, body, raw)
      local expect = who:match("^b_") and r[who] or "401 unauthorized"
      if not matches(expect, st, body) then
        wrong[#wrong + 1] = ("%s %s (%s): want %s, got %s %s"):format(who, r[1], r[3], expect, tostring(st),
          raw:match("\r\n\r\n(.*)$") or raw)
      end
    end
    for _, who in ipairs { "b_op", "b_agent" } do
      for _, r in ipairs(routes()) do
        local st, body, raw = call(who, r[2], r[3], r[4])
        check(who, r, st, body, raw)
        -- a session B opened is B's own: close it, so the next row meets the same state
        if st == 200 and type(body) == "table" and body.session_id then
          request(h, "POST", "/v1/sleep", { session_id = body.session_id }, "Bearer " .. tok[who])
        end
      end
    end
    local per_caller = {}
    for _, who in ipairs(UNAUTH) do
      for _, r in ipairs(routes()) do
        local st, body, raw = call(who, r[2], r[3], r[4])
        check(who, r, st, body, raw)
        per_caller[who] = per_caller[who] or {}
        per_caller[who][(raw:match("\r\n\r\n(.*)$") or raw)] = true
      end
      -- and a route that does not exist: the same answer (no route or actor oracle)
      local _, _, raw = call(who, "GET", "/v1/no/such/route")
      per_caller[who][(raw:match("\r\n\r\n(.*)$") or raw)] = true
    end
    assert.are.same({}, wrong)
    for who, bodies in pairs(per_caller) do
      local n, list = 0, {}
      for b in pairs(bodies) do n = n + 1; list[#list + 1] = b end
      assert.are.equal(1, n, who .. ": unauthenticated answers differ by route: " .. table.concat(list, " | "))
    end
    assert.are.equal(before.rows, tenant_rows(home, TA), "a non-A caller changed A's store")
    assert.are.equal(before.cortex, cortex_dump(home, TA), "a non-A caller changed A's Cortex")
  end)

  it("no answer to a non-A caller carries any of A's bytes", function()
    assert(#answers > 100, "the matrix did not run: " .. #answers .. " answers")
    local found = {}
    for _, x in ipairs(answers) do
      local n = leaked(x.raw, a_bytes)
      if n then found[#found + 1] = x.who .. " " .. x.route .. ": " .. n .. " in " .. x.raw end
    end
    assert.are.same({}, found)
  end)

  it("B's own answers are B's: its log, state and roster, not A's", function()
    local lg = ok("b_op", "GET", "/v1/actors/arcA/log?limit=1000")
    local raw = cjson.encode(lg)
    assert.is_truthy(raw:find("bravo-value", 1, true), raw)
    local src = ok("b_op", "GET", "/v1/sources")
    assert.are.equal("http://bravo-feed.invalid/feed", src.sources[#src.sources].locator)
    local rp = ok("b_op", "POST", "/v1/actors/arcA/replay", { to = 1 })
    assert.is_truthy(cjson.encode(rp):find("bravo-value", 1, true))
    local stt = ok("b_op", "GET", "/v1/status")
    assert.are.equal(TB, stt.tenant)
  end)

  it("unauthenticated /healthz and /metrics name no tenant, no actor, nothing of A", function()
    local names = { TA, TB, "default", "arcA", "onlyA", "nobodyZ" }
    for _, path in ipairs { "/healthz", "/metrics" } do
      for _, who in ipairs { "none", "b_op" } do
        local st, _, raw = call(who, "GET", path)
        assert.are.equal(200, st, raw)
        for _, n in ipairs(names) do
          assert.is_nil(raw:find(n, 1, true), path .. " (" .. who .. ") names " .. n .. ":\n" .. raw)
        end
        assert.is_nil(leaked(raw, a_bytes), path .. " carries A's bytes")
        assert.is_nil(raw:match("[{,]%s*tenant%s*="), path .. " has a tenant label")
        assert.is_nil(raw:match("[{,]%s*actor%s*="), path .. " has an actor label")
      end
    end
  end)

  it("A's agent token: agent routes on A's data, 403 on operator routes; A's session went on where it was", function()
    local wrong = {}
    for _, r in ipairs(routes()) do
      if r.a_agent then
        local st, body, raw = call("a_agent", r[2], r[3], r[4])
        if not matches(r.a_agent, st, body) then
          wrong[#wrong + 1] = ("%s (%s): want %s, got %s %s"):format(r[1], r[3], r.a_agent, tostring(st), raw:match("\r\n\r\n(.*)$") or raw)
        end
        if r[1] == "run on A's open session" and st == 200 then
          assert.are.equal(a.cursor_open + 1, body.cursor, "A's open session did not go on from where A left it")
        end
        if st == 200 and type(body) == "table" and body.session_id then
          request(h, "POST", "/v1/sleep", { session_id = body.session_id }, "Bearer " .. tok.a_agent)
        end
      end
    end
    assert.are.same({}, wrong)
    -- A's state still holds A's values, and nothing any other caller sent
    local st, s, raw = call("a_agent", "POST", "/v1/sleep", { session_id = a.sid_open, handover = { end_of = "matrix" } })
    assert.are.equal(200, st, raw)
    local w = ok("a_agent", "POST", "/v1/wake", { actor_id = "arcA" })
    local state = cjson.encode(w.boot_packet.state)
    assert.is_truthy(state:find(secret.state, 1, true), state)
    assert.is_nil(state:find("set by the caller", 1, true), "another caller's input reached A's state: " .. state)
    assert.is_nil(state:find("bravo", 1, true), state)
    local lg = ok("a_op", "GET", "/v1/actors/arcA/log?limit=1000")
    assert.are.equal(s.cursor, lg.head)
    for _, e in ipairs(lg.entries) do
      local b = cjson.encode(e.body)
      assert.is_nil(b:find("set by the caller", 1, true), "B's direction is in A's log")
      assert.is_nil(b:find("bravo", 1, true), b)
    end
    ok("a_agent", "POST", "/v1/sleep", { session_id = w.session_id })
    local code, out = mw(("log verify --home %s --tenant %s --actor arcA"):format(q(home), TA))
    assert.are.equal(0, code, out)
  end)
end)
