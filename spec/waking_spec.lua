-- waking_spec.lua -- Waking against a real host: the boot packet's four legs,
-- determinism across processes, facts in the Cortex (provenance, supersession,
-- trust, retraction), the Cortex's degrade modes and their recovery, rebuild
-- == live, the sweep's cursor, hostile hints and /v1/navigate.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"

local DEFAULT = "/tenants/default"

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A shell command; returns exit code, output (stdout and stderr).
local function sh(cmd)
  local out, code = H.sh(cmd)
  return code, out
end

-- ---- raw JSON members --------------------------------------------------------
-- The API answers canonical JSON (no whitespace), so a member's raw bytes can be
-- cut out of the response by walking it, strings respected.

local function skip(s, i)   -- i at a value's first byte; returns the index after it
  local c = s:sub(i, i)
  if c == '"' then
    local j = i + 1
    while true do
      local k = s:find('[\\"]', j)
      assert(k, "unterminated string")
      if s:sub(k, k) == "\\" then j = k + 2 else return k + 1 end
    end
  elseif c == "{" or c == "[" then
    local depth, j = 0, i
    while true do
      local k = s:find('[{}%[%]"]', j)
      assert(k, "unterminated container")
      local ch = s:sub(k, k)
      if ch == '"' then
        j = skip(s, k)
      else
        depth = depth + ((ch == "{" or ch == "[") and 1 or -1)
        j = k + 1
        if depth == 0 then return j end
      end
    end
  end
  return (s:find("[,}%]]", i))
end

-- The raw text of obj[key] (obj: the raw text of an object), or nil.
local function member(obj, key)
  assert(obj and obj:sub(1, 1) == "{", "not an object")
  local i = 2
  while obj:sub(i, i) ~= "}" do
    local kend = skip(obj, i)
    local k = obj:sub(i + 1, kend - 2)
    local vend = skip(obj, kend + 1)
    if k == key then return obj:sub(kend + 1, vend - 1) end
    i = vend
    if obj:sub(i, i) == "," then i = i + 1 end
  end
end

local function path(raw, ...)
  local v = raw
  for _, k in ipairs { ... } do
    v = member(v, k)
    if not v then return nil end
  end
  return v
end

-- ---- the host and its skills -------------------------------------------------

-- facts: stages what `input.facts` lists (ctx.fact), promotes `input.promote`
-- (ctx.promote), and navigates with `input.nav` (ctx.cortex.navigate).
local SKILLS = {
  ["facts.lua"] = [[
return {
  name = "facts",
  description = "stages facts, promotes keys, navigates the Cortex",
  run = function(ctx, input)
    input = input or {}
    local n = 0
    for _, f in ipairs(input.facts or {}) do ctx.fact(f); n = n + 1 end
    for _, k in ipairs(input.promote or {}) do ctx.promote(k); n = n + 1 end
    local out = { staged = n }
    if input.nav then
      local res, why, status = ctx.cortex.navigate(input.nav)
      if res then out.nav = res else out.nav = { status = status, reason = why } end
    end
    return out
  end,
}
]],
}

local hosts = {}   -- every host a test started, stopped in after_each
local extra = {}   -- extra paths to remove

