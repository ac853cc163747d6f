-- quotas_spec.lua -- per-tenant quotas (HOME/tenants/<t>/quotas.lua): actors,
-- log bytes and requests per second answer 429 quota_exceeded naming which,
-- and one tenant's spent quota does not touch another's calls.
local H = require "host"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function token(h, tenant, role)
  return H.sh(H.mw .. " token create --home " .. h.home .. " --tenant " .. tenant .. " --role " .. role):match("mw_%x+")
end

describe("quotas", function()
  local h, other
  before_each(function()
    h = H.start()
    h:stop(true)
    os.execute("mkdir -p " .. h.home .. "/tenants/tight")
    write(h.home .. "/tenants/tight/quotas.lua", "return { actors = 2, log_bytes = 300, rps = 1000 }")
    h = H.start({ home = h.home })
    h.agent = token(h, "tight", "agent")
    h.operator = token(h, "tight", "operator")
    other = token(h, "roomy", "agent")
  end)
  after_each(function() h:stop() end)

  it("a tenant past its actors quota gets 429 quota_exceeded with which = actors; existing actors still wake", function()
    for _, a in ipairs { "a1", "a2" } do
      local st, w = h:wake(a)
      assert.are.equal(200, st)
      h:post("/v1/run", { session_id = w.session_id, input = 1 })
      h:post("/v1/sleep", { session_id = w.session_id })
    end
    local st, e = h:wake("a3")
    assert.are.equal(429, st)
    assert.are.equal("quota_exceeded", e.error.code)
    assert.are.equal("actors", e.error.which)
    assert.are.equal(200, (h:wake("a1")))
    -- another tenant is not bound by it
    assert.are.equal(200, (h:wake("a3", nil, other)))
  end)

  it("a tenant past its log bytes gets 429 with which = log_bytes and nothing is written", function()
    local _, w = h:wake("big")
    local st = h:post("/v1/run", { session_id = w.session_id, input = string.rep("x", 400) })
    assert.are.equal(200, st)   -- the first run passes the limit...
    local st2, e = h:post("/v1/run", { session_id = w.session_id, input = "more" })
    assert.are.equal(429, st2)  -- ...and the next is refused
    assert.are.equal("log_bytes", e.error.which)
    local _, log = h:get("/v1/actors/big/log", h.operator)
    assert.are.equal(1, log.head)
  end)

  it("requests per second: a flood gets 429 with which = rps, and other tenants are served", function()
    h:stop(true)
    write(h.home .. "/tenants/tight/quotas.lua", "return { rps = 5 }")
    local h2 = H.start({ home = h.home })
    h2.agent, h2.operator = h.agent, h.operator
    h.pid = h2.pid
    local limited = 0
    for _ = 1, 30 do
      local st, e = h2:get("/v1/status", h2.operator)
      if st == 429 then
        limited = limited + 1
        assert.are.equal("rps", e.error.which)
      end
    end
    assert.is_true(limited > 0)
    assert.are.equal(200, (h2:wake("x", nil, other)))
    h2:stop(true)
  end)
end)
