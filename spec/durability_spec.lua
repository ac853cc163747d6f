-- durability_spec.lua -- a store that cannot write durably: fsync() and
-- fdatasync() fail with EIO (the LD_PRELOAD shim spec/c/failsync.c, built
-- here into MW_BUILD/test/failsync.so) while a flag file exists.  The
-- contract: 503 unavailable to exactly the calls that needed the failed
-- write, nothing of theirs committed, reads still served, and the service
-- back by itself once the disk is.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"

-- ---- the shim ----------------------------------------------------------------

local function abspath(p)
  if p:sub(1, 1) == "/" then return p end
  local pwd = os.getenv("PWD") or io.popen("pwd"):read("l")
  return pwd .. "/" .. p
end

local build = abspath(os.getenv("MW_BUILD") or "build")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec"
local source = abspath(here .. "/c/failsync.c")
local shim = build .. "/test/failsync.so"

-- Built at load time with the plain cc in PATH: no sanitizers even in an asan
-- build tree, and not executable, so that c_spec (which runs every executable
-- in MW_BUILD/test) does not take it for a test program.
local build_error
do
  local tmp = ("%s.%d.tmp"):format(shim, math.random(1, 1e9))
  local cmd = ("mkdir -p %s/test && cc -shared -fPIC -O2 -o %s %s -ldl && chmod 644 %s && mv -f %s %s"):format(
    build, tmp, source, tmp, tmp, shim)
  local out, code = H.sh(cmd)
  if code ~= 0 then
    build_error = "cannot build the failsync shim: " .. cmd .. "\n" .. out
    os.remove(tmp)
  end
end

-- ---- helpers ---------------------------------------------------------------

