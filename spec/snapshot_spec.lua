-- snapshot_spec.lua -- folds, replay, snapshots and hydrate: deterministic
-- bytes across processes, heads and checkpoints, corrupt heads and recovery,
-- refolding, the fold's sandbox and budget, retention.

local H = require "helpers"
local mw = require "mw"

-- A fold that iterates string keys with pairs and lists them in the order
-- pairs gave: the list is sorted only if pairs is.
local ORDER_FOLD = [[
return {
  initial = function() return { seen = {}, n = 0 } end,
  fold = function(state, e)
    for k, v in pairs(e.body) do state.seen[k] = v end
    local order = json.array()
    for k in pairs(state.seen) do order[#order + 1] = k end
    state.order = order
    state.n = state.n + 1
    return state
  end,
}
]]

-- A fold that keeps every body as it came.
local KEEP_FOLD = [[
return function(state, e)
  state.items = state.items or json.array()
  state.items[#state.items + 1] = e.body
  state.last = e.cursor
  return state
end
]]

-- A fold that sums body.n (so a state tells how far it got).
local SUM_FOLD = [[
return function(state, e)
  state.sum = (state.sum or 0) + (e.body.n or 0)
  state.cursor = e.cursor
  return state
end
]]

local function fails_with(code, ok, msg, got)
  assert.is_nil(ok, "expected a failure")
  assert.is_string(msg)
  assert.is_truthy(#msg > 0)
  assert.are.equal(code, got, "code for: " .. tostring(msg))
end

-- Appends entries from..to ({n = i}), in batches (one commit each).
local function fill(log, from, to)
  local batch = {}
  for i = from, to do
    batch[#batch + 1] = { "tick", { n = i } }
    if #batch == 50 or i == to then
      assert.are.equal(i, log:append_batch(batch))
      batch = {}
    end
  end
end

local function sum_state(n)   -- SUM_FOLD's state after entries 1..n of fill()
  if n == 0 then return "{}" end
  return string.format('{"cursor":%d,"sum":%d}', n, n * (n + 1) // 2)
end

local function find_snap(log, id)
  for _, s in ipairs(log:snapshots()) do
    if s.snapshot_id == id then return s end
  end
end

describe("snapshots and hydrate", function()
  local home, path
  before_each(function() home, path = H.new_home() end)
  after_each(function()
    home:close()
    H.cleanup()
  end)

  it("opens folds from a path or a source, fingerprinted by their source", function()
    local f1 = assert(home:fold(H.fold_path))
    assert.are.equal(mw.sha256(H.read(H.fold_path)), f1:fingerprint())
    local f2 = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    assert.are.equal(mw.sha256(SUM_FOLD), f2:fingerprint())
    local f3 = assert(home:fold(H.write_fold(SUM_FOLD)))
    assert.are.equal(f2:fingerprint(), f3:fingerprint())
  end)

  it("refuses folds that do not load or return no fold function", function()
    fails_with("ENOENT", home:fold(path .. "/no-such-fold.lua"))
    fails_with("EFOLD", home:fold({ source = "return function(", name = "syntax" }))
    fails_with("EFOLD", home:fold({ source = "return 5", name = "five" }))
    fails_with("EFOLD", home:fold({ source = "return { initial = function() return {} end }", name = "nofold" }))
    fails_with("EFOLD", home:fold({ source = "error('at load')", name = "raises" }))
    local ok, msg = home:fold({ source = "return function(", name = "syntax" })
    assert.is_nil(ok)
    assert.is_truthy(msg:find("syntax", 1, true), msg)
  end)

  it("replays the default fold to any cursor", function()
    local log = assert(home:log("acme", "arc"))
    assert(log:append("run", { skill = "build", input = { x = 1 } }))
    assert(log:append("remember", { key = "color", value = "blue" }))
    assert(log:append("handover", { handover = { next = "ship" }, reason = "sleep" }))
    local f = assert(home:fold(H.fold_path))
    local s0 = assert(log:replay(f, 0))
    assert.are.equal("{}", s0)
    local s1 = assert(log:replay(f, 1))
    assert.are.equal('{"counts":{"run":1},"cursor":1,"last_run":{"cursor":1,"input":{"x":1},"skill":"build"}}', s1)
    local s3, info = assert(log:replay(f, 3))
    assert.are.equal(3, info.cursor)
    local st = mw.json.decode(s3)
    assert.are.equal("blue", st.memory.color)
    assert.are.equal("ship", st.handover.next)
    assert.are.equal("sleep", st.last_sleep.reason)
    local ok, msg, code = log:replay(f, 4)
    fails_with("EINVAL", ok, msg, code)
    assert.is_truthy(msg:find("past", 1, true), msg)
  end)

  it("replay(to=N) is the same bytes in separate processes, with sorted pairs", function()
    local log = assert(home:log("acme", "arc"))
    -- many string keys, inserted in an order that is not sorted
    local keys = {}
    for i = 1, 60 do keys[#keys + 1] = string.format("k%02d_%s", (i * 37) % 61, string.rep("z", i % 7)) end
    for i = 1, #keys, 6 do
      local body = {}
      for j = i, math.min(i + 5, #keys) do body[keys[j]] = j end
      assert(log:append("tick", body))
    end
    local last = log:head()
    H.write_fold(ORDER_FOLD, path)   -- HOME/scripts/fold.lua, named to the CLI by MW_SCRIPTS
    local f = assert(home:fold(path .. "/scripts/fold.lua"))
    for _, n in ipairs({ 3, last }) do
      local args = string.format("replay --home %s --tenant acme --actor arc --to %d", H.q(path), n)
      local env = { MW_SCRIPTS = path .. "/scripts" }
      local c1, out1, err1 = H.mw(args, env)
      local c2, out2 = H.mw(args, env)
      assert.are.equal(0, c1, err1)
      assert.are.equal(0, c2)
      assert.are.equal(out1, out2)
      local inproc = assert(log:replay(f, n))
      assert.are.equal(inproc .. "\n", out1)
      -- the order pairs gave is the sorted order
      local st = mw.json.decode(inproc)
      local sorted = {}
      for k in pairs(st.seen) do sorted[#sorted + 1] = k end
      table.sort(sorted)
      assert.are.equal(#sorted, #st.order)
      assert.are.same(sorted, { table.unpack(st.order) })
      assert.are.equal(n, st.n)
    end
  end)

  it("a head snapshot is used by the next hydrate (nothing replayed)", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 7)
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local id, cursor = assert(log:snapshot(f, { head = true }))
    assert.are.equal(7, cursor)
    assert.is_truthy(id:match("^s_%x+$"))
    local state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(7), state)
    assert.are.equal(id, info.head_id)
    assert.are.equal(id, info.start_id)
    assert.are.equal(7, info.head_cursor)
    assert.are.equal(0, info.replayed)
    assert.is_false(info.refolded)
    -- more entries: only the tail is replayed
    fill(log, 8, 10)
    state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(10), state)
    assert.are.equal(3, info.replayed)
    assert.are.equal(id, info.head_id)
    local snaps = log:snapshots()
    assert.are.equal(1, #snaps)
    assert.are.equal("head", snaps[1].kind)
    assert.is_true(snaps[1].head)
    assert.is_true(snaps[1].safe)
    assert.are.equal(f:fingerprint(), snaps[1].fold)
  end)

  it("hydrate(to=N) rebuilds an earlier cursor, even behind the head", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 10)
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    assert(log:snapshot(f, { head = true }))
    for _, n in ipairs({ 0, 1, 5, 10 }) do
      local state, info = assert(log:hydrate(f, { to = n }))
      assert.are.equal(sum_state(n), state)
      assert.are.equal(n, info.cursor)
    end
    fails_with("EINVAL", log:hydrate(f, { to = 11 }))
  end)

  it("takes a checkpoint so that after 250 entries a wake replays at most 100", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 250)
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(250), state)
    assert.are.equal(250, info.replayed)
    assert.are.equal(1, info.checkpoints_saved)
    local snaps = log:snapshots()
    assert.are.equal(1, #snaps)
    assert.are.equal("checkpoint", snaps[1].kind)
    assert.are.equal(200, snaps[1].cursor)
    assert.is_false(snaps[1].head)   -- a checkpoint is never the head
    state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(250), state)
    assert.is_true(info.replayed <= 100, "replayed " .. info.replayed)
    assert.are.equal(snaps[1].snapshot_id, info.start_id)
    assert.is_nil(info.head_id)
    -- the checkpoint's state is the state at its cursor
    assert.are.equal(sum_state(200), (log:replay(f, 200)))
  end)

  it("checkpoints past an old head too", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 5)
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local head = assert(log:snapshot(f, { head = true }))
    fill(log, 6, 250)
    local state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(250), state)
    assert.are.equal(245, info.replayed)
    state, info = assert(log:hydrate(f))
    assert.are.equal(sum_state(250), state)
    assert.is_true(info.replayed <= 100, "replayed " .. info.replayed)
    assert.are.equal(head, info.head_id)
    assert.are_not.equal(head, info.start_id)
  end)

  it("checkpoint_every sets K, and a negative K takes none", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 30)
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local _, info = assert(log:hydrate(f, { checkpoint_every = -1 }))
    assert.are.equal(0, info.checkpoints_saved)
    assert.are.equal(0, #log:snapshots())
    _, info = assert(log:hydrate(f, { checkpoint_every = 10 }))
    assert.are.equal(1, info.checkpoints_saved)
    assert.are.equal(30, log:snapshots()[1].cursor)
  end)

  describe("a corrupt head", function()
    local log, f, s1, s2, head

    before_each(function()
      log = assert(home:log("acme", "arc"))
      f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
      fill(log, 1, 10)
      s1 = assert(log:snapshot(f, { head = true }))
      fill(log, 11, 20)
      s2 = assert(log:snapshot(f, { head = true }))
      fill(log, 21, 30)
      head = assert(log:snapshot(f, { head = true }))
      fill(log, 31, 35)
    end)

    local function corrupt(id, sql_set)
      H.sql(path, string.format("UPDATE snapshots SET %s WHERE id='%s'", sql_set or "state='{\"cursor\":30,\"sum\":1}'", id))
    end

    it("is refused: ECORRUPT naming it and the newest earlier safe snapshot", function()
      corrupt(head)
      local state, msg, code, info = log:hydrate(f)
      assert.is_nil(state)
      assert.are.equal("ECORRUPT", code)
      assert.is_string(msg)
      assert.are.equal(head, info.snapshot_id)
      assert.are.equal(s2, info.last_safe_snapshot_id)
      local h = find_snap(log, head)
      assert.is_false(h.safe)
      assert.is_true(h.head)
      assert.is_true(find_snap(log, s2).safe)
      -- and again: the head stays refused until a recovery is named
      state, msg, code, info = log:hydrate(f)
      assert.is_nil(state)
      assert.are.equal("ECORRUPT", code)
      assert.are.equal(head, info.snapshot_id)
      assert.are.equal(s2, info.last_safe_snapshot_id)
    end)

    it("skips earlier snapshots that fail too when naming the last safe one", function()
      corrupt(head)
      corrupt(s2, "state='{\"cursor\":20,\"sum\":2}'")
      local _, _, code, info = log:hydrate(f)
      assert.are.equal("ECORRUPT", code)
      assert.are.equal(s1, info.last_safe_snapshot_id)
      assert.is_false(find_snap(log, s2).safe)
      assert.is_true(find_snap(log, s1).safe)
    end)

    it("names no last safe snapshot when none verifies", function()
      corrupt(head)
      corrupt(s2, "state_hash=X'00'")
      corrupt(s1, "entry_hash=zeroblob(32)")
      local _, _, code, info = log:hydrate(f)
      assert.are.equal("ECORRUPT", code)
      assert.are.equal(head, info.snapshot_id)
      assert.is_nil(info.last_safe_snapshot_id)
    end)

    it("is detected when the log under it changed (it no longer links)", function()
      local sid = H.stream_id(path, "acme", "arc")
      H.sql(path, string.format("UPDATE entries SET hash=zeroblob(32) WHERE stream=%d AND cursor=30", sid))
      local _, _, code, info = log:hydrate(f)
      assert.are.equal("ECORRUPT", code)
      assert.are.equal(head, info.snapshot_id)
    end)

    it("recovers with from_snapshot = genesis or the safe snapshot", function()
      corrupt(head)
      local _, _, code, info = log:hydrate(f)
      assert.are.equal("ECORRUPT", code)
      local state, ginfo = assert(log:hydrate(f, { from_snapshot = "genesis" }))
      assert.are.equal(sum_state(35), state)
      assert.are.equal(35, ginfo.replayed)
      assert.is_nil(ginfo.start_id)
      local state2, sinfo = assert(log:hydrate(f, { from_snapshot = info.last_safe_snapshot_id }))
      assert.are.equal(sum_state(35), state2)
      assert.are.equal(s2, sinfo.start_id)
      assert.are.equal(15, sinfo.replayed)
      -- naming the corrupt one is refused
      local ok, _, c3 = log:hydrate(f, { from_snapshot = head })
      assert.is_nil(ok)
      assert.are.equal("ECORRUPT", c3)
      -- an unknown id is not found
      fails_with("ENOENT", log:hydrate(f, { from_snapshot = "s_00000000000000000000000000000000" }))
      -- recovering does not move the head: a wake (or a snapshot, which
      -- hydrates as a wake) still answers ECORRUPT
      fails_with("ECORRUPT", log:hydrate(f))
      fails_with("ECORRUPT", log:snapshot(f, { head = true }))
    end)
  end)

  it("a changed fold is refolded: info.refolded and the state under the new fold", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 12)
    local f1 = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local id = assert(log:snapshot(f1, { head = true }))
    local COUNT_FOLD = "return function(s, e) s.count = (s.count or 0) + 1 return s end"
    local f2 = assert(home:fold({ source = COUNT_FOLD, name = "count" }))
    assert.are_not.equal(f1:fingerprint(), f2:fingerprint())
    local state, info = assert(log:hydrate(f2))
    assert.are.equal('{"count":12}', state)
    assert.is_true(info.refolded)
    assert.are.equal(id, info.head_id)
    assert.are.equal(12, info.replayed)
    -- the old fold still gets its head
    state, info = assert(log:hydrate(f1))
    assert.are.equal(sum_state(12), state)
    assert.is_false(info.refolded)
    assert.are.equal(0, info.replayed)
    -- a changed file at the same path is a changed fold
    local p = H.write_fold(SUM_FOLD)
    local fa = assert(home:fold(p))
    H.write(p, SUM_FOLD .. "-- changed\n")
    local fb = assert(home:fold(p))
    assert.are_not.equal(fa:fingerprint(), fb:fingerprint())
    _, info = assert(log:hydrate(fb))
    assert.is_true(info.refolded)
  end)

  it("keeps nested [] {} and the int64 extremes through append, replay, snapshot, hydrate", function()
    local log = assert(home:log("acme", "arc"))
    local body = '{"a":[],"b":{},"c":[[],{}],"d":{"e":[{}],"f":{"g":[]}},"max":9223372036854775807,"min":-9223372036854775808}'
    assert(log:append("keep", '{ "min": -9223372036854775808, "max": 9223372036854775807,'
      .. ' "d": {"f": {"g": [ ]}, "e": [ { } ]}, "c": [[], {}], "b": {}, "a": [] }'))
    assert.are.equal(body, log:read()[1].body)
    local f = assert(home:fold({ source = KEEP_FOLD, name = "keep" }))
    local want = '{"items":[' .. body .. '],"last":1}'
    assert.are.equal(want, (log:replay(f, 1)))
    local id = assert(log:snapshot(f, { head = true }))
    local state, info = assert(log:hydrate(f))
    assert.are.equal(want, state)
    assert.are.equal(id, info.start_id)
    assert.are.equal(0, info.replayed)
    -- the snapshot's state decoded and folded further keeps them too
    assert(log:append("keep", "[]"))
    state, info = assert(log:hydrate(f))
    assert.are.equal(1, info.replayed)
    assert.are.equal('{"items":[' .. body .. ',[]],"last":2}', state)
  end)

  it("stops a fold that loops forever on its instruction budget, the same way twice", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 2)
    local loop = assert(home:fold({ source = "return function(s, e) while true do end end", name = "loop" }))
    local ok1, msg1, code1 = log:hydrate(loop)
    local ok2, msg2, code2 = log:hydrate(loop)
    assert.is_nil(ok1)
    assert.are.equal("EFOLD", code1)
    assert.is_truthy(msg1:find("budget", 1, true), msg1)
    assert.is_truthy(msg1:find("cursor 1", 1, true), msg1)
    assert.is_nil(ok2)
    assert.are.equal(code1, code2)
    assert.are.equal(msg1, msg2)
    assert.are.equal(0, #log:snapshots())
  end)

  it("stops a looping fold that catches the budget error with pcall", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 1)
    local src = [[return function(s, e)
      while true do pcall(function() while true do end end) end
    end]]
    local sneaky = assert(home:fold({ source = src, name = "sneaky" }))
    local ok, msg, code = log:hydrate(sneaky)
    assert.is_nil(ok)
    assert.are.equal("EFOLD", code)
    assert.is_truthy(msg:find("budget", 1, true), msg)
  end)

  it("stops a fold that loops at load time", function()
    local ok, msg, code = home:fold({ source = "while true do end", name = "toplevel" })
    assert.is_nil(ok)
    assert.are.equal("EFOLD", code)
    assert.is_truthy(msg:find("budget", 1, true), msg)
  end)

  it("counts the budget per entry, deterministically", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 20)
    -- about 30k instructions an entry: fits 100k per entry, not 10k
    local src = "return function(s, e) local x = 0 for i = 1, 10000 do x = x + i end s.x = x return s end"
    local roomy = assert(home:fold({ source = src, name = "w", budget = 100000 }))
    local tight = assert(home:fold({ source = src, name = "w", budget = 10000 }))
    assert.are.equal('{"x":50005000}', (log:replay(roomy, 20)))
    fails_with("EFOLD", log:replay(tight, 1))
  end)

  it("reports a fold's own error, and a state that cannot be JSON", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 3)
    local boom = assert(home:fold({ source = "return function(s, e) if e.cursor == 2 then error('boom') end return s end", name = "boom" }))
    local ok, msg, code = log:hydrate(boom)
    fails_with("EFOLD", ok, msg, code)
    assert.is_truthy(msg:find("boom", 1, true), msg)
    assert.is_truthy(msg:find("cursor 2", 1, true), msg)
    local fn = assert(home:fold({ source = "return function(s, e) s.f = pairs return s end", name = "fn" }))
    ok, msg, code = log:hydrate(fn)
    fails_with("EFOLD", ok, msg, code)
    assert.is_truthy(msg:find("function", 1, true), msg)
  end)

  it("gives a fold no os, io, require, load, math.random or string.dump", function()
    local log = assert(home:log("acme", "arc"))
    fill(log, 1, 1)
    local src = [[return function(s, e)
      s.os = type(os); s.io = type(io); s.require = type(require); s.load = type(load)
      s.random = type(math.random); s.randomseed = type(math.randomseed)
      s.dump = type(string.dump); s.sdump = type(("").dump)
      s.dofile = type(dofile); s.loadfile = type(loadfile); s.debug = type(debug)
      s.package = type(package); s.collectgarbage = type(collectgarbage)
      s.pairs = type(pairs); s.string = type(string)
      return s
    end]]
    local f = assert(home:fold({ source = src, name = "probe" }))
    -- type(x) of each: "nil" for every one the fold must not have
    local st = assert(log:replay(f, 1))
    assert.are.equal('{"collectgarbage":"nil","debug":"nil","dofile":"nil","dump":"nil","io":"nil",'
      .. '"load":"nil","loadfile":"nil","os":"nil","package":"nil","pairs":"function","random":"nil",'
      .. '"randomseed":"nil","require":"nil","sdump":"nil","string":"table"}', st)
  end)

  it("keeps the current head and the 10 before it", function()
    local log = assert(home:log("acme", "arc"))
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    local ids = {}
    for i = 1, 15 do
      assert(log:append("tick", { n = i }))
      ids[i] = assert(log:snapshot(f, { head = true }))
    end
    local snaps = log:snapshots()
    local heads = {}
    for _, s in ipairs(snaps) do
      if s.kind == "head" then heads[#heads + 1] = s end
    end
    assert.are.equal(11, #heads)
    assert.are.equal(ids[15], heads[1].snapshot_id)   -- newest first
    assert.is_true(heads[1].head)
    for i = 2, 11 do assert.is_false(heads[i].head) end
    local kept = {}
    for _, s in ipairs(heads) do kept[s.snapshot_id] = true end
    for i = 1, 4 do assert.is_nil(kept[ids[i]], "head " .. i .. " should be pruned") end
    for i = 5, 15 do assert.is_true(kept[ids[i]], "head " .. i .. " should be kept") end
    -- the log is never pruned
    assert.are.equal(15, #log:read())
  end)

  it("keeps as many as home:retention says", function()
    local log = assert(home:log("acme", "arc"))
    local f = assert(home:fold({ source = SUM_FOLD, name = "sum" }))
    home:retention(2, 1)
    for i = 1, 6 do
      fill(log, i, i)
      assert(log:snapshot(f, { head = true }))
    end
    local heads, ckpts = 0, 0
    for _, s in ipairs(log:snapshots()) do
      if s.kind == "head" then heads = heads + 1 else ckpts = ckpts + 1 end
    end
    assert.are.equal(3, heads)
    for i = 1, 3 do assert(log:snapshot(f)) end   -- checkpoints
    ckpts = 0
    for _, s in ipairs(log:snapshots()) do
      if s.kind == "checkpoint" then ckpts = ckpts + 1 end
    end
    assert.are.equal(1, ckpts)
  end)
end)
