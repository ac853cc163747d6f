-- sandbox_spec.lua -- the tenant's Lua sandbox against the escapes other Lua
-- hosts have met (Redis functions, OpenResty, HAProxy, game mods): bytecode,
-- globals reached through load, the shared string metatable, rawset on
-- library views, missing libraries, runaway loops, recursion and memory,
-- hostile error objects and results, pathological patterns, and secrets.
-- After every case the host is still serving, and so is another tenant.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"
local http = require "socket.http"
http.TIMEOUT = 20   -- a hung host fails the test, never the run

-- ---- helpers ------------------------------------------------------------------

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  os.execute("mkdir -p " .. q(path:match("^(.*)/[^/]*$")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- A fresh home with `files` in place, a second tenant "other" (agent token
-- h.other), and a host serving it with `args`.
local function serve(files, args)
  local home = os.tmpname()
  os.remove(home)
  local t = cjson.decode((H.sh(H.mw .. " init --home " .. q(home) .. " --json")))
  for path, text in pairs(files) do write(home .. "/" .. path, text) end
  local other = H.sh(H.mw .. " token create --home " .. q(home) .. " --tenant other --role agent"):match("mw_%x+")
  local h = H.start({ home = home, args = args })
  h.agent, h.operator, h.other = t.agent_token, t.operator_token, other
  return h
end

local function log_of(h, actor)
  local st, body = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return { entries = {}, head = 0 } end
  assert.are.equal(200, st)
  return body
end

local n_actor = 0
local function fresh_actor()
  n_actor = n_actor + 1
  return "sb" .. n_actor
end

-- Runs `skill` with `input` on a fresh actor of the default tenant, in its
-- own session (slept afterwards); returns status, answer, actor, raw answer,
-- and the seconds the run call took.
local function run(h, skill, input)
  local actor = fresh_actor()
  local st, w = h:wake(actor)
  assert.are.equal(200, st, "wake " .. actor .. ": " .. cjson.encode(w))
  local t0 = socket.gettime()
  local st2, r, raw = h:post("/v1/run", { session_id = w.session_id, skill = skill, input = input })
  local took = socket.gettime() - t0
  local st3 = h:post("/v1/sleep", { session_id = w.session_id })
  assert.are.equal(200, st3, "sleep " .. actor)
  return st2, r, actor, raw, took
end

-- The other tenant is served: wake, run its default skill, sleep.
local function other_tenant_served(h)
  local actor = fresh_actor()
  local st, w = h:wake(actor, nil, h.other)
  assert.are.equal(200, st, "the other tenant's wake")
  local st2, r = h:post("/v1/run", { session_id = w.session_id, input = { ping = true } }, h.other)
  assert.are.equal(200, st2, "the other tenant's run")
  assert.is_true(r.result.recorded)
  assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id }, h.other)))
end

local function side_conditions(h)
  assert.is_true(h:alive(), "the host died")
  local st = h:get("/healthz", false)
  assert.are.equal(200, st)
  other_tenant_served(h)
  -- and the tenant under attack still serves its plain skill
  local st2 = run(h, "default", { after = true })
  assert.are.equal(200, st2)
  local log = h:hostlog()
  assert.is_nil(log:match("AddressSanitizer"), log)
  assert.is_nil(log:match("runtime error"), log)
end

local function skill(name, body)
  return string.format("return { name = %q, description = %q,\n  run = function(ctx, input)\n%s\nend }\n",
    name, "sandbox probe " .. name, body)
end

local SK = "tenants/default/skills/"

-- ---- the main host ------------------------------------------------------------

