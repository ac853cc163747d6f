-- sources_spec.lua -- sources and the delta over HTTP against a real host:
-- the roster (GET /v1/sources), every locator kind pulled through POST
-- /v1/delta against real local data the test makes under a temp root (a
-- file, a folder, a git repository, feeds served by the test itself, another
-- actor's log), one locator feeding both subjects through a policy, the
-- shared consolidation point, a slow source that delays nothing else, bad
-- input as one clear error entry per source, ctx.delta and feedback in a
-- skill, and the briefing's sources leg that is never empty.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"
require("socket.http").TIMEOUT = 20

-- ---- helpers ------------------------------------------------------------------

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local dirs, hosts, feeds = {}, {}, {}

local function sh(cmd)
  local out, code = H.sh(cmd)
  assert(code == 0, "command failed (" .. tostring(code) .. "): " .. cmd .. "\n" .. out)
  return out
end

-- A fresh directory (removed by cleanup).
local function tmpdir()
  local name = os.tmpname()
  os.remove(name)
  sh("mkdir -p " .. q(name))
  dirs[#dirs + 1] = name
  return name
end

local function write(path, text)
  os.execute("mkdir -p " .. q(path:match("^(.*)/[^/]*$")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function append(path, text)
  local f = assert(io.open(path, "ab"))
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

local function eventually(fn, secs)
  local deadline = socket.gettime() + (secs or 3)
  repeat
    local v = fn()
    if v then return v end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  return fn()
end

-- A host on a new home: files (path relative to the home -> text) are written
-- before it starts; args are extra serve flags.
local function serve(files, args)
  local home = os.tmpname()
  os.remove(home)
  local out = H.sh(H.mw .. " init --home " .. q(home) .. " --json")
  local ok, t = pcall(cjson.decode, out)
  assert(ok and type(t) == "table", "mw init --home " .. home .. ": " .. out)
  for path, text in pairs(files or {}) do write(home .. "/" .. path, text) end
  local h = H.start({ home = home, args = args })
  h.agent, h.operator = t.agent_token, t.operator_token
  h.args = args
  hosts[#hosts + 1] = h
  return h
end

-- A feed server in a child process: GET /NAME answers the bytes of DIR/NAME
-- (read at each request, so the test may change them), after sleeping the
-- seconds in DIR/NAME.delay when that file exists; a NAME ending in .nolen is
-- sent without Content-Length.  One connection at a time.
local SERVER = [[
local socket = require "socket"
local dir, portfile = arg[1], arg[2]
local function read(p) local f = io.open(p, "rb"); if not f then return nil end; local s = f:read("a"); f:close(); return s end
local srv = assert(socket.bind("127.0.0.1", 0))
local _, port = srv:getsockname()
local f = assert(io.open(portfile .. ".tmp", "w")); f:write(port); f:close()
os.rename(portfile .. ".tmp", portfile)
while true do
  local c = srv:accept()
  if c then
    c:settimeout(5)
    local line = c:receive("*l") or ""
    local name = line:match("^GET /([%w%._%-]+)")
    repeat local l = c:receive("*l") until not l or l == ""
    local delay = name and tonumber(read(dir .. "/" .. name .. ".delay") or "")
    if delay then socket.sleep(delay) end
    local body = name and read(dir .. "/" .. name)
    if body then
      local hdr = "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
      if not name:match("%.nolen$") then hdr = hdr .. "Content-Length: " .. #body .. "\r\n" end
      c:send(hdr .. "\r\n")
      c:send(body)
    else
      c:send("HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    end
    c:close()
  end
end
]]

local function start_feed(files)
  local dir = tmpdir()
  for name, body in pairs(files or {}) do write(dir .. "/" .. name, body) end
  write(dir .. "/.server.lua", SERVER)
  local portfile = dir .. "/.port"
  local p = io.popen("lua5.4 " .. q(dir .. "/.server.lua") .. " " .. q(dir) .. " " .. q(portfile) ..
                     " >/dev/null 2>&1 & echo $!")
  local pid = tonumber(p:read("l"))
  p:close()
  feeds[#feeds + 1] = pid
  local port = eventually(function()
    local f = io.open(portfile, "rb")
    if not f then return nil end
    local s = f:read("a")
    f:close()
    return tonumber(s)
  end, 5)
  assert(port, "the feed server did not start")
  return { pid = pid, port = port, dir = dir, url = "http://127.0.0.1:" .. port .. "/" }
end

-- Stops every host (checking it did not die on its own) and feed server, and
-- removes every temporary directory made so far.
local function cleanup()
  local dead = {}
  for i = #hosts, 1, -1 do
    local h = hosts[i]
    if not h:alive() then dead[#dead + 1] = "host on " .. h.home .. " died:\n" .. h:hostlog() end
    if h:hostlog():match("AddressSanitizer") then dead[#dead + 1] = h:hostlog() end
    h:stop()
    hosts[i] = nil
  end
  for i = #feeds, 1, -1 do
    os.execute("kill " .. feeds[i] .. " 2>/dev/null")
    feeds[i] = nil
  end
  for i = #dirs, 1, -1 do
    os.execute("chmod -R u+rwx " .. q(dirs[i]) .. " 2>/dev/null; rm -rf " .. q(dirs[i]))
    dirs[i] = nil
  end
  assert(#dead == 0, table.concat(dead, "\n"))
end

local function wake(h, actor)
  local st, w, raw = h:wake(actor)
  assert(st == 200, "wake " .. actor .. ": " .. tostring(st) .. " " .. tostring(raw))
  return w.session_id, w
end

local function delta(h, sid, source)
  return h:post("/v1/delta", { session_id = sid, source = source })
end

-- POST /v1/delta, expecting 200; returns the answer.
local function delta_ok(h, sid, source)
  local st, d, raw = delta(h, sid, source)
  assert(st == 200, "delta: " .. tostring(st) .. " " .. tostring(raw) .. "\n" .. h:hostlog())
  assert.is_table(d.items)
  assert.is_table(d.errors)
  return d
end

local function op_delta(h, actor, source)
  return h:post("/v1/actors/" .. actor .. "/delta", source and { source = source } or {}, h.operator)
end

local function op_delta_ok(h, actor, source)
  local st, d, raw = op_delta(h, actor, source)
  assert(st == 200, "operator delta: " .. tostring(st) .. " " .. tostring(raw))
  return d
end

local function of_source(items, src)
  local out = {}
  for _, it in ipairs(items) do
    if it.source == src then out[#out + 1] = it end
  end
  return out
end

local function field(items, key)
  local out = {}
  for _, it in ipairs(items) do out[#out + 1] = it[key] end
  return out
end

local function sorted(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c
end

-- The error entry of one source, asserting there is exactly one.
local function error_of(d, src)
  local found
  for _, e in ipairs(d.errors) do
    if e.source == src then
      assert(not found, "two error entries for " .. src)
      found = e
    end
  end
  assert(found, "no error entry for " .. src .. " in " .. cjson.encode(d.errors))
  assert.is_string(found.code)
  assert.is_string(found.message)
  return found
end

local function no_errors(d)
  assert(#d.errors == 0, "unexpected errors: " .. cjson.encode(d.errors))
end

local function log_of(h, actor)
  local st, body = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  assert.are.equal(200, st)
  return body.entries
end

local function git(repo, args)
  return sh("git -C " .. q(repo) .. " -c user.name=t -c user.email=t@t " .. args)
end

-- Every item of a delta carries the shape the contract gives it.
local function check_items(d, src)
  for _, it in ipairs(d.items) do
    assert.is_string(it.id)
    assert.is_string(it.source)
    assert.are.equal(it.source .. "/", it.id:sub(1, #it.source + 1))
    assert.is_table(it.subjects)
    assert.is_true(#it.subjects >= 1)
    assert.is_number(it.score)
    if src then assert.are.equal(src, it.source) end
  end
end

-- ---- the roster -----------------------------------------------------------------

describe("the roster", function()
  local h, root
  local roster = {
    { id = "notes", locator = "file:%s/notes.txt", does = "the mentee's running notes", subjects = { "atividade" } },
    { id = "repo", locator = "git:%s/repo", does = "the mentee's project history",
      subjects = { "atividade", "mundo" }, policy = "default", deadline_ms = 3000 },
    { id = "drop", locator = "dir:%s/drop", does = "what lands in the drop folder", subjects = { "mundo" } },
    { id = "news", locator = "http://127.0.0.1:9/feed.xml", does = "the field's news feed", subjects = { "mundo" } },
    { id = "peer", locator = "log:mentor", does = "what the mentor actor did", subjects = { "mundo" } },
  }

  local function roster_lua()
    local parts = {}
    for _, s in ipairs(roster) do
      local subs = {}
      for _, x in ipairs(s.subjects) do subs[#subs + 1] = string.format("%q", x) end
      parts[#parts + 1] = string.format("{ id = %q, locator = %q, does = %q, subjects = { %s }%s%s }",
        s.id, s.locator:format(root), s.does, table.concat(subs, ", "),
        s.policy and string.format(", policy = %q", s.policy) or "",
        s.deadline_ms and string.format(", deadline_ms = %d", s.deadline_ms) or "")
    end
    return "return {\n  " .. table.concat(parts, ",\n  ") .. "\n}\n"
  end

  setup(function()
    root = tmpdir()
    write(root .. "/notes.txt", "")
    sh("mkdir -p " .. q(root .. "/repo") .. " " .. q(root .. "/drop"))
    h = serve({ ["tenants/default/roster.lua"] = roster_lua() }, "--root " .. root)
  end)
  teardown(cleanup)

  it("GET /v1/sources (operator) lists the roster exactly, in order", function()
    local st, body, raw = h:get("/v1/sources", h.operator)
    assert.are.equal(200, st, raw)
    assert.is_table(body.sources)
    local got = {}
    for i, s in ipairs(body.sources) do
      got[i] = { id = s.id, locator = s.locator, does = s.does, subjects = sorted(s.subjects) }
      local keys = {}
      for k in pairs(s) do keys[#keys + 1] = k end
      assert.are.same({ "does", "id", "locator", "subjects" }, sorted(keys))
    end
    local want = {}
    for i, s in ipairs(roster) do
      want[i] = { id = s.id, locator = s.locator:format(root), does = s.does, subjects = sorted(s.subjects) }
    end
    assert.are.same(want, got)
  end)

  it("GET /v1/sources with an agent token is 403 forbidden; with none, 401", function()
    local st, body = h:get("/v1/sources", h.agent)
    assert.are.equal(403, st)
    assert.are.equal("forbidden", body.error.code)
    st = h:get("/v1/sources", false)
    assert.are.equal(401, st)
  end)

  it("the briefing's sources leg has one entry per declared source, with its does and feedback", function()
    local _, w = wake(h, "reader")
    local leg = w.boot_packet.briefing.sources
    assert.are.equal(#roster, #leg)
    for i, s in ipairs(roster) do
      assert.are.equal(s.id, leg[i].id)
      assert.are.equal(s.locator:format(root), leg[i].locator)
      assert.are.equal(s.does, leg[i].does)
      assert.are.same(sorted(s.subjects), sorted(leg[i].subjects))
      assert.is_table(leg[i].feedback)
    end
  end)
end)

describe("no roster", function()
  local h
  setup(function() h = serve() end)
  teardown(cleanup)

  it("GET /v1/sources is an empty list, the sources leg is the actor's own log, the delta is empty", function()
    local st, body, raw = h:get("/v1/sources", h.operator)
    assert.are.equal(200, st)
    assert.is_truthy(raw:find('"sources":[]', 1, true), raw)
    assert.are.equal(0, #body.sources)
    local sid, w = wake(h, "solo")
    local leg = w.boot_packet.briefing.sources
    assert.are.equal(1, #leg)
    assert.are.equal("log:solo", leg[1].locator)
    assert.is_string(leg[1].id)
    assert.is_true(#leg[1].does > 0)
    assert.is_table(leg[1].subjects)
    assert.is_true(#leg[1].subjects >= 1)
    local d = delta_ok(h, sid)
    assert.are.equal(0, #d.items)
    no_errors(d)
    -- a named source that is not declared: 404
    local st2, e = delta(h, sid, "nosuch")
    assert.are.equal(404, st2)
    assert.are.equal("not_found", e.error.code)
  end)
end)

-- ---- each locator kind ------------------------------------------------------------

describe("each locator through POST /v1/delta", function()
  local h, root, feed
  local RSS = [[<?xml version="1.0"?>
<rss version="2.0"><channel><title>news</title>
<item><title>First story</title><link>http://example.org/1</link><guid>rss-1</guid>
<pubDate>Mon, 01 Jun 2026 10:00:00 GMT</pubDate><description>one</description></item>
<item><title>Second story</title><link>http://example.org/2</link><guid>rss-2</guid></item>
</channel></rss>]]
  local ATOM = [[<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>log</title>
<entry><title>Atom one</title><id>urn:a:1</id><link href="http://example.org/a1"/><updated>2026-06-01T10:00:00Z</updated><summary>s1</summary></entry>
<entry><title>Atom two</title><id>urn:a:2</id><link rel="alternate" href="http://example.org/a2"/></entry>
</feed>]]

  setup(function()
    root = tmpdir()
    feed = start_feed({
      ["feed.json"] = cjson.encode({ items = { { id = "1", title = "a" }, { id = "2", title = "b" } } }),
      ["rss.xml"] = RSS,
      ["atom.xml"] = ATOM,
      ["list.json"] = '[{"guid":"g1","text":"x"},{"link":"http://l/2","text":"y"}]',
    })
    write(root .. "/notes.txt", "")
    sh("mkdir -p " .. q(root .. "/drop") .. " " .. q(root .. "/repo"))
    git(root .. "/repo", "init -q")
    local roster = string.format([[
return {
  { id = "notes", locator = "file:%s/notes.txt", does = "notes", subjects = { "atividade" } },
  { id = "drop", locator = "dir:%s/drop", does = "a folder", subjects = { "mundo" } },
  { id = "repo", locator = "git:%s/repo", does = "a repository", subjects = { "atividade", "mundo" } },
  { id = "jfeed", locator = "%sfeed.json", does = "a JSON feed", subjects = { "mundo" } },
  { id = "jlist", locator = "%slist.json", does = "a JSON array feed", subjects = { "mundo" } },
  { id = "rss", locator = "%srss.xml", does = "an RSS feed", subjects = { "mundo" } },
  { id = "atom", locator = "%satom.xml", does = "an Atom feed", subjects = { "mundo" } },
  { id = "peer", locator = "log:peer", does = "the peer's log", subjects = { "mundo" } },
}]], root, root, root, feed.url, feed.url, feed.url, feed.url)
    h = serve({ ["tenants/default/roster.lua"] = roster }, "--root " .. root)
  end)
  teardown(cleanup)

  it("file: appended lines only; a partial line waits; rotation and truncation restart at 0", function()
    local path = root .. "/notes.txt"
    write(path, "one\ntwo\n")
    local sid = wake(h, "f1")
    local d = delta_ok(h, sid, "notes")
    no_errors(d)
    check_items(d, "notes")
    assert.are.same({ "one", "two" }, field(d.items, "text"))
    assert.are.same({ "line", "line" }, field(d.items, "kind"))
    assert.are.same({ 0, 4 }, field(d.items, "offset"))
    assert.are.same({ "atividade" }, d.items[1].subjects)
    assert.are.equal(1, d.items[1].score)
    -- nothing new: nothing
    assert.are.equal(0, #delta_ok(h, sid, "notes").items)
    -- appended lines, and a partial last line that waits for its newline
    append(path, "three\nfour\nfiv")
    d = delta_ok(h, sid, "notes")
    assert.are.same({ "three", "four" }, field(d.items, "text"))
    append(path, "e\n")
    d = delta_ok(h, sid, "notes")
    assert.are.same({ "five" }, field(d.items, "text"))
    -- rotation: the file is moved away and a new one takes its name
    assert(os.rename(path, path .. ".1"))
    write(path, "new-a\n")
    d = delta_ok(h, sid, "notes")
    no_errors(d)
    assert.are.same({ "new-a" }, field(d.items, "text"))
    append(path, "new-b\n")
    assert.are.same({ "new-b" }, field(delta_ok(h, sid, "notes").items, "text"))
    -- truncation in place (same inode), shorter than the offset
    write(path, "t1\n")
    assert.are.same({ "t1" }, field(delta_ok(h, sid, "notes").items, "text"))
    -- truncation in place, then grown back past the old offset
    write(path, "rewritten from the start\nand more\n")
    assert.are.same({ "rewritten from the start", "and more" }, field(delta_ok(h, sid, "notes").items, "text"))
    os.remove(path .. ".1")
  end)

  it("dir: files added and changed since the horizon, nothing else", function()
    local dir = root .. "/drop"
    write(dir .. "/a.txt", "a")
    write(dir .. "/keep.txt", "k")
    local sid = wake(h, "d1")
    local d = delta_ok(h, sid, "drop")
    no_errors(d)
    check_items(d, "drop")
    assert.are.same({ "a.txt", "keep.txt" }, sorted(field(d.items, "path")))
    assert.are.same({ "file", "file" }, field(d.items, "kind"))
    for _, it in ipairs(d.items) do
      assert.are.equal(1, it.size)
      assert.is_number(it.mtime_ms)
    end
    assert.are.equal(0, #delta_ok(h, sid, "drop").items)
    socket.sleep(0.05)
    write(dir .. "/a.txt", "changed")
    write(dir .. "/b.txt", "bb")
    sh("mkdir -p " .. q(dir .. "/sub"))   -- a folder is not a file
    d = delta_ok(h, sid, "drop")
    no_errors(d)
    assert.are.same({ "a.txt", "b.txt" }, sorted(field(d.items, "path")))
    local sizes = {}
    for _, it in ipairs(d.items) do sizes[it.path] = it.size end
    assert.are.same({ ["a.txt"] = 7, ["b.txt"] = 2 }, sizes)
    assert.are.equal(0, #delta_ok(h, sid, "drop").items)
  end)

  it("git: commits oldest first; more commits -> only the new ones", function()
    local repo = root .. "/repo"
    git(repo, "commit -q --allow-empty -m c1")
    git(repo, "commit -q --allow-empty -m c2")
    local sid = wake(h, "g1")
    local d = delta_ok(h, sid, "repo")
    no_errors(d)
    check_items(d, "repo")
    assert.are.same({ "c1", "c2" }, field(d.items, "subject"))
    for _, it in ipairs(d.items) do
      assert.are.equal("commit", it.kind)
      assert.are.equal("t", it.author)
      assert.is_number(it.at)
      assert.is_truthy(it.id:match("^repo/%x+$"))
    end
    local head = sh("git -C " .. q(repo) .. " rev-parse HEAD"):match("%x+")
    assert.are.equal("repo/" .. head, d.items[2].id)
    assert.are.equal(0, #delta_ok(h, sid, "repo").items)
    git(repo, "commit -q --allow-empty -m c3")
    git(repo, "commit -q --allow-empty -m c4")
    d = delta_ok(h, sid, "repo")
    no_errors(d)
    assert.are.same({ "c3", "c4" }, field(d.items, "subject"))
  end)

  it("http: JSON (object and array), RSS and Atom feeds served by the test; more items -> only the new ones", function()
    local sid = wake(h, "h1")
    local d = delta_ok(h, sid, "jfeed")
    no_errors(d)
    check_items(d, "jfeed")
    assert.are.same({ "jfeed/1", "jfeed/2" }, field(d.items, "id"))
    assert.are.same({ "a", "b" }, field(d.items, "title"))
    assert.are.same({ "mundo" }, d.items[1].subjects)
    -- the feed grows: only the new item
    write(feed.dir .. "/feed.json",
      cjson.encode({ items = { { id = "3", title = "c" }, { id = "1", title = "a" }, { id = "2", title = "b" } } }))
    d = delta_ok(h, sid, "jfeed")
    assert.are.same({ "jfeed/3" }, field(d.items, "id"))
    assert.are.equal(0, #delta_ok(h, sid, "jfeed").items)

    d = delta_ok(h, sid, "jlist")
    no_errors(d)
    assert.are.same({ "jlist/g1", "jlist/http://l/2" }, field(d.items, "id"))
    assert.are.same({ "x", "y" }, field(d.items, "text"))

    d = delta_ok(h, sid, "rss")
    no_errors(d)
    check_items(d, "rss")
    assert.are.same({ "rss/rss-1", "rss/rss-2" }, field(d.items, "id"))
    assert.are.same({ "First story", "Second story" }, field(d.items, "title"))
    assert.are.same({ "http://example.org/1", "http://example.org/2" }, field(d.items, "link"))
    assert.are.equal(1780308000000, d.items[1].at)   -- 2026-06-01T10:00:00Z
    assert.are.equal("one", d.items[1].text)

    d = delta_ok(h, sid, "atom")
    no_errors(d)
    assert.are.same({ "atom/urn:a:1", "atom/urn:a:2" }, field(d.items, "id"))
    assert.are.same({ "Atom one", "Atom two" }, field(d.items, "title"))
    assert.are.same({ "http://example.org/a1", "http://example.org/a2" }, field(d.items, "link"))
    assert.are.equal(1780308000000, d.items[1].at)
    -- a new Atom entry
    write(feed.dir .. "/atom.xml", ATOM:gsub("</feed>",
      '<entry><title>Atom three</title><id>urn:a:3</id><link href="http://example.org/a3"/></entry></feed>'))
    d = delta_ok(h, sid, "atom")
    assert.are.same({ "atom/urn:a:3" }, field(d.items, "id"))
  end)

  it("log: another actor's log entries since the cursor", function()
    local psid = wake(h, "peer")
    local st = h:post("/v1/run", { session_id = psid, input = { x = 1 } })
    assert.are.equal(200, st)
    st = h:post("/v1/sleep", { session_id = psid, handover = { next = "more" } })
    assert.are.equal(200, st)
    local sid = wake(h, "l1")
    local d = delta_ok(h, sid, "peer")
    no_errors(d)
    check_items(d, "peer")
    assert.are.same({ "run", "handover" }, field(d.items, "kind"))
    assert.are.same({ 1, 2 }, field(d.items, "cursor"))
    assert.are.same({ input = { x = 1 }, skill = "default" }, d.items[1].body)
    assert.are.same({ handover = { next = "more" }, reason = "sleep" }, d.items[2].body)
    assert.is_number(d.items[1].ts)
    assert.are.equal(0, #delta_ok(h, sid, "peer").items)
    -- the peer works again: only its new entries
    psid = wake(h, "peer")
    h:post("/v1/run", { session_id = psid, input = { x = 2 } })
    h:post("/v1/sleep", { session_id = psid, handover = "again" })
    d = delta_ok(h, sid, "peer")
    assert.are.same({ 3, 4 }, field(d.items, "cursor"))
    assert.are.same({ input = { x = 2 }, skill = "default" }, d.items[1].body)
  end)

  it("a delta over every source answers each one's items together, each id prefixed by its source", function()
    -- every source has something of its own, whatever ran before
    write(root .. "/notes.txt", "all-1\n")
    write(root .. "/drop/all.txt", "all")
    git(root .. "/repo", "commit -q --allow-empty -m all")
    local psid = wake(h, "peer")
    h:post("/v1/run", { session_id = psid, input = "all" })
    h:post("/v1/sleep", { session_id = psid })
    local sid = wake(h, "all")
    local d = delta_ok(h, sid)
    no_errors(d)
    check_items(d)
    local seen = {}
    for _, it in ipairs(d.items) do seen[it.source] = true end
    for _, s in ipairs { "notes", "drop", "repo", "jfeed", "jlist", "rss", "atom", "peer" } do
      assert.is_true(seen[s] == true, "no items from " .. s)
    end
    -- the ids are unique
    local ids = {}
    for _, it in ipairs(d.items) do
      assert.is_nil(ids[it.id], it.id)
      ids[it.id] = true
    end
    local d2 = delta_ok(h, sid)
    no_errors(d2)
    assert.are.equal(0, #d2.items)
  end)
end)

-- ---- one locator, two subjects --------------------------------------------------

describe("one locator feeding both subjects", function()
  local h, root
  setup(function()
    root = tmpdir()
    write(root .. "/mixed.txt", table.concat({
      "world: a release", "self: wrote tests!", "both: shipped!", "skip this", "", "plain" }, "\n") .. "\n")
    local loc = "file:" .. root .. "/mixed.txt"
    h = serve({
      ["tenants/default/roster.lua"] = string.format([[
return {
  { id = "both", locator = %q, does = "all of it", subjects = { "mundo", "atividade" } },
  { id = "split", locator = %q, does = "split by the policy", subjects = { "mundo", "atividade" }, policy = "split" },
  { id = "narrow", locator = %q, does = "the world only", subjects = { "mundo" }, policy = "split" },
}]], loc, loc, loc),
      ["tenants/default/policies/split.lua"] = [[
return {
  filter = function(item, source) return item.text ~= "" and not item.text:find("^skip") end,
  score = function(item, source) return item.text:find("!$") and 5 or 1 end,
  subjects = function(item, source)
    if item.text:find("^world:") then return { "mundo" } end
    if item.text:find("^self:") then return { "atividade" } end
    if item.text:find("^both:") then return { "atividade", "mundo" } end
    return source.subjects
  end,
}]],
    }, "--root " .. root)
  end)
  teardown(cleanup)

  local function by_text(items)
    local t = {}
    for _, it in ipairs(items) do t[it.text] = it end
    return t
  end

  it("the default policy tags every item with both subjects", function()
    local sid = wake(h, "s1")
    local d = delta_ok(h, sid, "both")
    no_errors(d)
    assert.are.equal(6, #d.items)
    for _, it in ipairs(d.items) do
      assert.are.same({ "atividade", "mundo" }, sorted(it.subjects))
      assert.are.equal(1, it.score)
    end
  end)

  it("a policy tags some items only mundo, filters and scores", function()
    local sid = wake(h, "s2")
    local d = delta_ok(h, sid, "split")
    no_errors(d)
    local t = by_text(d.items)
    assert.are.same({ "both: shipped!", "plain", "self: wrote tests!", "world: a release" },
      sorted(field(d.items, "text")))
    assert.are.same({ "mundo" }, t["world: a release"].subjects)
    assert.are.same({ "atividade" }, t["self: wrote tests!"].subjects)
    assert.are.same({ "atividade", "mundo" }, sorted(t["both: shipped!"].subjects))
    assert.are.same({ "atividade", "mundo" }, sorted(t["plain"].subjects))
    assert.are.equal(5, t["self: wrote tests!"].score)
    assert.are.equal(5, t["both: shipped!"].score)
    assert.are.equal(1, t["plain"].score)
    assert.are.equal(1, t["world: a release"].score)
  end)

  it("a source that may feed only mundo never yields atividade, even when its policy says so", function()
    local sid = wake(h, "s3")
    local d = delta_ok(h, sid, "narrow")
    no_errors(d)
    assert.are.same({ "both: shipped!", "plain", "world: a release" }, sorted(field(d.items, "text")))
    for _, it in ipairs(d.items) do
      assert.are.same({ "mundo" }, it.subjects)
    end
  end)

  it("the same locator is blind to subject: one raw item, one id within the source, in every source", function()
    local sid = wake(h, "s4")
    local d = delta_ok(h, sid)
    no_errors(d)
    local raw = {}
    for _, it in ipairs(d.items) do
      local src, rid = it.id:match("^([^/]+)/(.*)$")
      assert.are.equal(it.source, src)
      raw[it.text] = raw[it.text] or {}
      raw[it.text][src] = rid
    end
    local w = raw["world: a release"]
    assert.is_string(w.both)
    assert.are.equal(w.both, w.split)
    assert.are.equal(w.both, w.narrow)
    assert.is_nil(raw["self: wrote tests!"].narrow)
  end)
end)

-- ---- consolidation ----------------------------------------------------------------

describe("consolidation", function()
  local h, root
  setup(function()
    root = tmpdir()
    write(root .. "/notes.txt", "")
    h = serve({ ["tenants/default/roster.lua"] = string.format([[
return { { id = "notes", locator = "file:%s/notes.txt", does = "notes", subjects = { "atividade" } } }]], root) },
      "--root " .. root)
  end)
  teardown(cleanup)

  it("the operator's delta and the session's delta share the actor's consolidation point", function()
    local path = root .. "/notes.txt"
    write(path, "1\n2\n")
    -- the operator's delta, for an actor that is not awake (and never was)
    local d = op_delta_ok(h, "cons")
    no_errors(d)
    assert.are.same({ "1", "2" }, field(d.items, "text"))
    append(path, "3\n")
    local sid = wake(h, "cons")
    d = delta_ok(h, sid)
    assert.are.same({ "3" }, field(d.items, "text"))
    append(path, "4\n")
    d = op_delta_ok(h, "cons", "notes")
    assert.are.same({ "4" }, field(d.items, "text"))
    assert.are.equal(0, #delta_ok(h, sid, "notes").items)
    assert.are.equal(0, #op_delta_ok(h, "cons").items)
    -- another actor has its own point
    assert.are.same({ "1", "2", "3", "4" }, field(op_delta_ok(h, "other").items, "text"))
    h:post("/v1/sleep", { session_id = sid })
  end)

  it("the point is durable: a restart keeps it", function()
    local path = root .. "/notes.txt"
    write(path, "a\n")
    assert.are.same({ "a" }, field(op_delta_ok(h, "dur").items, "text"))
    append(path, "b\n")
    h:restart({ args = h.args })
    assert.are.same({ "b" }, field(op_delta_ok(h, "dur").items, "text"))
    assert.are.equal(0, #op_delta_ok(h, "dur").items)
  end)

  it("the operator's delta: agent token 403, unknown source 404, malformed actor 400, unknown session 404", function()
    local st, b = h:post("/v1/actors/cons/delta", {}, h.agent)
    assert.are.equal(403, st)
    assert.are.equal("forbidden", b.error.code)
    st, b = op_delta(h, "cons", "nosuch")
    assert.are.equal(404, st)
    assert.are.equal("not_found", b.error.code)
    st = h:post("/v1/actors/" .. string.rep("x", 70) .. "/delta", {}, h.operator)
    assert.are.equal(400, st)
    st, b = delta(h, "ses_00000000000000000000000000000000")
    assert.are.equal(404, st)
    assert.are.equal("unknown_session", b.error.code)
  end)
end)

-- ---- a slow source ------------------------------------------------------------------

describe("a slow source", function()
  local h, root, slow, fast
  setup(function()
    root = tmpdir()
    write(root .. "/notes.txt", "n1\nn2\n")
    slow = start_feed({ ["feed.json"] = '{"items":[{"id":"late"}]}', ["feed.json.delay"] = "3" })
    fast = start_feed({ ["feed.json"] = '{"items":[{"id":"quick"}]}' })
    h = serve({ ["tenants/default/roster.lua"] = string.format([[
return {
  { id = "slow", locator = "%sfeed.json", does = "a slow feed", subjects = { "mundo" }, deadline_ms = 500 },
  { id = "notes", locator = "file:%s/notes.txt", does = "notes", subjects = { "atividade" } },
  { id = "fast", locator = "%sfeed.json", does = "a fast feed", subjects = { "mundo" } },
}]], slow.url, root, fast.url) }, "--root " .. root)
  end)
  teardown(cleanup)

  it("is an entry in errors after about its deadline, while the other sources' items are returned", function()
    local sid = wake(h, "waiter")
    local t0 = socket.gettime()
    local d = delta_ok(h, sid)
    local took = socket.gettime() - t0
    assert.is_true(took >= 0.45, "answered in " .. took .. " s, before the deadline")
    assert.is_true(took < 1.5, "answered in " .. took .. " s, long past the 500 ms deadline")
    local e = error_of(d, "slow")
    assert.are.equal(1, #d.errors)
    assert.is_truthy(e.message:find("500"), e.message)
    assert.are.same({ "n1", "n2" }, field(of_source(d.items, "notes"), "text"))
    assert.are.same({ "fast/quick" }, field(of_source(d.items, "fast"), "id"))
    assert.are.equal(0, #of_source(d.items, "slow"))
  end)

  it("does not delay a concurrent wake of another actor", function()
    local sid = wake(h, "waiter2")
    local host, port = h.url:match("http://([%d%.]+):(%d+)")
    local c = assert(socket.tcp())
    c:settimeout(5)
    assert(c:connect(host, tonumber(port)))
    local body = cjson.encode({ session_id = sid })
    local t0 = socket.gettime()
    assert(c:send("POST /v1/delta HTTP/1.1\r\nHost: " .. host .. "\r\nAuthorization: Bearer " .. h.agent ..
      "\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body))
    socket.sleep(0.05)   -- the delta is under way
    local t1 = socket.gettime()
    local st = h:wake("bystander")
    local took = socket.gettime() - t1
    assert.are.equal(200, st)
    assert.is_true(took < 0.3, "the wake took " .. took .. " s while a delta waited on a slow source")
    -- the delta had not answered yet: the wake really ran beside it
    c:settimeout(0)
    local early, err = c:receive(1)
    assert.is_nil(early)
    assert.are.equal("timeout", err)
    c:settimeout(5)
    local status = c:receive("*l")
    local len
    repeat
      local l = c:receive("*l")
      local n = l and l:lower():match("^content%-length:%s*(%d+)")
      if n then len = tonumber(n) end
    until not l or l == ""
    local answer = c:receive(len)
    c:close()
    local took_delta = socket.gettime() - t0
    assert.is_truthy(status:match("^HTTP/1%.1 200"), status)
    local d = cjson.decode(answer)
    error_of(d, "slow")
    assert.are.same({ "n1", "n2" }, field(of_source(d.items, "notes"), "text"))
    assert.is_true(took_delta < 2, "the delta took " .. took_delta .. " s")
  end)
end)

-- ---- bad input ----------------------------------------------------------------------

describe("bad input", function()
  local h, root, feed
  setup(function()
    root = tmpdir()
    write(root .. "/notes.txt", "ok-1\nok-2\n")
    write(root .. "/gone.txt", "here\n")
    write(root .. "/swap.txt", "inside\n")
    sh("mkdir -p " .. q(root .. "/plain"))
    -- 10 MB of a valid JSON feed, over the 8 MiB cap
    local big = '{"items":[' .. string.rep('{"id":"x","pad":"' .. string.rep("p", 1000) .. '"},', 10000) ..
      '{"id":"last"}]}'
    feed = start_feed({
      ["plain.txt"] = "hello, world: this is not a feed\n",
      ["page.html"] = "<html><body>not a feed</body></html>",
      ["broken.xml"] = "<rss><channel><item><title>cut",
      ["big.json"] = big,
      ["big.nolen"] = big,
      ["good.json"] = '{"items":[{"id":"g"}]}',
    })
    h = serve({ ["tenants/default/roster.lua"] = string.format([[
return {
  { id = "notes", locator = "file:%s/notes.txt", does = "notes", subjects = { "atividade" } },
  { id = "text", locator = "%splain.txt", does = "not a feed", subjects = { "mundo" } },
  { id = "html", locator = "%spage.html", does = "a web page", subjects = { "mundo" } },
  { id = "broken", locator = "%sbroken.xml", does = "cut XML", subjects = { "mundo" } },
  { id = "big", locator = "%sbig.json", does = "10 MB with a length", subjects = { "mundo" } },
  { id = "bignolen", locator = "%sbig.nolen", does = "10 MB without a length", subjects = { "mundo" } },
  { id = "good", locator = "%sgood.json", does = "a good feed", subjects = { "mundo" } },
  { id = "notrepo", locator = "git:%s/plain", does = "a folder, not a repository", subjects = { "atividade" } },
  { id = "gone", locator = "file:%s/gone.txt", does = "a file that will vanish", subjects = { "atividade" } },
  { id = "swap", locator = "file:%s/swap.txt", does = "a file that becomes a symlink", subjects = { "atividade" } },
}]], root, feed.url, feed.url, feed.url, feed.url, feed.url, feed.url, root, root, root) }, "--root " .. root)
  end)
  teardown(cleanup)

  it("a feed that is neither XML nor JSON (or XML that is no feed) is a clear error for that source", function()
    local sid = wake(h, "b1")
    local d = delta_ok(h, sid, "text")
    assert.are.equal(0, #d.items)
    local e = error_of(d, "text")
    assert.are.equal("bad_request", e.code)
    assert.is_truthy(e.message:find("neither JSON nor RSS/Atom", 1, true), e.message)
    e = error_of(delta_ok(h, sid, "html"), "html")
    assert.is_truthy(e.message:find("neither JSON nor RSS/Atom", 1, true), e.message)
    assert.is_truthy(e.message:find("html", 1, true), e.message)
    e = error_of(delta_ok(h, sid, "broken"), "broken")
    assert.is_truthy(e.message:find("XML error", 1, true) or e.message:find("neither", 1, true), e.message)
  end)

  it("an oversized feed (10 MB, with and without Content-Length) is a clear error", function()
    local sid = wake(h, "b2")
    local d = delta_ok(h, sid, "big")
    assert.are.equal(0, #d.items)
    local e = error_of(d, "big")
    assert.are.equal("payload_too_large", e.code)
    assert.is_truthy(e.message:find("feed over 8388608 bytes", 1, true), e.message)
    d = delta_ok(h, sid, "bignolen")
    e = error_of(d, "bignolen")
    assert.are.equal("payload_too_large", e.code)
    assert.is_truthy(e.message:find("feed over", 1, true), e.message)
  end)

  it("a git path that is not a repository is a clear error", function()
    local sid = wake(h, "b3")
    local d = delta_ok(h, sid, "notrepo")
    assert.are.equal(0, #d.items)
    local e = error_of(d, "notrepo")
    assert.are.equal("bad_request", e.code)
    assert.is_truthy(e.message:find("is not a git repository", 1, true), e.message)
  end)

  it("a file that vanished between deltas is a clear error; back again, it is read from the start", function()
    local path = root .. "/gone.txt"
    local sid = wake(h, "b4")
    assert.are.same({ "here" }, field(delta_ok(h, sid, "gone").items, "text"))
    assert(os.remove(path))
    local d = delta_ok(h, sid, "gone")
    assert.are.equal(0, #d.items)
    local e = error_of(d, "gone")
    assert.are.equal("not_found", e.code)
    assert.is_truthy(e.message:find("vanished", 1, true), e.message)
    write(path, "back\n")
    d = delta_ok(h, sid, "gone")
    no_errors(d)
    assert.are.same({ "back" }, field(d.items, "text"))
  end)

  it("a file replaced by a symlink pointing outside the roots is refused at the pull", function()
    local outside = tmpdir()
    write(outside .. "/secret.txt", "outside the root\n")
    local path = root .. "/swap.txt"
    local sid = wake(h, "b5")
    assert.are.same({ "inside" }, field(delta_ok(h, sid, "swap").items, "text"))
    assert(os.remove(path))
    sh("ln -s " .. q(outside .. "/secret.txt") .. " " .. q(path))
    local d = delta_ok(h, sid, "swap")
    assert.are.equal(0, #d.items)
    local e = error_of(d, "swap")
    assert.is_truthy(e.message:find("outside the configured roots", 1, true), e.message)
    assert.is_nil(d.items[1])
    os.remove(path)
    write(path, "inside\n")
  end)

  it("every bad source is its own error entry in one delta; the good ones answer; the host serves on", function()
    write(root .. "/gone.txt", "here\n")
    local sid = wake(h, "b6")
    os.remove(root .. "/gone.txt")
    local d = delta_ok(h, sid)
    for _, s in ipairs { "text", "html", "broken", "big", "bignolen", "notrepo", "gone" } do error_of(d, s) end
    assert.are.equal(7, #d.errors)
    assert.are.same({ "ok-1", "ok-2" }, field(of_source(d.items, "notes"), "text"))
    assert.are.same({ "good/g" }, field(of_source(d.items, "good"), "id"))
    assert.are.same({ "inside" }, field(of_source(d.items, "swap"), "text"))
    -- nothing else disturbed
    local st = h:get("/healthz", false)
    assert.are.equal(200, st)
    wake(h, "b6-other")
    assert.are.equal(200, (h:post("/v1/run", { session_id = sid, input = 1 })))
  end)
end)

-- ---- rosters refused when they load --------------------------------------------------

describe("a roster refused when it loads", function()
  local h, root, outside
  local roster_path
  local function roster(locs)
    local parts = {}
    for i, loc in ipairs(locs) do
      parts[i] = string.format('{ id = "s%d", locator = %q, does = "source %d", subjects = { "mundo" } }', i, loc, i)
    end
    return "return { " .. table.concat(parts, ", ") .. " }\n"
  end
  local function ids(h)
    local st, body = h:get("/v1/sources", h.operator)
    assert.are.equal(200, st)
    return field(body.sources, "id")
  end

  setup(function()
    root = tmpdir()
    outside = tmpdir()
    write(root .. "/notes.txt", "n\n")
    write(outside .. "/secret.txt", "s\n")
    sh("ln -s " .. q(outside .. "/secret.txt") .. " " .. q(root .. "/link.txt"))
    h = serve({ ["tenants/default/roster.lua"] = roster { "file:" .. root .. "/notes.txt", "ftp://example.org/feed" } },
      "--root " .. root)
    roster_path = h.home .. "/tenants/default/roster.lua"
  end)
  teardown(cleanup)

  it("an unknown scheme: no sources, the error in the host log, wakes go on; a good roster fixes it", function()
    assert.are.same({}, ids(h))
    local log = h:hostlog()
    assert.is_truthy(log:find("unknown scheme", 1, true), log)
    assert.is_truthy(log:find("roster", 1, true), log)
    local sid, w = wake(h, "r1")
    assert.are.equal(1, #w.boot_packet.briefing.sources)
    assert.are.equal("log:r1", w.boot_packet.briefing.sources[1].locator)
    -- a good roster on a reload
    replace(roster_path, roster { "file:" .. root .. "/notes.txt" })
    assert.are.same({ "s1" }, eventually(function()
      local got = ids(h)
      return #got > 0 and got or nil
    end))
    local d = delta_ok(h, sid)
    no_errors(d)
    assert.are.same({ "n" }, field(d.items, "text"))
  end)

  local function refused(loc, message)
    local before = #h:hostlog()
    replace(roster_path, roster { "file:" .. root .. "/notes.txt", loc })
    -- a new line in the host log, from this reload
    local log = eventually(function()
      local l = h:hostlog():sub(before + 1)
      return l:find(message, 1, true) and l or nil
    end)
    assert(log, "no \"" .. message .. "\" in the host log:\n" .. h:hostlog())
    -- the previous roster keeps serving
    assert.are.same({ "s1" }, ids(h))
    local st, status = h:get("/v1/status", h.operator)
    assert.are.equal(200, st)
    local function has(v)
      if type(v) == "string" then return v:find(message, 1, true) ~= nil end
      if type(v) == "table" then
        for _, x in pairs(v) do if has(x) then return true end end
      end
      return false
    end
    assert(has(status), "/v1/status does not say why: " .. cjson.encode(status))
    local d = op_delta_ok(h, "r-" .. message:gsub("%W", ""):sub(1, 20))
    no_errors(d)
    assert.are.same({ "n" }, field(d.items, "text"))
  end

  it("a path outside --root is refused; the previous roster keeps serving", function()
    refused("file:" .. outside .. "/secret.txt", "is outside the configured roots")
  end)

  it("a symlink inside the root pointing outside is refused", function()
    refused("file:" .. root .. "/link.txt", root .. "/link.txt resolves to " .. outside .. "/secret.txt, outside the configured roots")
  end)

  it("a path with .. is refused, even when it lands inside the root", function()
    refused("dir:" .. root .. "/sub/../", "segment: refused")
  end)

  it("a path source with no roots configured is refused", function()
    local h2 = serve({ ["tenants/default/roster.lua"] = roster { "file:" .. root .. "/notes.txt" } })
    local st, body = h2:get("/v1/sources", h2.operator)
    assert.are.equal(200, st)
    assert.are.equal(0, #body.sources)
    assert.is_truthy(h2:hostlog():find("no roots configured", 1, true), h2:hostlog())
  end)
end)

-- ---- ctx.delta and feedback in a skill ----------------------------------------------

describe("ctx.delta in a skill", function()
  local h, root
  setup(function()
    root = tmpdir()
    write(root .. "/notes.txt", "n1\nn2\nn3\n")
    write(root .. "/other.txt", "o1\no2\n")
    h = serve({
      ["tenants/default/roster.lua"] = string.format([[
return {
  { id = "notes", locator = "file:%s/notes.txt", does = "notes", subjects = { "atividade" } },
  { id = "other", locator = "file:%s/other.txt", does = "other notes", subjects = { "mundo" } },
  { id = "missing", locator = "file:%s/missing.txt", does = "a file that is not there", subjects = { "mundo" } },
}]], root, root, root),
      ["tenants/default/skills/pull.lua"] = [[
return { name = "pull", description = "pulls one source, then all, in one run",
  run = function(ctx, input)
    local one = ctx.delta("notes")
    ctx.stage("note", { after = "one", n = #one.items })
    local all = ctx.delta()
    ctx.stage("note", { after = "all", n = #all.items, errors = #all.errors })
    local texts = {}
    for _, it in ipairs(one.items) do texts[#texts + 1] = it.text end
    local other = {}
    for _, it in ipairs(all.items) do other[#other + 1] = it.source .. ":" .. it.text end
    local e = all.errors[1]
    return { types = { type(one), type(one.items), type(one.items[1]), type(all.errors), type(e) },
             texts = texts, other = other, nerrors = #all.errors, nitems_one = #one.items,
             error = e and { source = e.source, code = e.code, message = e.message } }
  end }]],
      ["tenants/default/skills/use.lua"] = [[
return { name = "use", description = "uses what it pulled and says how relevant it was",
  run = function(ctx, input)
    local d = ctx.delta()
    local ids = {}
    for _, it in ipairs(d.items) do ids[#ids + 1] = it.id end
    ctx.stage("note", { uses = ids })
    ctx.feedback("notes", 0.5)
    ctx.feedback("notes", -0.25, "less so")
    ctx.feedback("other", 1)
    return { ids = ids }
  end }]],
      ["tenants/default/skills/badsignal.lua"] = [[
return { name = "badsignal", description = "a signal out of range",
  run = function(ctx) ctx.stage("note", {}); ctx.feedback("notes", 2) end }]],
      ["tenants/default/skills/unknown.lua"] = [[
return { name = "unknown", description = "pulls a source that is not declared",
  run = function(ctx)
    local d = ctx.delta("nosuch")
    local e = d.errors[1]
    return { n = #d.errors, items = #d.items, error = e and { source = e.source, code = e.code, message = e.message } }
  end }]],
    }, "--root " .. root)
  end)
  teardown(cleanup)

  it("ctx.delta(source) and ctx.delta() answer tables in one run, which commits what was staged after", function()
    local sid = wake(h, "k1")
    local st, r, raw = h:post("/v1/run", { session_id = sid, skill = "pull", input = cjson.null })
    assert.are.equal(200, st, raw)
    local res = r.result
    assert.are.same({ "table", "table", "table", "table", "table" }, res.types)
    assert.are.same({ "n1", "n2", "n3" }, res.texts)
    -- notes were consolidated by the first pull: the second brings the rest
    assert.are.same({ "other:o1", "other:o2" }, res.other)
    assert.are.equal(1, res.nerrors)
    assert.are.equal("missing", res.error.source)
    assert.are.equal("not_found", res.error.code)
    assert.is_truthy(res.error.message:find("does not exist", 1, true), res.error.message)
    assert.are.equal(3, r.committed)
    local log = log_of(h, "k1")
    assert.are.same({ "run", "note", "note" }, field(log, "kind"))
    assert.are.same({ after = "one", n = 3 }, log[2].body)
    assert.are.same({ after = "all", n = 2, errors = 1 }, log[3].body)
    -- and the pulls moved the actor's consolidation point
    assert.are.equal(0, #delta_ok(h, sid).items)
  end)

  it("uses and ctx.feedback show, per source, in the sources leg after sleep and the next wake", function()
    local sid = wake(h, "k2")
    local st, r, raw = h:post("/v1/run", { session_id = sid, skill = "use", input = cjson.null })
    assert.are.equal(200, st, raw)
    assert.are.equal(5, #r.result.ids)
    assert.are.equal(200, (h:post("/v1/sleep", { session_id = sid })))
    local log = log_of(h, "k2")
    assert.are.same({ "run", "note", "feedback", "feedback", "feedback", "handover" }, field(log, "kind"))
    assert.are.same({ source = "notes", signal = 0.5 }, log[3].body)
    assert.are.same({ source = "notes", signal = -0.25, note = "less so" }, log[4].body)
    local _, w = wake(h, "k2")
    local fb = {}
    for _, s in ipairs(w.boot_packet.briefing.sources) do fb[s.id] = s.feedback end
    assert.are.equal(3, #w.boot_packet.briefing.sources)
    assert.are.same({ uses = 3, signals = 2, relevance = 0.25 }, fb.notes)
    assert.are.same({ uses = 2, signals = 1, relevance = 1 }, fb.other)
    assert.is_table(fb.missing)
    assert.is_true(fb.missing.uses == nil or fb.missing.uses == 0)
  end)

  it("ctx.feedback out of [-1, 1] fails the run: 422, nothing committed", function()
    local sid = wake(h, "k3")
    local st, r = h:post("/v1/run", { session_id = sid, skill = "badsignal", input = cjson.null })
    assert.are.equal(422, st)
    assert.are.equal("skill_error", r.error.code)
    assert.is_truthy(r.error.message:find("signal", 1, true), r.error.message)
    local lst, lb = h:get("/v1/actors/k3/log?from=1&limit=10", h.operator)
    assert.is_true(lst == 404 or #lb.entries == 0)
  end)

  it("ctx.delta of a source that is not declared is a clear not_found naming it", function()
    local sid = wake(h, "k4")
    local st, r, raw = h:post("/v1/run", { session_id = sid, skill = "unknown", input = cjson.null })
    if st == 200 then
      local e = r.result.error
      assert(e, "no error entry: " .. raw)
      assert(e.code == "not_found" and (e.source == "nosuch" or tostring(e.message):find("nosuch", 1, true)),
        "ctx.delta(\"nosuch\") answered " .. raw)
    else
      assert(st == 404 or st == 422, raw)
      assert(r.error.message:find("nosuch", 1, true) or r.error.message:find("no such source", 1, true), raw)
    end
  end)
end)