-- A host on an existing home (the tokens are the home's); the home is
-- removed after the test even when the host fails to start.
local function start_on(home, like)
  local ok, h = pcall(H.start, { home = home })
  if not ok then
    for _, p in ipairs { home, home .. ".out", home .. ".log", home .. ".exit" } do extra[#extra + 1] = p end
    error(h, 2)
  end
  h.agent, h.operator = like.agent, like.operator
  hosts[#hosts + 1] = h
  return h
end

-- A host on a fresh home whose tenant `default` has the spec's skills.
local function start_host()
  local h0 = H.start()
  h0:stop(true)
  local dir = h0.home .. DEFAULT .. "/skills"
  os.execute("mkdir -p " .. q(dir))
  for name, src in pairs(SKILLS) do write(dir .. "/" .. name, src) end
  return start_on(h0.home, h0)
end

-- A copy of h's home (the host must not be running), with its own cleanup.
local function copy_home(h, suffix)
  local dst = h.home .. "-" .. suffix
  local code, out = sh("cp -a " .. q(h.home) .. " " .. q(dst))
  assert(code == 0, out)
  extra[#extra + 1] = dst
  return dst
end

local function wake(h, actor, body)
  local b = { actor_id = actor }
  for k, v in pairs(body or {}) do b[k] = v end
  local st, w, raw = h:post("/v1/wake", b)
  assert(st == 200, "wake " .. actor .. ": " .. tostring(st) .. " " .. tostring(raw))
  return w, raw
end

local function run(h, sid, input, skill)
  local st, r, raw = h:post("/v1/run", { session_id = sid, skill = skill or "facts", input = input })
  assert(st == 200, "run: " .. tostring(st) .. " " .. tostring(raw))
  return r
end

local function sleep(h, sid, handover)
  local st, s, raw = h:post("/v1/sleep", { session_id = sid, handover = handover })
  assert(st == 200, "sleep: " .. tostring(st) .. " " .. tostring(raw))
  return s
end

local function navigate(h, sid, body)
  local b = { session_id = sid }
  for k, v in pairs(body or {}) do b[k] = v end
  return h:post("/v1/navigate", b)
end

local function node(key, kind, label) return { node = { key = key, kind = kind, label = label } } end
local function edge(from, rel, to) return { edge = { from = from, rel = rel, to = to } } end

local function find(list, pred)
  for _, x in ipairs(list or {}) do
    if pred(x) then return x end
  end
end
local function by_key(list, key) return find(list, function(n) return n.key == key end) end
local function keys(list)
  local t = {}
  for _, n in ipairs(list) do t[#t + 1] = n.key end
  table.sort(t)
  return t
end

local function log_of(h, actor)
  local st, body = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return { entries = {}, head = 0 } end
  assert(st == 200, "log: " .. tostring(st))
  return body
end

local function metric(h, name)
  local st, _, raw = h:get("/metrics", false)
  assert(st == 200)
  return tonumber(raw:match("\n" .. name .. " (%d+)") or raw:match("^" .. name .. " (%d+)"))
end

local function healthz(h)
  local st, b = h:get("/healthz", false)
  assert(st == 200)
  return b
end

local function cortex_path(h) return h.home .. DEFAULT .. "/cortex.db" end

local function remove_cortex(h)
  local p = cortex_path(h)
  os.remove(p)
  os.remove(p .. "-wal")
  os.remove(p .. "-shm")
end

-- A consistent copy of the live Cortex (the backup API takes the WAL along).
local function backup_cortex(h)
  local dst = os.tmpname()
  os.remove(dst)
  extra[#extra + 1] = dst
  local code, out = sh("sqlite3 " .. q(cortex_path(h)) .. " " .. q(".backup " .. dst))
  assert(code == 0, out)
  return dst
end

local function cli(args)
  return sh(H.mw .. " " .. args)
end

local function dump(home)
  local code, out = cli("cortex dump --home " .. q(home) .. " --tenant default")
  assert(code == 0, "dump: " .. out)
  return out
end

local function rebuild(home)
  return cli("cortex rebuild --home " .. q(home) .. " --tenant default")
end

-- Sleeps every open session of the tenant (after a restart, say).
local function sleep_all(h)
  local st, s = h:get("/v1/status", h.operator)
  assert(st == 200, "status " .. tostring(st))
  for _, x in ipairs(s.sessions or {}) do sleep(h, x.session_id) end
end

-- A wake's briefing.corpus, raw, on two hosts.
local function corpus_raw(raw) return path(raw, "boot_packet", "briefing", "corpus") end

describe("Waking", function()
  before_each(function()
    hosts, extra = {}, {}
  end)
  after_each(function()
    local aborted = {}
    for _, h in ipairs(hosts) do
      h:stop(true)
      local code = H.read_file(h.exitfile)
      local log = h:hostlog()
      -- side condition: no host ended by a signal other than the KILL a test sent
      if code and (tonumber(code:match("%d+")) or 0) > 128 and tonumber(code:match("%d+")) ~= 137 then
        aborted[#aborted + 1] = "host on " .. h.home .. " exited " .. code .. ":\n" .. log
      end
      if log:match("AddressSanitizer") then aborted[#aborted + 1] = log end
      h:stop()
    end
    for _, p in ipairs(extra) do os.execute("chmod -R u+rw " .. q(p) .. " 2>/dev/null; rm -rf " .. q(p)) end
    assert(#aborted == 0, table.concat(aborted, "\n"))
  end)

  -- ---- the boot packet ------------------------------------------------------

  it("the boot packet carries the four legs, and sources is never empty (fresh, and after activity)", function()
    local h = start_host()
    local w, raw = wake(h, "fresh")
    local b = w.boot_packet.briefing
    for _, leg in ipairs { "direction", "sources", "corpus", "facts" } do
      assert.is_not_nil(b[leg], leg)
      assert.is_not_nil(path(raw, "boot_packet", "briefing", leg), leg)
    end
    assert.is_table(b.sources)
    assert.is_true(#b.sources >= 1)
    for _, s in ipairs(b.sources) do
      assert.is_string(s.id)
      assert.is_string(s.locator)
      assert.is_string(s.does)
      assert.is_table(s.subjects)
      assert.is_not_nil(s.feedback)
    end
    assert.are.equal("live", b.facts.status)
    assert.is_table(b.facts.nodes)
    assert.is_table(b.facts.edges)
    assert.are.equal(0, b.corpus.entries)
    -- after activity
    run(h, w.session_id, { facts = { node("proj:waking", "project", "the Waking primitive") } })
    run(h, w.session_id, { remember = { key = "k", value = 1 } }, "default")
    sleep(h, w.session_id, { next = "more" })
    local w2 = wake(h, "fresh", { context_hint = "Waking" })
    local b2 = w2.boot_packet.briefing
    assert.is_true(#b2.sources >= 1)
    assert.is_string(b2.sources[1].id)
    assert.are.equal(w2.boot_packet.cursor, b2.corpus.entries)
    assert.are.equal(w2.boot_packet.cursor, b2.corpus.swept_to)
    assert.are.equal("live", b2.facts.status)
  end)

  it("direction shows the operator's direction with who and when", function()
    local h = start_host()
    local dir = { goal = "ship Waking", themes = { "cortex", "sweep" } }
    local st, e = h:post("/v1/actors/arc/direction", { direction = dir })   -- agent token
    assert.are.equal(403, st)
    assert.are.equal("forbidden", e.error.code)
    local st2, d = h:post("/v1/actors/arc/direction", { direction = dir }, h.operator)
    assert.are.equal(200, st2)
    assert.is_number(d.cursor)
    local log = log_of(h, "arc")
    local entry = log.entries[d.cursor]
    assert.are.equal("direction", entry.kind)
    local w = wake(h, "arc")
    local dl = w.boot_packet.briefing.direction
    assert.are.same(dir, dl.current)
    assert.is_table(dl.set)
    assert.are.equal("operator", dl.set.by)
    assert.are.equal(d.cursor, dl.set.cursor)
    assert.are.equal(entry.ts, dl.set.ts)
  end)

  it("the same log, Cortex, fold and request give the same state and briefing bytes in two processes", function()
    local h = start_host()
    h:post("/v1/actors/arc/direction", { direction = { goal = "map the architecture" } }, h.operator)
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = {
      node("adr:waking", "decision", "Waking is a state: briefing plus Cortex navigation"),
      node("adr:graph", "decision", "the graph is mandatory; the log stays the truth"),
      edge("adr:waking", "refines", "adr:graph"),
    } })
    run(h, w.session_id, { remember = { key = "focus", value = "architecture" } }, "default")
    run(h, w.session_id, { facts = { node("adr:waking", "decision", "Waking: the state of coming online") },
      promote = { "adr:graph" } })
    sleep(h, w.session_id, { next = "read the architecture decisions" })
    local w2 = wake(h, "scout")
    run(h, w2.session_id, { facts = { node("src:repo", "source", "the architecture repository"),
      edge("src:repo", "documents", "adr:waking") } })
    sleep(h, w2.session_id)
    h:stop(true)
    local copy = copy_home(h, "b")
    local a = start_on(h.home, h)
    local b = start_on(copy, h)
    local req = { actor_id = "arc", profile = "builder", context_hint = "architecture decisions Waking graph" }
    local sta, _, rawa = a:post("/v1/wake", req)
    local stb, _, rawb = b:post("/v1/wake", req)
    assert.are.equal(200, sta)
    assert.are.equal(200, stb)
    local sa, sb = path(rawa, "boot_packet", "state"), path(rawb, "boot_packet", "state")
    local ba, bb = path(rawa, "boot_packet", "briefing"), path(rawb, "boot_packet", "briefing")
    assert.is_truthy(sa)
    assert.is_truthy(ba)
    assert.are.equal(sa, sb)
    assert.are.equal(ba, bb)
    -- and the briefing did navigate something
    local facts = cjson.decode(ba).facts
    assert.are.equal("live", facts.status)
    assert.is_truthy(by_key(facts.nodes, "adr:waking"))
  end)

  -- ---- facts ----------------------------------------------------------------

  it("facts a skill asserts are navigable after the run, and the briefing shows them with provenance", function()
    local h = start_host()
    local w = wake(h, "arc")
    local r = run(h, w.session_id, { facts = {
      node("proj:cortex", "project", "Cortex knowledge graph"),
      node("person:voz", "person", "Voz the ratifier"),
      edge("person:voz", "ratifies", "proj:cortex"),
    } })
    assert.are.equal(4, r.committed)
    local st, n = navigate(h, w.session_id, { hint = "knowledge graph" })
    assert.are.equal(200, st)
    assert.are.equal("live", n.status)
    local got = by_key(n.nodes, "proj:cortex")
    assert.is_truthy(got)
    assert.is_truthy(find(n.edges, function(e)
      return e.from == "person:voz" and e.rel == "ratifies" and e.to == "proj:cortex"
    end))
    sleep(h, w.session_id)

    local w2 = wake(h, "arc", { context_hint = "Cortex knowledge graph" })
    local f = w2.boot_packet.briefing.facts
    assert.are.equal("live", f.status)
    local nd = by_key(f.nodes, "proj:cortex")
    assert.is_truthy(nd, "the hinted node is in the briefing")
    assert.are.equal("project", nd.kind)
    assert.are.equal("Cortex knowledge graph", nd.label)
    assert.are.equal("arc", nd.actor)
    assert.is_number(nd.cursor)
    assert.are.equal("claim", nd.trust)
    assert.are.equal(cjson.null, nd.valid_to)
    local entry = log_of(h, "arc").entries[nd.cursor]
    assert.are.equal("fact", entry.kind)
    assert.are.equal(entry.ts, nd.valid_from)
    local ed = find(f.edges, function(e) return e.rel == "ratifies" end)
    assert.is_truthy(ed)
    assert.are.equal("arc", ed.actor)
    assert.are.equal("claim", ed.trust)
    assert.are.equal(cjson.null, ed.valid_to)
  end)

  it("supersession: the same key asserted again -- only the new version is navigated or briefed", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("topic:x", "topic", "zebra migration patterns") } })
    local r2 = run(h, w.session_id, { facts = { node("topic:x", "topic", "okapi forest habitats") } })
    local st, n = navigate(h, w.session_id, { from = "topic:x" })
    assert.are.equal(200, st)
    assert.are.equal(1, #n.nodes)
    assert.are.equal("okapi forest habitats", n.nodes[1].label)
    assert.are.equal(r2.cursor, n.nodes[1].cursor)
    assert.are.equal(cjson.null, n.nodes[1].valid_to)
    -- the old label no longer finds anything; the new one does
    local _, old = navigate(h, w.session_id, { hint = "zebra migration" })
    assert.are.equal("live", old.status)
    assert.are.equal(0, #old.nodes)
    local _, new = navigate(h, w.session_id, { hint = "okapi" })
    assert.are.equal(1, #new.nodes)
    assert.are.equal("okapi forest habitats", new.nodes[1].label)
    sleep(h, w.session_id)
    for _, hint in ipairs { "zebra migration patterns", "okapi forest habitats zebra" } do
      local w2, raw = wake(h, "arc", { context_hint = hint })
      local f = w2.boot_packet.briefing.facts
      assert.are.equal("live", f.status)
      assert.is_nil(path(raw, "boot_packet", "briefing", "facts"):find("zebra", 1, true),
        "a superseded version in the briefing")
      for _, x in ipairs(f.nodes) do
        assert.are_not.equal("zebra migration patterns", x.label)
        assert.are.equal(cjson.null, x.valid_to)
      end
      sleep(h, w2.session_id)
    end
  end)

  it("promote makes a claim a fact; a retraction removes it from navigation", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("claim:c1", "claim", "quasar spectroscopy result") } })
    local _, n = navigate(h, w.session_id, { from = "claim:c1" })
    assert.are.equal("claim", n.nodes[1].trust)
    run(h, w.session_id, { promote = { "claim:c1" } })
    local _, n2 = navigate(h, w.session_id, { from = "claim:c1" })
    assert.are.equal(1, #n2.nodes)
    assert.are.equal("fact", n2.nodes[1].trust)
    assert.are.equal("quasar spectroscopy result", n2.nodes[1].label)
    run(h, w.session_id, { facts = { { retract = { node = "claim:c1" } } } })
    local _, n3 = navigate(h, w.session_id, { from = "claim:c1" })
    assert.are.equal("live", n3.status)
    assert.are.equal(0, #n3.nodes)
    local _, n4 = navigate(h, w.session_id, { hint = "quasar spectroscopy" })
    assert.are.equal(0, #n4.nodes)
    sleep(h, w.session_id)
    local w2 = wake(h, "arc", { context_hint = "quasar spectroscopy" })
    assert.is_nil(by_key(w2.boot_packet.briefing.facts.nodes, "claim:c1"))
  end)

  it("an invalid fact (bad key, unknown fact kind) makes the run 422 skill_error and commits nothing", function()
    local h = start_host()
    local w = wake(h, "arc")
    local bad = {
      { node("bad key!", "topic", "spaces and a bang") },
      { { opinion = { key = "k", kind = "topic", label = "x" } } },
      { node("ok:key", "bad kind!", "x") },
    }
    for i, facts in ipairs(bad) do
      -- a valid fact first: it must not commit either
      local input = { facts = { node("good:" .. i, "topic", "sapphire lighthouse " .. i), facts[1] } }
      local st, e = h:post("/v1/run", { session_id = w.session_id, skill = "facts", input = input })
      assert.are.equal(422, st, cjson.encode(facts))
      assert.are.equal("skill_error", e.error.code)
      assert.is_string(e.error.message)
    end
    assert.are.equal(0, log_of(h, "arc").head)
    local _, n = navigate(h, w.session_id, { hint = "sapphire lighthouse" })
    assert.are.equal("live", n.status)
    assert.are.equal(0, #n.nodes)
    -- the session still works
    local r = run(h, w.session_id, { facts = { node("good:after", "topic", "x") } })
    assert.are.equal(2, r.committed)
  end)

  it("what Waking navigated is kept with the session record, not in the log", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:nav", "topic", "heliotrope") } })
    sleep(h, w.session_id)
    local head = log_of(h, "arc").head
    local w2 = wake(h, "arc", { context_hint = "heliotrope" })
    assert.are.equal(head, log_of(h, "arc").head)
    local nav = H.sqlite(h.home, "SELECT navigated FROM sessions WHERE id='" .. w2.session_id .. "'")
    assert.is_truthy(nav:find("t:nav", 1, true), nav)
    assert.is_truthy(nav:find("heliotrope", 1, true), nav)
  end)

  -- ---- degrade ------------------------------------------------------------------

  it("degrade (a): the Cortex file removed -> dark with a reason, the rest composed; restored -> live, caught up", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:before", "topic", "amber before outage") } })
    sleep(h, w.session_id, { next = "x" })
    local copy = backup_cortex(h)
    local dark0 = metric(h, "mw_cortex_dark_total")
    assert.is_number(dark0)
    remove_cortex(h)

    local t0 = socket.gettime()
    local w2, raw = wake(h, "arc", { context_hint = "amber" })
    assert.is_true(socket.gettime() - t0 < 1)
    local b = w2.boot_packet.briefing
    assert.are.equal("dark", b.facts.status)
    assert.is_string(b.facts.reason)
    assert.is_truthy(#b.facts.reason > 0)
    assert.are.same({}, b.facts.nodes)
    assert.is_true(#b.sources >= 1)
    assert.are.equal(w2.boot_packet.cursor, b.corpus.entries)
    assert.are.same({ next = "x" }, w2.boot_packet.state.handover)
    assert.is_truthy(path(raw, "boot_packet", "briefing", "direction"))
    assert.are.equal("dark", healthz(h).cortex)
    assert.is_true(metric(h, "mw_cortex_dark_total") > dark0)
    -- facts commit while it is dark
    local r = run(h, w2.session_id, { facts = { node("t:during", "topic", "cobalt during outage") } })
    assert.are.equal(2, r.committed)
    assert.are.equal("fact", log_of(h, "arc").entries[r.cursor].kind)
    sleep(h, w2.session_id)

    -- restore the earlier copy: no restart
    local pid = h.pid
    assert.are.equal(0, (sh("cp " .. q(copy) .. " " .. q(cortex_path(h)))))
    local w3 = wake(h, "arc", { context_hint = "cobalt amber" })
    assert.are.equal(pid, h.pid)
    assert.is_true(h:alive())
    local f = w3.boot_packet.briefing.facts
    assert.are.equal("live", f.status)
    assert.is_truthy(by_key(f.nodes, "t:during"), "the fact committed while dark was caught up")
    assert.is_truthy(by_key(f.nodes, "t:before"))
    assert.are.equal("live", healthz(h).cortex)
  end)

  it("degrade (b): the file replaced by garbage -> dark (corrupt); mw cortex rebuild -> live", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:g", "topic", "garnet facet") } })
    sleep(h, w.session_id)
    local p = cortex_path(h)
    local junk = {}
    math.randomseed(7)
    for i = 1, 64 * 1024 do junk[i] = string.char(math.random(0, 255)) end
    write(p .. ".junk", table.concat(junk))
    assert(os.rename(p .. ".junk", p))
    os.remove(p .. "-wal")
    os.remove(p .. "-shm")
    local t0 = socket.gettime()
    local w2 = wake(h, "arc", { context_hint = "garnet" })
    assert.is_true(socket.gettime() - t0 < 1)
    local f = w2.boot_packet.briefing.facts
    assert.are.equal("dark", f.status)
    assert.is_truthy(tostring(f.reason):find("corrupt", 1, true), tostring(f.reason))
    assert.is_true(#w2.boot_packet.briefing.sources >= 1)
    assert.are.equal("dark", healthz(h).cortex)
    sleep(h, w2.session_id)

    local code, out = rebuild(h.home)
    assert.are.equal(0, code, "mw cortex rebuild over a corrupt file: " .. out)
    local w3 = wake(h, "arc", { context_hint = "garnet" })
    assert.are.equal("live", w3.boot_packet.briefing.facts.status)
    assert.is_truthy(by_key(w3.boot_packet.briefing.facts.nodes, "t:g"))
    assert.are.equal("live", healthz(h).cortex)
  end)

  it("degrade (c): another process holding the write lock -> dark quickly, live once released", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:l", "topic", "lilac lockstep") } })
    sleep(h, w.session_id)
    local p = cortex_path(h)
    local function locked()
      local _, out = sh("sqlite3 -cmd '.timeout 0' " .. q(p) .. " 'BEGIN IMMEDIATE; ROLLBACK;'")
      return out:find("locked", 1, true) ~= nil
    end
    os.execute("sh -c " .. q("(echo 'BEGIN EXCLUSIVE;'; sleep 3) | sqlite3 -cmd '.timeout 2000' " .. q(p)) .. " >/dev/null 2>&1 &")
    local deadline = socket.gettime() + 2
    while not locked() and socket.gettime() < deadline do socket.sleep(0.02) end
    assert.is_true(locked(), "the sqlite3 shell did not take the lock")

    local t0 = socket.gettime()
    local st, w2 = h:wake("arc", { context_hint = "lilac" })
    local took = socket.gettime() - t0
    assert.are.equal(200, st)
    assert.is_true(took < 1, "the wake took " .. took .. " s")
    local f = w2.boot_packet.briefing.facts
    assert.are.equal("dark", f.status, "a wake while another process holds the Cortex's write lock")
    assert.is_truthy(tostring(f.reason):find("lock", 1, true), tostring(f.reason))
    sleep(h, w2.session_id)

    deadline = socket.gettime() + 6
    while locked() and socket.gettime() < deadline do socket.sleep(0.05) end
    assert.is_false(locked())
    local w3 = wake(h, "arc", { context_hint = "lilac" })
    assert.are.equal("live", w3.boot_packet.briefing.facts.status)
    assert.is_truthy(by_key(w3.boot_packet.briefing.facts.nodes, "t:l"))
  end)

  it("degrade (c'): a run staging facts while the Cortex is locked commits; the Cortex catches up after", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:m", "topic", "mauve first") } })
    local p = cortex_path(h)
    local function locked()
      local _, out = sh("sqlite3 -cmd '.timeout 0' " .. q(p) .. " 'BEGIN IMMEDIATE; ROLLBACK;'")
      return out:find("locked", 1, true) ~= nil
    end
    os.execute("sh -c " .. q("(echo 'BEGIN EXCLUSIVE;'; sleep 2) | sqlite3 -cmd '.timeout 2000' " .. q(p)) .. " >/dev/null 2>&1 &")
    local deadline = socket.gettime() + 2
    while not locked() and socket.gettime() < deadline do socket.sleep(0.02) end
    assert.is_true(locked())
    local t0 = socket.gettime()
    local r = run(h, w.session_id, { facts = { node("t:n", "topic", "mauve while locked") } })
    assert.is_true(socket.gettime() - t0 < 1)
    assert.are.equal(2, r.committed)
    deadline = socket.gettime() + 5
    while locked() and socket.gettime() < deadline do socket.sleep(0.05) end
    local st, n = navigate(h, w.session_id, { hint = "mauve" })
    assert.are.equal(200, st)
    assert.are.equal("live", n.status)
    assert.is_truthy(by_key(n.nodes, "t:n"))
    assert.is_truthy(by_key(n.nodes, "t:m"))
  end)

  it("degrade (d): an unreadable Cortex (chmod 000) -> dark; readable again -> live", function()
    local uid = tonumber((select(2, sh("id -u")):match("%d+")))
    if uid == 0 then
      pending("running as root: chmod 000 does not stop root from reading the file")
      return
    end
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:u", "topic", "umber unread") } })
    sleep(h, w.session_id)
    local p = cortex_path(h)
    assert.are.equal(0, (sh("chmod 000 " .. q(p))))
    local t0 = socket.gettime()
    local w2 = wake(h, "arc", { context_hint = "umber" })
    assert.is_true(socket.gettime() - t0 < 1)
    assert.are.equal("dark", w2.boot_packet.briefing.facts.status)
    assert.is_string(w2.boot_packet.briefing.facts.reason)
    assert.are.equal("dark", healthz(h).cortex)
    sleep(h, w2.session_id)
    assert.are.equal(0, (sh("chmod 600 " .. q(p))))
    local w3 = wake(h, "arc", { context_hint = "umber" })
    assert.are.equal("live", w3.boot_packet.briefing.facts.status)
    assert.is_truthy(by_key(w3.boot_packet.briefing.facts.nodes, "t:u"))
  end)

  it("facts commit while the Cortex is dark, and the Cortex catches up when it returns", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("t:one", "topic", "saffron one") } })
    sleep(h, w.session_id)
    local copy = backup_cortex(h)
    remove_cortex(h)
    local wa = wake(h, "arc")
    local wb = wake(h, "bee")
    assert.are.equal("dark", wa.boot_packet.briefing.facts.status)
    local ra = run(h, wa.session_id, { facts = { node("t:two", "topic", "saffron two"), edge("t:two", "follows", "t:one") },
      nav = { hint = "saffron" } })
    assert.are.equal(3, ra.committed)
    assert.are.equal("dark", ra.result.nav.status, "ctx.cortex.navigate while dark")
    assert.is_string(ra.result.nav.reason)
    local rb = run(h, wb.session_id, { facts = { node("t:three", "topic", "saffron three") } })
    assert.are.equal(2, rb.committed)
    local st, n = navigate(h, wa.session_id, { hint = "saffron" })
    assert.are.equal(200, st)
    assert.are.equal("dark", n.status)
    assert.is_string(n.reason)
    local kinds = {}
    for _, e in ipairs(log_of(h, "arc").entries) do kinds[#kinds + 1] = e.kind end
    assert.are.same({ "run", "fact", "handover", "run", "fact", "fact" }, kinds)

    assert.are.equal(0, (sh("cp " .. q(copy) .. " " .. q(cortex_path(h)))))
    local st2, n2 = navigate(h, wa.session_id, { hint = "saffron" })
    assert.are.equal(200, st2)
    assert.are.equal("live", n2.status)
    assert.are.same({ "t:one", "t:three", "t:two" }, keys(n2.nodes))
    assert.is_truthy(find(n2.edges, function(e) return e.from == "t:two" and e.rel == "follows" and e.to == "t:one" end))
    local rb2 = run(h, wb.session_id, { nav = { hint = "saffron" } })
    assert.are.equal("live", rb2.result.nav.status)
    assert.are.same({ "t:one", "t:three", "t:two" }, keys(rb2.result.nav.nodes))
  end)

  -- ---- rebuild == live ----------------------------------------------------------

  it("a rebuilt Cortex dumps the same bytes as the live one (two actors)", function()
    local h = start_host()
    local wa = wake(h, "arc")
    local wb = wake(h, "bee")
    run(h, wa.session_id, { facts = { node("n:a", "topic", "alpha"), edge("n:a", "links", "n:ghost") } })
    run(h, wb.session_id, { facts = { node("n:a", "topic", "alpha by bee"), node("n:b", "topic", "beta") } })
    run(h, wa.session_id, { facts = { { facts = { node("n:c", "topic", "gamma"), edge("n:c", "links", "n:b"),
      { node = { key = "n:d", kind = "topic", label = "delta", props = { w = 2 } }, trust = "fact" } } } } })
    run(h, wb.session_id, { promote = { "n:a" } })
    run(h, wa.session_id, { facts = { { retract = { node = "n:c" } }, node("n:b", "topic", "beta again") } })
    run(h, wb.session_id, { facts = { { retract = { edge = { from = "n:a", rel = "links", to = "n:ghost" } } } } })
    sleep(h, wa.session_id)
    sleep(h, wb.session_id)
    h:stop(true)
    local live = dump(h.home)
    local d = cjson.decode(live)
    assert.is_true(#d.current.nodes >= 4)
    assert.is_true(#d.versions.nodes >= 6)
    local ghost = by_key(d.current.nodes, "n:ghost")
    assert.is_truthy(ghost, "an edge to a missing node creates it")
    assert.are.equal("unknown", ghost.kind)
    assert.are.equal("n:ghost", ghost.label)
    local code, out = rebuild(h.home)
    assert.are.equal(0, code, out)
    assert.are.equal(live, dump(h.home))
  end)

  it("after a SIGKILL right after a run's 200 that staged facts, catch-up gives the dump a rebuild gives", function()
    local h = start_host()
    local wa = wake(h, "arc")
    local wb = wake(h, "bee")
    run(h, wa.session_id, { facts = { node("k:1", "topic", "one"), edge("k:1", "to", "k:2") } })
    run(h, wb.session_id, { facts = { node("k:2", "topic", "two by bee") } })
    local r = run(h, wa.session_id, { facts = { node("k:3", "topic", "three"), node("k:1", "topic", "one again") } })
    h:signal("KILL")
    assert.is_false(h:alive())
    h:restart()
    sleep_all(h)
    local w = wake(h, "arc", { context_hint = "three" })
    assert.are.equal(r.cursor + 1, w.boot_packet.cursor)   -- + the handover of the session slept after restart
    assert.are.equal("live", w.boot_packet.briefing.facts.status)
    assert.is_truthy(by_key(w.boot_packet.briefing.facts.nodes, "k:3"))
    h:stop(true)
    local live = dump(h.home)
    assert.is_truthy(live:find('"k:3"', 1, true))
    local code, out = rebuild(h.home)
    assert.are.equal(0, code, out)
    assert.are.equal(live, dump(h.home))
  end)

  -- ---- the sweep ----------------------------------------------------------------

  -- The corpus a wake on `h`'s home shows equals the one a wake computes from
  -- scratch on a copy whose sweep record was deleted.
  local function corpus_matches_scratch(h, actor)
    h:stop(true)
    local copy = copy_home(h, "scratch")
    H.sqlite(copy, "DELETE FROM sweeps")
    assert.are.equal("0", (H.sqlite(copy, "SELECT count(*) FROM sweeps"):gsub("%s", "")))
    local a = start_on(h.home, h)
    local b = start_on(copy, h)
    local sta, wa, rawa = a:wake(actor)
    local stb, _, rawb = b:wake(actor)
    assert.are.equal(200, sta)
    assert.are.equal(200, stb)
    local ca, cb = corpus_raw(rawa), corpus_raw(rawb)
    assert.is_truthy(ca)
    assert.are.equal(cb, ca)
    local c = cjson.decode(ca)
    assert.are.equal(wa.boot_packet.cursor, c.entries)
    assert.are.equal(wa.boot_packet.cursor, c.swept_to)
    local total = 0
    for _, v in pairs(c.counts) do total = total + v end
    assert.are.equal(c.entries, total)
    return c
  end

  it("the sweep: resuming from its cursor over many wakes gives the corpus of one uninterrupted sweep", function()
    local h = start_host()
    local last_cursor
    for i = 1, 12 do
      local w = wake(h, "arc")
      last_cursor = w.boot_packet.cursor
      run(h, w.session_id, { i = i }, "default")
      if i % 3 == 0 then run(h, w.session_id, { facts = { node("s:" .. i, "topic", "swept " .. i) } }) end
      if i % 4 == 0 then run(h, w.session_id, { remember = { key = "k" .. i, value = i } }, "default") end
      sleep(h, w.session_id, { i = i })
    end
    -- the record was kept, at the cursor of the last wake
    local stream = H.sqlite(h.home, "SELECT id FROM streams WHERE tenant='default' AND actor='arc'"):match("%d+")
    local rec = H.sqlite(h.home, "SELECT cursor FROM sweeps WHERE stream=" .. stream):match("%d+")
    assert.are.equal(last_cursor, tonumber(rec))
    h:stop(true)
    local tampered = copy_home(h, "tampered")
    local c = corpus_matches_scratch(h, "arc")
    -- and a wake does resume from the record: on a copy whose record says
    -- 1000 entries were swept, the corpus goes on from there
    H.sqlite(tampered, "UPDATE sweeps SET corpus = json_set(corpus, '$.entries', 1000)")
    local t = start_on(tampered, h)
    local stt, wt = t:wake("arc")
    assert.are.equal(200, stt)
    assert.are.equal(1000 + (wt.boot_packet.cursor - last_cursor), wt.boot_packet.briefing.corpus.entries)
    assert.are.equal(12 + 4 + 3, c.counts.run)   -- 12 plain runs, 4 with facts, 3 remembering
    assert.are.equal(12, c.counts.handover)
    assert.are.equal(4, c.counts.fact)
    assert.are.equal(3, c.counts.remember)
  end)

  it("the sweep: SIGKILLs at random moments of a stream of runs and wakes leave the corpus of a fresh sweep", function()
    local h = start_host()
    local tokens = { agent = h.agent, operator = h.operator }
    local kills = 0
    for round = 1, 3 do
      local delay = 0.03 + math.random() * 0.15
      os.execute(string.format("(sleep %.3f; kill -9 %d) >/dev/null 2>&1 &", delay, h.pid))
      local t0 = socket.gettime()
      while socket.gettime() - t0 < 3 do
        local st, w = h:wake("arc")
        if st ~= 200 then break end
        local ok = true
        for i = 1, 3 do
          local s = h:post("/v1/run", { session_id = w.session_id, skill = i == 2 and "facts" or "default",
            input = i == 2 and { facts = { node("r:" .. round, "topic", "round " .. round) } } or { i = i } })
          if s ~= 200 then ok = false break end
        end
        if not ok then break end
        if h:post("/v1/sleep", { session_id = w.session_id, handover = { round = round } }) ~= 200 then break end
      end
      local d2 = socket.gettime() + 3
      while h:alive() and socket.gettime() < d2 do socket.sleep(0.01) end
      assert.is_false(h:alive(), "the host was not killed")
      kills = kills + 1
      h:restart()
      h.agent, h.operator = tokens.agent, tokens.operator
      sleep_all(h)
    end
    assert.are.equal(3, kills)
    assert.is_true(log_of(h, "arc").head > 0)
    corpus_matches_scratch(h, "arc")
  end)

  -- ---- hints ------------------------------------------------------------------

  it("hostile hints: FTS syntax, quotes and 2,000 bytes of noise wake 200 with facts live", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = { node("h:w", "topic", "waking cortex navigation"),
      node("h:q", "topic", "near or and not") } })
    sleep(h, w.session_id)
    local noise = {}
    math.randomseed(11)
    for i = 1, 2000 do noise[i] = string.char(math.random(32, 126)) end
    local hints = {
      '"', '""', '"waking', "*", "waking*", "NEAR(waking cortex)", "NEAR(", "waking OR", "OR", "AND NOT",
      "-waking", "- -", "label:waking", "key:h:w", ":", "^waking", "^", "'", "'; DROP TABLE nodes_current; --",
      "(", ")", "{}", "\\", "waking\" OR \"x", "(((", "  ", "\t\n", "naïve café 日本語 waking",
      table.concat(noise),
    }
    for _, hint in ipairs(hints) do
      local st, x, raw = h:wake("arc", { context_hint = hint })
      assert.are.equal(200, st, "hint " .. hint .. ": " .. tostring(raw))
      assert.are.equal("live", x.boot_packet.briefing.facts.status, hint)
      local sn, n, nraw = navigate(h, x.session_id, { hint = hint })
      assert.are.equal(200, sn, "navigate hint " .. hint .. ": " .. tostring(nraw))
      assert.are.equal("live", n.status)
      sleep(h, x.session_id)
    end
    -- the words of a hint still count as plain text
    local x = wake(h, "arc", { context_hint = 'NEAR("waking" cortex*) OR ^navigation:' })
    assert.is_truthy(by_key(x.boot_packet.briefing.facts.nodes, "h:w"))
    local _, n = navigate(h, x.session_id, { hint = "near OR and" })
    assert.is_truthy(by_key(n.nodes, "h:q"))
    sleep(h, x.session_id)
    assert.are.equal(2000, #hints[#hints])
  end)

  it("a context_hint over 2,000 bytes is 400 bad_request", function()
    local h = start_host()
    local st, e = h:wake("arc", { context_hint = string.rep("a", 2001) })
    assert.are.equal(400, st)
    assert.are.equal("bad_request", e.error.code)
    local st2 = h:wake("arc", { context_hint = string.rep("a", 2000) })
    assert.are.equal(200, st2)
  end)

  -- ---- /v1/navigate -------------------------------------------------------------

  it("/v1/navigate: neighbours with from and depth, a path with to", function()
    local h = start_host()
    local w = wake(h, "arc")
    run(h, w.session_id, { facts = {
      node("g:a", "person", "Ada"),
      edge("g:a", "knows", "g:b"), edge("g:b", "knows", "g:c"), edge("g:c", "knows", "g:d"),
      edge("g:a", "likes", "g:e"),
    } })
    local st, n = navigate(h, w.session_id, { from = "g:a" })
    assert.are.equal(200, st)
    assert.are.equal("live", n.status)
    assert.are.same({ "g:a", "g:b", "g:e" }, keys(n.nodes))
    assert.are.equal(2, #n.edges)
    local implied = by_key(n.nodes, "g:b")
    assert.are.equal("unknown", implied.kind)
    assert.are.equal("g:b", implied.label)
    assert.are.equal("claim", implied.trust)
    local _, n2 = navigate(h, w.session_id, { from = "g:a", depth = 2 })
    assert.are.same({ "g:a", "g:b", "g:c", "g:e" }, keys(n2.nodes))
    assert.are.equal(3, #n2.edges)
    local _, n3 = navigate(h, w.session_id, { from = "g:a", depth = 3 })
    assert.are.same({ "g:a", "g:b", "g:c", "g:d", "g:e" }, keys(n3.nodes))
    local _, p = navigate(h, w.session_id, { from = "g:a", to = "g:d" })
    assert.are.equal("live", p.status)
    local order = {}
    for _, x in ipairs(p.nodes) do order[#order + 1] = x.key end
    assert.are.same({ "g:a", "g:b", "g:c", "g:d" }, order)
    assert.are.equal(3, #p.edges)
    for i, e in ipairs(p.edges) do
      assert.are.equal(order[i], e.from)
      assert.are.equal(order[i + 1], e.to)
    end
    local _, lim = navigate(h, w.session_id, { from = "g:a", depth = 4, limit = 2 })
    assert.is_true(#lim.nodes <= 2)
    local sb, eb = navigate(h, w.session_id, { from = "g:a", depth = 5 })
    assert.are.equal(400, sb)
    assert.are.equal("bad_request", eb.error.code)
    -- the same navigation from a skill
    local r = run(h, w.session_id, { nav = { from = "g:a", to = "g:d" } })
    assert.are.equal("live", r.result.nav.status)
    assert.are.equal(4, #r.result.nav.nodes)
  end)

  it("/v1/navigate on a closed session is 409 session_closed; another tenant's session is 404", function()
    local h = start_host()
    local w = wake(h, "arc")
    sleep(h, w.session_id)
    local st, e = navigate(h, w.session_id, { hint = "x" })
    assert.are.equal(409, st)
    assert.are.equal("session_closed", e.error.code)
    local code, out = cli("token create --home " .. q(h.home) .. " --tenant other --role agent --json")
    assert.are.equal(0, code, out)
    local other = cjson.decode(out).token
    local so, wo = h:post("/v1/wake", { actor_id = "arc" }, other)
    assert.are.equal(200, so)
    local s1, e1 = h:post("/v1/navigate", { session_id = wo.session_id, hint = "x" })
    assert.are.equal(404, s1)
    assert.are.equal("unknown_session", e1.error.code)
    local w2 = wake(h, "arc")
    local s2, e2 = h:post("/v1/navigate", { session_id = w2.session_id }, other)
    assert.are.equal(404, s2)
    assert.are.equal("unknown_session", e2.error.code)
    local s3, n3 = h:post("/v1/navigate", { session_id = wo.session_id, hint = "x" }, other)
    assert.are.equal(200, s3)
    assert.are.equal("live", n3.status)
  end)
end)