local FILES = {
  [SK .. "bytecode.lua"] = skill("bytecode", [[
    local bytes = input:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    local r = { dump = type(string.dump), text = load("return 1 + 1")() }
    local f1, e1 = load(bytes)
    local f2, e2 = load(bytes, "=b", "b")
    local f3, e3 = load(bytes, "=bt", "bt", {})
    r.loaded = { type(f1), type(f2), type(f3) }
    r.errors = { tostring(e1), tostring(e2), tostring(e3) }
    return r]]),
  -- a file-level global lives in the file's own environment
  [SK .. "keeper.lua"] = [[
KEEPER_SECRET = "kept by keeper"
return { name = "keeper", description = "has a global of its own",
  run = function(ctx, input) return { mine = KEEPER_SECRET } end }]],
  [SK .. "prober.lua"] = skill("prober", [[
    local r = {}
    r.sees_keeper = load("return KEEPER_SECRET")() or "nil"
    r.own_sees_keeper = KEEPER_SECRET or "nil"
    load("LEAK_PLAIN = 'leaked'")()
    r.own_sees_plain = LEAK_PLAIN or "nil"
    -- reach through the chunk's environment for the globals every skill shares
    r.env_mt = load("return type(getmetatable(_ENV))")()
    pcall(load([=[
      local mt = getmetatable(_ENV)
      local G = type(mt) == "table" and mt.__index
      if type(G) == "table" then G.LEAK_VIA_ENV = "leaked" end
    ]=]))
    -- the same from the skill's own environment
    r.own_env_mt = type(getmetatable(_ENV))
    return r]]),
  [SK .. "checker.lua"] = skill("checker", [[
    return { plain = LEAK_PLAIN or "nil", via_env = LEAK_VIA_ENV or "nil",
             keeper = KEEPER_SECRET or "nil", rep = ("ab"):rep(2) }]]),
  [SK .. "meta.lua"] = skill("meta", [[
    local evil = function() return "evil" end
    local r = {}
    r.mt = tostring(getmetatable(""))
    r.assign = pcall(function() string.rep = evil end)
    r.rawset = pcall(rawset, string, "rep", evil)
    r.method = pcall(function() ("").rep = evil end)
    r.setmt = pcall(setmetatable, string, {})
    r.via_mt = pcall(function() getmetatable("").__index.rep = evil end)
    r.still = ("ab"):rep(2)
    return r]]),
  [SK .. "repuser.lua"] = skill("repuser", [[
    return { method = ("ab"):rep(3), lib = string.rep("x", 2), fmt = ("%d!"):format(7),
             upper = ("abc"):upper() }]]),
  [SK .. "views.lua"] = skill("views", [[
    local r = {}
    local libs = { string = string, table = table, math = math, utf8 = utf8,
                   coroutine = coroutine, json = json, os = os, cortex = cortex }
    for name, lib in pairs(libs) do
      local ok_raw = pcall(rawset, lib, "injected", 1)
      local ok_set = pcall(function() lib.injected = 1 end)
      local ok_mt = pcall(setmetatable, lib, nil)
      r[name] = { rawset = ok_raw, assign = ok_set, setmetatable = ok_mt,
                  mt = tostring(getmetatable(lib)), injected = lib.injected or "nil" }
    end
    local own = {}
    rawset(own, "k", "v")   -- rawset still works on a skill's own tables
    r.own = own.k
    r.works = table.concat({ "a", "b" }, "-") .. math.floor(2.5)
    return r]]),
  [SK .. "globals.lua"] = skill("globals", [[
    local names = { "package", "require", "loadfile", "dofile", "io", "debug", "print",
                    "collectgarbage", "_G", "module", "newproxy", "setfenv", "getfenv" }
    local r = { gone = {}, os = {} }
    for _, n in ipairs(names) do r.gone[n] = type(_ENV[n]) end
    for _, n in ipairs({ "execute", "exit", "getenv", "remove", "rename", "tmpname", "setlocale" }) do
      r.os[n] = type(os[n])
    end
    r.dump = type(string.dump)
    warn("@on")
    warn("WARNING-FROM-A-SKILL")   -- no output the host's log would carry
    r.kept = { type(os.time), type(os.clock), type(os.date), type(os.difftime) }
    return r]]),
  [SK .. "spin.lua"] = skill("spin", [[
    ctx.stage("note", { before = "spin" })
    if input == "plain" then while true do end end
    if input == "pcall" then
      while true do pcall(function() while true do end end) end
    end
    if input == "coroutine" then
      local co = coroutine.wrap(function() while true do end end)
      co()
    end
    if input == "coroutine_pcall" then
      local co = coroutine.create(function() while true do pcall(function() while true do end end) end end)
      return { coroutine.resume(co) }
    end
    if input == "coroutine_then_pcall" then
      -- the stop lands in a coroutine, which dies of it; then the skill swallows it in a loop
      local co = coroutine.create(function() while true do end end)
      coroutine.resume(co)
      while true do pcall(function() while true do end end) end
    end]]),
  [SK .. "rec.lua"] = skill("rec", [[
    ctx.stage("note", { before = "recursion" })
    if input == "lua" then
      local function f(n) return 1 + f(n + 1) end
      return f(1)
    end
    if input == "gsub" then
      local function r(s) return (s:gsub(".", r)) end
      return r("x")
    end
    if input == "tostring" then
      local t
      t = setmetatable({}, { __tostring = function() return tostring(t) end })
      return tostring(t)
    end]]),
  [SK .. "bomb.lua"] = skill("bomb", [[
    ctx.stage("note", { before = "bomb" })
    if input == "table" then
      local t = {}
      for i = 1, 1e9 do t[i] = i end
    end
    if input == "rep" then
      local s = string.rep("x", 16 * 1024 * 1024)
      local parts = {}
      for i = 1, 64 do parts[i] = s .. i end
    end
    if input == "rep_over" then
      return #string.rep("x", 16 * 1024 * 1024 + 1)
    end
    if input == "rep_sep" then
      return #string.rep("xx", 8 * 1024 * 1024, "y")
    end
    if input == "pcall" then
      local ok = pcall(function() local t = {} for i = 1, 1e9 do t[i] = { i } end end)
      return { survived = ok }
    end]]),
  [SK .. "errs.lua"] = skill("errs", [[
    ctx.stage("note", { before = "error" })
    if input == "table" then error({ code = 7 }) end
    if input == "nil" then error(nil) end
    if input == "tostring" then
      error(setmetatable({}, { __tostring = function() return "custom message from __tostring" end }))
    end
    if input == "tostring_raises" then
      error(setmetatable({}, { __tostring = function() error("raised inside __tostring") end }))
    end
    if input == "tostring_table" then
      error(setmetatable({}, { __tostring = function() return {} end }))
    end
    if input == "function" then return function() end end
    if input == "cyclic" then
      local t = {}
      t.self = t
      return t
    end
    if input == "ctx" then return ctx end]]),
  [SK .. "pat.lua"] = skill("pat", [[
    local subject = ("a"):rep(5000)
    if input == "find" then return { string.find(subject, ("a*"):rep(20) .. "b") } end
    if input == "method" then return { subject:match(("a*"):rep(20) .. "b") } end
    if input == "gsub" then return { subject:gsub(("a-"):rep(13) .. "b", "") } end
    if input == "gmatch" then for _ in subject:gmatch(("a?"):rep(13) .. "b") do end return {} end
    if input == "long" then return { subject:find(("a"):rep(513)) } end
    if input == "big" then return { (("a"):rep(1024 * 1024 + 1)):find("b", 1, true) } end
    if input == "slow" then
      -- within every bound (one quantifier, 30,000 bytes), and quadratic
      return { (("a"):rep(30000)):find("a*b") }
    end
    if input == "escaped" then
      -- %* is a literal star, not a quantifier: twenty of them are fine
      return { ("*"):rep(20):find(("%*"):rep(20)) }
    end]]),
  [SK .. "usekey.lua"] = skill("usekey", [[
    return { value = ctx.secret("api_key") or "nil", quoted = ctx.secret("quoted") or "nil",
             traversal = ctx.secret("../../other/secrets/api_key") or "nil",
             missing = ctx.secret("nope") or "nil" }]]),
  [SK .. "leak.lua"] = skill("leak", [[
    local s = ctx.secret(input.secret or "api_key")
    if input.how == "stage" then ctx.stage("note", { token = s }) end
    if input.how == "remember" then ctx.remember("k", "Bearer " .. s .. " (copied)") end
    if input.how == "key" then ctx.stage("note", { [s] = true }) end
    if input.how == "fact" then
      ctx.fact({ node = { key = "svc", kind = "service", label = "a service", props = { key = s } } })
    end
    return { staged = true }]]),
  ["tenants/default/secrets/api_key"] = "sk_live_4f9a2b7c1d9e\n",
  ["tenants/default/secrets/quoted"] = 'pa"ss\\w/rd\t42',
  ["tenants/other/skills/usekey.lua"] = skill("usekey", [[
    return { value = ctx.secret("api_key") or "nil",
             traversal = ctx.secret("../../default/secrets/api_key") or "nil" }]]),
}