local function is_error(status, code, st, body, raw, context)
  local why = "answer: " .. tostring(st) .. " " .. tostring(raw) .. (context or "")
  assert.are.equal(status, st, why)
  assert.is_table(body, why)
  assert.is_table(body.error, why)
  assert.are.equal(code, body.error.code, why)
  assert.is_string(body.error.message, why)
  assert.is_true(#body.error.message > 0, why)
end

local function touch(path)
  local f = assert(io.open(path, "w"))
  f:close()
end

local function log_of(h, actor)
  local st, body, raw = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return { entries = {}, head = 0 }, "" end
  assert.are.equal(200, st, raw)
  return body, raw
end

local function verify(h, actor)
  local out, code = H.sh(H.mw .. " log verify --home " .. h.home .. " --tenant default --actor " .. actor)
  assert.are.equal(0, code, out)
end

-- The host's stderr from byte `from` on: what it said about the failure.
local function said_since(h, from)
  return "\n--- host stderr:\n" .. h:hostlog():sub(from + 1)
end

local function start(flag)
  assert(not build_error, build_error)
  local pre = os.getenv("LD_PRELOAD")
  local preload = (pre and pre ~= "") and (pre .. " " .. shim) or shim
  return H.start({ env = ('LD_PRELOAD="%s" MW_FAILSYNC_FLAG="%s" '):format(preload, flag) })
end

describe("a failed fsync", function()
  local h, flag
  before_each(function()
    h = nil
    flag = os.tmpname()
    os.remove(flag)
    h = start(flag)
  end)
  after_each(function()
    os.remove(flag)
    if not h then return end   -- the host did not start
    local log = h:hostlog()
    h:stop()
    assert.is_nil(log:match("AddressSanitizer"), log)
    assert.is_nil(log:match("runtime error"), log)
  end)

  it("the shim is in the host and idle while the flag is absent", function()
    local st, w, raw = h:wake("arc")
    assert.are.equal(200, st, raw)
    local st2, r = h:post("/v1/run", { session_id = w.session_id, input = 1 })
    assert.are.equal(200, st2)
    assert.are.equal(1, r.cursor)
    local maps = H.read_file("/proc/" .. h.pid .. "/maps") or ""
    assert.is_truthy(maps:find(shim, 1, true), "failsync.so is not loaded in the host")
    assert.is_nil(h:hostlog():match("failsync:"))
  end)

  it("run and sleep answer 503 unavailable, commit nothing, and the service comes back by itself", function()
    local _, w = h:wake("arc")
    local st, r = h:post("/v1/run", { session_id = w.session_id, input = { n = 1 } })
    assert.are.equal(200, st)
    st, r = h:post("/v1/run", { session_id = w.session_id, input = { remember = { key = "k", value = 1 } } })
    assert.are.equal(200, st)
    assert.are.equal(3, r.cursor)
    local before, before_raw = log_of(h, "arc")
    assert.are.equal(3, before.head)

    local mark = #h:hostlog()
    touch(flag)
    local st1, b1, raw1 = h:post("/v1/run", { session_id = w.session_id, input = { lost = "run" } })
    is_error(503, "unavailable", st1, b1, raw1, said_since(h, mark))
    assert.is_truthy(h:hostlog():sub(mark + 1):match("failsync: f%a*sync"), "no fsync was refused" .. said_since(h, mark))
    local st2, b2, raw2 = h:post("/v1/sleep", { session_id = w.session_id, handover = { lost = "sleep" } })
    is_error(503, "unavailable", st2, b2, raw2, said_since(h, mark))
    -- reads are still served, and show nothing of the failed calls
    local during, during_raw = log_of(h, "arc")
    assert.are.equal(before_raw, during_raw)
    assert.are.equal(200, (h:get("/healthz")))
    local st3, b3, raw3 = h:wake("other")
    is_error(503, "unavailable", st3, b3, raw3, said_since(h, mark))
    local st4, b4, raw4 = h:post("/v1/actors/arc/direction", { direction = "lost" }, h.operator)
    is_error(503, "unavailable", st4, b4, raw4, said_since(h, mark))
    os.remove(flag)

    -- nothing of theirs was committed
    local after, after_raw = log_of(h, "arc")
    assert.are.equal(before_raw, after_raw, said_since(h, mark))
    assert.is_nil(after_raw:find("lost", 1, true))
    verify(h, "arc")
    assert.are.equal(0, log_of(h, "other").head)

    -- back by itself: the same session runs and sleeps, the refused wake left no session
    local st5, r5, raw5 = h:post("/v1/run", { session_id = w.session_id, input = { n = 2 } })
    assert.are.equal(200, st5, raw5 .. said_since(h, mark))
    assert.are.equal(4, r5.cursor)
    local st6, s6, raw6 = h:post("/v1/sleep", { session_id = w.session_id, handover = { kept = true } })
    assert.are.equal(200, st6, raw6 .. said_since(h, mark))
    assert.are.equal(5, s6.cursor)
    local st7, w7, raw7 = h:wake("other")
    assert.are.equal(200, st7, raw7 .. said_since(h, mark))
    assert.are.equal(0, w7.boot_packet.cursor)
    local st8, w8, raw8 = h:wake("arc")
    assert.are.equal(200, st8, raw8)
    assert.are.equal(s6.snapshot_id, w8.snapshot_id)
    assert.are.same({ kept = true }, w8.boot_packet.state.handover)
    assert.are.equal(1, w8.boot_packet.state.memory.k)
    local log = log_of(h, "arc")
    assert.are.equal(5, log.head)
    assert.are.same({ "run", "run", "remember", "run", "handover" },
      { log.entries[1].kind, log.entries[2].kind, log.entries[3].kind, log.entries[4].kind, log.entries[5].kind })
    verify(h, "arc")
  end)

  it("several failures in a row, then success: each failed call is 503, every later call is 200", function()
    local _, w = h:wake("arc")
    assert.are.equal(200, (h:post("/v1/run", { session_id = w.session_id, input = 0 })))
    local mark = #h:hostlog()
    touch(flag)
    for i = 1, 5 do
      local st, b, raw = h:post("/v1/run", { session_id = w.session_id, input = { lost = i } })
      is_error(503, "unavailable", st, b, raw, said_since(h, mark))
    end
    os.remove(flag)
    for i = 1, 5 do
      local st, r, raw = h:post("/v1/run", { session_id = w.session_id, input = { kept = i } })
      assert.are.equal(200, st, raw .. said_since(h, mark))
      assert.are.equal(1 + i, r.cursor)
    end
    local log, raw = log_of(h, "arc")
    assert.are.equal(6, log.head)
    assert.is_nil(raw:find("lost", 1, true))
    verify(h, "arc")
  end)

  it("a crash right after a failed fsync does not bring back the refused writes", function()
    local _, w = h:wake("arc")
    assert.are.equal(200, (h:post("/v1/run", { session_id = w.session_id, input = { n = 1 } })))
    local mark = #h:hostlog()
    touch(flag)
    local st1, b1, raw1 = h:post("/v1/run", { session_id = w.session_id, input = { ghost = "run" } })
    is_error(503, "unavailable", st1, b1, raw1, said_since(h, mark))
    local st2, b2, raw2 = h:post("/v1/sleep", { session_id = w.session_id, handover = { ghost = "sleep" } })
    is_error(503, "unavailable", st2, b2, raw2, said_since(h, mark))
    h:signal("KILL")
    os.remove(flag)
    local log_before_restart = h:hostlog()
    h:restart()
    local log, raw = log_of(h, "arc")
    assert.is_nil(raw:find("ghost", 1, true), "a write answered 503 is in the log after a restart: " .. raw
      .. "\n--- host stderr before the restart:\n" .. log_before_restart:sub(mark + 1))
    assert.are.equal(1, log.head, raw)
    verify(h, "arc")
    -- the session survived (its sleep failed) and goes on from cursor 1
    local st3, r3, raw3 = h:post("/v1/run", { session_id = w.session_id, input = { n = 2 } })
    assert.are.equal(200, st3, raw3)
    assert.are.equal(2, r3.cursor)
  end)
end)