local SECRET = "sk_live_4f9a2b7c1d9e"

describe("the sandbox", function()
  local h
  setup(function()
    h = serve(FILES, "--skill-time 1000 --tenant-memory 33554432")
  end)
  teardown(function() if h then h:stop() end end)
  after_each(function() side_conditions(h) end)

  it("string.dump is gone and bytecode does not load, whatever the mode", function()
    local bytes = string.dump(function() return 42 end)
    assert.are.equal("\27Lua", bytes:sub(1, 4))
    local hex = bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    local st, r = run(h, "bytecode", hex)
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.equal("nil", r.result.dump)
    assert.are.equal(2, r.result.text)
    assert.are.same({ "nil", "nil", "nil" }, r.result.loaded)
    for _, e in ipairs(r.result.errors) do assert.is_truthy(e:match("binary chunk"), e) end
  end)

  it("a chunk loaded without env neither sees nor changes another skill's globals (regression: its env's metatable reached them)", function()
    assert.are.same({ mine = "kept by keeper" }, (select(2, run(h, "keeper"))).result)
    local st, r = run(h, "prober")
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.equal("nil", r.result.sees_keeper)
    assert.are.equal("nil", r.result.own_sees_keeper)
    assert.are.equal("nil", r.result.own_sees_plain)
    assert.are.equal("boolean", r.result.own_env_mt)   -- a skill's own env: metatable hidden
    local st2, c = run(h, "checker")
    assert.are.equal(200, st2)
    assert.are.equal("nil", c.result.plain)
    assert.are.equal("nil", c.result.keeper)
    -- regression: load's fresh environment exposed its metatable, and through
    -- __index the globals every skill of the tenant shares
    assert.are.equal("nil", c.result.via_env, "a loaded chunk wrote a global other skills see")
    assert.are_not.equal("table", r.result.env_mt, "getmetatable(_ENV) in a loaded chunk is the real one")
  end)

  it("the shared string metatable is hidden and string.rep cannot be replaced for other skills", function()
    local st, r = run(h, "meta")
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.equal("false", r.result.mt)
    assert.is_false(r.result.assign)
    assert.is_false(r.result.rawset)
    assert.is_false(r.result.method)
    assert.is_false(r.result.setmt)
    assert.is_false(r.result.via_mt)
    assert.are.equal("abab", r.result.still)
    local st2, u = run(h, "repuser")
    assert.are.equal(200, st2)
    assert.are.same({ method = "ababab", lib = "xx", fmt = "7!", upper = "ABC" }, u.result)
  end)

  it("rawset, assignment and setmetatable all refuse the read-only library views", function()
    local st, r = run(h, "views")
    assert.are.equal(200, st, cjson.encode(r))
    for _, name in ipairs { "string", "table", "math", "utf8", "coroutine", "json", "os", "cortex" } do
      local v = r.result[name]
      assert.are.same({ rawset = false, assign = false, setmetatable = false, mt = "false", injected = "nil" }, v, name)
    end
    assert.are.equal("v", r.result.own)
    assert.are.equal("a-b2", r.result.works)
  end)

  it("package, require, loadfile, dofile, io, debug, os.execute, os.exit ... are nil", function()
    local st, r = run(h, "globals")
    assert.are.equal(200, st, cjson.encode(r))
    for name, t in pairs(r.result.gone) do assert.are.equal("nil", t, name) end
    for name, t in pairs(r.result.os) do assert.are.equal("nil", t, "os." .. name) end
    assert.are.equal("nil", r.result.dump)
    assert.are.same({ "function", "function", "function", "function" }, r.result.kept)
    assert.is_nil(h:hostlog():find("WARNING-FROM-A-SKILL", 1, true))
  end)

  for _, how in ipairs { "plain", "pcall", "coroutine", "coroutine_pcall" } do
    it("an infinite loop (" .. how .. ") is 503 skill_timeout within the budget, nothing committed", function()
      local st, e, actor, _, took = run(h, "spin", how)
      assert.are.equal(503, st, cjson.encode(e))
      assert.are.equal("skill_timeout", e.error.code)
      assert.is_true(took < 5, "took " .. took .. " s")
      assert.are.equal(0, log_of(h, actor).head)
    end)
  end

  for _, how in ipairs { "lua", "gsub", "tostring" } do
    it("deep recursion (" .. how .. ") is 422 with a clear message, nothing committed", function()
      local st, e, actor = run(h, "rec", how)
      assert.are.equal(422, st, cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      -- the stack overflows, or the stack's growth meets the tenant's memory cap first
      local m = e.error.message
      assert.is_truthy(m:match("stack overflow") or m:match("the tenant's memory cap was reached"), m)
      assert.are.equal(0, log_of(h, actor).head)
    end)
  end

  it("memory bombs are 422 naming the cap or the bound, nothing committed, the other tenant served throughout", function()
    -- a second process keeps the other tenant busy while the bombs go off
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. q(dir))
    local child = dir .. "/child.lua"
    write(child, [[
local http = require "socket.http"
local ltn12 = require "ltn12"
local url, token, out, stop = arg[1], arg[2], arg[3], arg[4]
http.TIMEOUT = 30
local function post(path, body)
  local chunks = {}
  local _, st = http.request { url = url .. path, method = "POST",
    headers = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json",
                ["Content-Length"] = tostring(#body) },
    source = ltn12.source.string(body), sink = ltn12.sink.table(chunks) }
  return st, table.concat(chunks)
end
local f = assert(io.open(out, "w"))
f:setvbuf("line")
local i = 0
while not io.open(stop) and i < 400 do
  i = i + 1
  local st1, w = post("/v1/wake", '{"actor_id":"bg' .. i .. '"}')
  local sid = w:match('"session_id":"([^"]+)"') or "none"
  local st2 = post("/v1/run", '{"session_id":"' .. sid .. '","input":' .. i .. '}')
  local st3 = post("/v1/sleep", '{"session_id":"' .. sid .. '"}')
  f:write(st1, " ", st2, " ", st3, "\n")
end
f:write("done\n")
f:close()
]])
    local out, stop = dir .. "/out", dir .. "/stop"
    os.execute(string.format("lua5.4 %s %s %s %s %s >/dev/null 2>&1 &", q(child), q(h.url), q(h.other), q(out), q(stop)))
    local deadline = socket.gettime() + 5
    while not read(out):match("\n") and socket.gettime() < deadline do socket.sleep(0.02) end

    local messages = {}
    for _, how in ipairs { "table", "rep", "pcall" } do
      local st, e, actor = run(h, "bomb", how)
      assert.are.equal(422, st, how .. ": " .. cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      assert.is_truthy(e.error.message:match("memory cap"), how .. ": " .. e.error.message)
      assert.are.equal(0, log_of(h, actor).head)
      messages[#messages + 1] = e.error.message
    end
    for _, how in ipairs { "rep_over", "rep_sep" } do
      local st, e, actor = run(h, "bomb", how)
      assert.are.equal(422, st, how .. ": " .. cjson.encode(e))
      assert.is_truthy(e.error.message:match("string.rep result over 16777216 bytes"), e.error.message)
      assert.are.equal(0, log_of(h, actor).head)
    end

    write(stop, "")
    deadline = socket.gettime() + 20
    while not read(out):match("done\n") and socket.gettime() < deadline do socket.sleep(0.05) end
    local lines = read(out)
    os.execute("rm -rf " .. q(dir))
    assert.is_truthy(lines:match("done\n"), "the other tenant's client did not finish: " .. lines)
    local cycles = 0
    for line in lines:gmatch("[^\n]+") do
      if line ~= "done" then
        cycles = cycles + 1
        assert.are.equal("200 200 200", line)
      end
    end
    assert.is_true(cycles >= 2, "the other tenant was served during the bombs (" .. cycles .. " cycles)")
    -- the same tenant recovers its memory: a plain run answers
    assert.are.equal(200, (run(h, "default", 1)))
  end)

  for _, c in ipairs {
    { "table", "%(error object is a table value%)" },
    { "nil", "%(error object is a nil value%)" },
    { "tostring", "custom message from __tostring" },
    { "tostring_raises", "raised inside __tostring", "an error object that cannot be described" },
    { "tostring_table", "%(error object is a table value%)" },
  } do
    it("an error object (" .. c[1] .. ") is 422 with a readable message, nothing committed", function()
      local st, e, actor = run(h, "errs", c[1])
      assert.are.equal(422, st, cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      local m = e.error.message
      assert.is_truthy(m:match(c[2]) or (c[3] and m:match(c[3])), m)
      assert.are.equal(0, log_of(h, actor).head)
    end)
  end

  for _, c in ipairs {
    { "function", "cannot encode function" },
    { "cyclic", "nesting deeper than 256" },
    { "ctx", "cannot encode function" },
  } do
    it("a skill returning a " .. c[1] .. " value is 422 naming the skill, nothing committed", function()
      local st, e, actor = run(h, "errs", c[1])
      assert.are.equal(422, st, cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      assert.is_truthy(e.error.message:match("skill errs returned a value that is not JSON"), e.error.message)
      assert.is_truthy(e.error.message:match(c[2]), e.error.message)
      assert.is_true(#e.error.message < 2000)
      assert.are.equal(0, log_of(h, actor).head)
    end)
  end

  for _, c in ipairs {
    { "find", "could backtrack past" },
    { "method", "could backtrack past" },
    { "gsub", "could backtrack past" },
    { "gmatch", "could backtrack past" },
    { "long", "pattern over 512 bytes" },
    { "big", "pattern subject over 1048576 bytes" },
  } do
    it("a pathological pattern (" .. c[1] .. ") is refused by the bound at once, not run", function()
      local st, e, _, _, took = run(h, "pat", c[1])
      assert.is_true(took < 1, "took " .. took .. " s")
      assert.are.equal(422, st, cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      assert.is_truthy(e.error.message:match(c[2]), e.error.message)
    end)
  end

  it("a one-quantifier pattern over 30,000 bytes is refused before it runs (regression: it held the loop 3 s and committed)", function()
    local st, e, actor, _, took = run(h, "pat", "slow")
    assert.is_true(took < 1, "took " .. took .. " s")
    assert.are.equal(422, st, cjson.encode(e))
    assert.is_truthy(e.error.message:match("could backtrack past"), e.error.message)
    assert.are.equal(0, log_of(h, actor).head, "a refused run committed")
  end)

  it("escaped specials are not counted as quantifiers", function()
    local st, r = run(h, "pat", "escaped")
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.same({ 1, 20 }, r.result)
  end)

  it("a secret is readable by its tenant's skills only", function()
    local st, r = run(h, "usekey")
    assert.are.equal(200, st, cjson.encode(r))
    assert.are.equal(SECRET, r.result.value)   -- echo's trailing newline dropped
    assert.are.equal('pa"ss\\w/rd\t42', r.result.quoted)
    assert.are.equal("nil", r.result.traversal)
    assert.are.equal("nil", r.result.missing)
    local _, w = h:wake("peek", nil, h.other)
    local st2, o = h:post("/v1/run", { session_id = w.session_id, skill = "usekey" }, h.other)
    assert.are.equal(200, st2, cjson.encode(o))
    assert.are.same({ value = "nil", traversal = "nil" }, o.result)
    h:post("/v1/sleep", { session_id = w.session_id }, h.other)
  end)

  it("a skill that stages the secret's value is 422 and nothing of it reaches the log", function()
    for _, input in ipairs {
      { how = "stage" }, { how = "remember" }, { how = "key" }, { how = "fact" },
      { how = "stage", secret = "quoted" }, { how = "remember", secret = "quoted" },
    } do
      local st, e, actor = run(h, "leak", input)
      local what = cjson.encode(input)
      assert.are.equal(422, st, what .. ": " .. cjson.encode(e))
      assert.are.equal("skill_error", e.error.code)
      assert.is_truthy(e.error.message:match("secret '" .. (input.secret or "api_key") .. "'"), e.error.message)
      assert.is_nil(e.error.message:find(SECRET, 1, true))
      assert.are.equal(0, log_of(h, actor).head, what)
    end
    -- the bytes of the store, and the host's own log
    for _, f in ipairs { "/mw.db", "/mw.db-wal", "/tenants/default/cortex.db", "/tenants/default/cortex.db-wal" } do
      local bytes = read(h.home .. f)
      assert.is_nil(bytes:find(SECRET, 1, true), f)
      assert.is_nil(bytes:find('pa\\"ss\\\\w/rd\\t42', 1, true), f)
    end
    assert.is_nil(h:hostlog():find(SECRET, 1, true))
  end)
end)

-- ---- the JSON metatables ----------------------------------------------------
-- Every decoded array and object of a tenant (ctx.state, input, Waking's own
-- reads) shares two metatables.  Its own host: a failure poisons the tenant.

describe("the JSON metatables", function()
  it("cannot be changed by one skill under the others and Waking (regression: a changed __index broke every wake)", function()
    local h = serve({
      [SK .. "tamper.lua"] = skill("tamper", [[
        local r = {}
        r.array_mt = tostring(getmetatable(json.array {}))
        r.array = pcall(function() getmetatable(json.array {}).__index = function() return "injected" end end)
        r.object = pcall(function()
          getmetatable(json.object {}).__newindex = function() error("writes blocked by tamper") end
        end)
        return r]]),
      [SK .. "victim.lua"] = skill("victim", [[
        local list, obj = input.list, input.obj
        local ok, err = pcall(function() obj.x = 1 end)
        return { beyond = list[3] == nil, n = #list, write = ok or tostring(err) }]]),
    }, "--skill-time 1000")
    local ok, err = pcall(function()
      local st, t = run(h, "tamper")
      assert.are.equal(200, st, cjson.encode(t))
      local st2, v = run(h, "victim", { list = { 1, 2 }, obj = {} })
      assert.are.equal(200, st2, cjson.encode(v))
      assert.are.same({ beyond = true, n = 2, write = true }, v.result)
      local st3, w = h:wake("after_tamper")
      assert.are.equal(200, st3, "Waking after the tamper: " .. cjson.encode(w))
      assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id })))
      side_conditions(h)
    end)
    h:stop()
    assert(ok, err)
  end)
end)

-- ---- a stop that lands in a coroutine ------------------------------------------
-- Its own host: when this fails the host's loop is stuck and it must be killed.

describe("the budget stop", function()
  it("still stops a skill that swallows it with pcall in a loop after a coroutine died of it (regression: the loop was held for good)", function()
    local h = serve({ [SK .. "spin.lua"] = FILES[SK .. "spin.lua"] }, "--skill-time 500")
    local old = http.TIMEOUT
    http.TIMEOUT = 5
    local actor = fresh_actor()
    local st, w = h:wake(actor)
    assert.are.equal(200, st)
    local t0 = socket.gettime()
    local st2, e = h:post("/v1/run", { session_id = w.session_id, skill = "spin", input = "coroutine_then_pcall" })
    local took = socket.gettime() - t0
    local healthy = type(st2) == "number" and (h:get("/healthz", false)) == 200
    http.TIMEOUT = old
    local served = healthy and pcall(other_tenant_served, h)
    if not healthy then h:signal("KILL") end
    local log = h:hostlog()
    h:stop()
    assert.are.equal(503, st2, string.format("answer %s after %.1f s (%s); host log tail: %s",
      tostring(st2), took, cjson.encode(e), log:sub(-400)))
    assert.are.equal("skill_timeout", e.error.code)
    assert.is_true(healthy)
    assert.is_true(served, "the other tenant was not served afterwards")
  end)
end)

-- ---- the guard's other ways out ---------------------------------------------
-- A secret reaches the log by more roads than ctx.stage's body; each of these
-- once carried one there.

describe("the secret guard's other roads (regressions: a kind, a skill entry's handover, ctx.call's input)", function()
  local h
  before_each(function()
    h = serve({
      [SK .. "kind.lua"] = skill("kind", [[ctx.stage(ctx.secret("api_key"), { x = 1 }) return {}]]),
      [SK .. "hand.lua"] = skill("hand", [[return { handover = { token = ctx.secret("api_key") } }]]),
      [SK .. "caller.lua"] = skill("caller", [[ctx.call("callee", "default", { k = ctx.secret("api_key") }) return {}]]),
      ["tenants/default/secrets/api_key"] = SECRET,
    }, "--skill-time 1000")
  end)
  after_each(function()
    if not h then return end
    local ok, err = pcall(side_conditions, h)
    h:stop()
    h = nil
    assert(ok, err)
  end)

  local function nowhere(h, actor)
    local log = log_of(h, actor)
    assert.is_nil(cjson.encode(log):find(SECRET, 1, true), "the secret is in " .. actor .. "'s log")
    for _, f in ipairs { "/mw.db", "/mw.db-wal" } do
      assert.is_nil(read(h.home .. f):find(SECRET, 1, true), "the secret is in " .. f)
    end
    assert.is_nil(h:hostlog():find(SECRET, 1, true), "the secret is in the host log")
  end

  it("a secret used as an entry kind is refused, as in a body", function()
    local st, e, actor = run(h, "kind")
    nowhere(h, actor)
    assert.are.equal(422, st, cjson.encode(e))
    assert.are.equal(0, log_of(h, actor).head)
  end)

  it("a secret in the handover a skill entry sleeps with never reaches the log", function()
    local st, r = h:post("/v1/actors/entry/skills/hand", { input = 1 }, h.operator)
    nowhere(h, "entry")
    assert.are.equal(422, st, cjson.encode(r))
  end)

  it("a secret passed as ctx.call's input never reaches the callee's log", function()
    local st, r = run(h, "caller")
    socket.sleep(0.3)
    nowhere(h, "callee")
    assert.are.equal(422, st, cjson.encode(r))
  end)
end)
