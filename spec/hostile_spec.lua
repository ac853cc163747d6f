-- hostile_spec.lua -- hostile HTTP over raw TCP against a real host: garbage,
-- oversize and malformed framing, request smuggling shapes, slow and vanishing
-- clients, hostile JSON and hostile ids, the connection limit.  Every test
-- ends by checking that the host still answers GET /healthz 200.
--
-- Expected statuses: http.h/http.c answer 431 past the header limit, 413 past
-- the body limit, 408 to a request not whole within --request-timeout, 503 past
-- --max-connections, and 400 to anything http_parser refuses; bodies the
-- engine refuses are the contract's 400 bad_request.
local H = require "host"
local cjson = require "cjson"
local socket = require "socket"

-- ---- helpers ---------------------------------------------------------------

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

local function connect(h, timeout)
  local host, port = h.url:match("http://([%d%.]+):(%d+)")
  local c = assert(socket.tcp())
  c:settimeout(timeout or 3)
  assert(c:connect(host, tonumber(port)))
  c:setoption("tcp-nodelay", true)
  return c
end

-- Reads until the peer closes or the timeout; returns the bytes and "closed"
-- or "timeout".
local function read_all(c)
  local parts = {}
  while true do
    local s, err, partial = c:receive(65536)
    if s then parts[#parts + 1] = s
    else
      if partial and #partial > 0 then parts[#parts + 1] = partial end
      return table.concat(parts), err
    end
  end
end

-- Splits a byte stream into HTTP responses (framed by Content-Length).
local function responses(data)
  local out, pos = {}, 1
  while pos <= #data do
    local hend = data:find("\r\n\r\n", pos, true)
    if not hend then
      out[#out + 1] = { garbage = data:sub(pos) }
      break
    end
    local head = data:sub(pos, hend - 1)
    local len = tonumber(head:lower():match("\ncontent%-length: *(%d+)")) or 0
    local body = data:sub(hend + 4, hend + 3 + len)
    local ok, decoded = pcall(cjson.decode, body)
    out[#out + 1] = { status = tonumber(head:match("^HTTP/1%.1 (%d%d%d) ")), head = head, raw = body,
                      body = ok and decoded or nil }
    pos = hend + 4 + len
  end
  return out
end

-- One connection: send the bytes, read to the end; returns the responses,
-- how the read ended, and the raw bytes.
local function exchange(h, bytes, timeout)
  local c = connect(h, timeout)
  local ok, err = c:send(bytes)
  local data, how = read_all(c)
  c:close()
  return responses(data), how, data, ok and nil or err
end

-- A request as bytes; the last request on a connection says Connection: close.
local function req(method, path, body, opts)
  opts = opts or {}
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: mw.test" }
  if opts.token then lines[#lines + 1] = "Authorization: Bearer " .. opts.token end
  if body then
    lines[#lines + 1] = "Content-Type: application/json"
    lines[#lines + 1] = "Content-Length: " .. #body
  end
  for _, l in ipairs(opts.headers or {}) do lines[#lines + 1] = l end
  if opts.close ~= false then lines[#lines + 1] = "Connection: close" end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

local function wake_body(actor) return cjson.encode({ actor_id = actor }) end

-- Asserts exactly one answer with this status (and the error shape for errors).
local function one_answer(status, rs, how, data)
  local why = "got: " .. tostring(data)
  assert.are.equal(1, #rs, why)
  assert.are.equal(status, rs[1].status, why)
  if status >= 400 then
    assert.is_table(rs[1].body, why)
    assert.is_table(rs[1].body.error, why)
    assert.is_string(rs[1].body.error.code, why)
    assert.is_true(#rs[1].body.error.code > 0, why)
    assert.is_string(rs[1].body.error.message, why)
    assert.is_true(#rs[1].body.error.message > 0, why)
  end
  assert.are.equal("closed", how, "the host should close the connection: " .. why)
  return rs[1]
end

local function is_error(status, code, st, body, raw)
  local why = "answer: " .. tostring(st) .. " " .. tostring(raw)
  assert.are.equal(status, st, why)
  assert.is_table(body, why)
  assert.is_table(body.error, why)
  assert.are.equal(code, body.error.code, why)
  assert.is_string(body.error.message, why)
  assert.is_true(#body.error.message > 0, why)
end

-- The host is alive and serving.
local function serving(h)
  assert.is_true(h:alive(), "the host process is gone: " .. h:hostlog())
  local st, body, raw = h:get("/healthz")
  assert.are.equal(200, st, raw)
  assert.are.equal("ok", body.status, raw)
end

-- The actor is not awake (no request of the test reached the engine as a wake).
local function never_woke(h, actor)
  local st, w, raw = h:wake(actor)
  assert.are.equal(200, st, "the actor was left awake: " .. tostring(raw))
  assert.are.equal(0, w.boot_packet.cursor)
end

local function log_head(h, actor)
  local st, body, raw = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=1000", h.operator)
  if st == 404 then return 0, {} end
  assert.are.equal(200, st, raw)
  return body.head, body.entries
end

local function metric(h, name)
  local st, _, raw = h:get("/metrics")
  assert.are.equal(200, st)
  return tonumber(raw:match("\n" .. name:gsub("%p", "%%%0") .. " (%d+)"))
end

-- Waits (briefly) until the host holds at most n open connections.
local function open_connections_drop_to(h, n)
  local deadline, got = socket.gettime() + 3, nil
  repeat
    got = metric(h, "mw_http_connections_open")
    if got <= n then return end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  assert.is_true(got <= n, "open connections stay at " .. tostring(got) .. ", expected <= " .. n)
end

local function session(h, actor)
  local st, w, raw = h:wake(actor)
  assert.are.equal(200, st, raw)
  return w.session_id
end

-- ---- framing ------------------------------------------------------------------

describe("hostile HTTP framing", function()
  local box = shared_host()

  it("garbage bytes are 400 and the connection is closed", function()
    local h = box.h
    local tls_hello = "\22\3\1\2\0\1\0\1\252\3\3" .. ("\0"):rep(32) .. "\0\0\2\0\47\1\0\r\n\r\n"
    local noise = {}
    for i = 1, 4096 do noise[i] = string.char((i * 7919 + 13) % 256) end
    for _, bytes in ipairs { tls_hello, "\1" .. table.concat(noise), "hello there\r\n\r\n",
                             "GET\r\n\r\n", " / HTTP/1.1\r\n\r\n" } do
      local rs, how, data = exchange(h, bytes)
      local r = one_answer(400, rs, how, data)
      assert.are.equal("bad_request", r.body.error.code)
    end
    serving(h)
  end)

  it("headers over 16 KiB are 431; just under is served", function()
    local h = box.h
    local big = req("GET", "/healthz", nil, { headers = { "X-Big: " .. ("a"):rep(17 * 1024) } })
    local many = {}
    for i = 1, 700 do many[i] = ("X-H%d: %s"):format(i, ("b"):rep(20)) end
    local cases = { big, req("GET", "/healthz", nil, { headers = many }),
                    req("GET", "/healthz?" .. ("q"):rep(17 * 1024)),
                    req("GET", "/healthz", nil, { headers = { ("X-" .. ("n"):rep(17 * 1024)) .. ": v" } }) }
    for _, bytes in ipairs(cases) do
      one_answer(431, exchange(h, bytes))
    end
    local rs, how, data = exchange(h, req("GET", "/healthz", nil, { headers = { "X-Big: " .. ("a"):rep(15 * 1024) } }))
    one_answer(200, rs, how, data)
    serving(h)
  end)

  it("a request split into one-byte writes is served", function()
    local h = box.h
    local actor = A"bytes"
    local bytes = req("POST", "/v1/wake", wake_body(actor), { token = h.agent })
    local c = connect(h)
    for i = 1, #bytes do
      assert(c:send(bytes:sub(i, i)))
      if i % 4 == 0 then socket.sleep(0.001) end
    end
    local data, how = read_all(c)
    c:close()
    local r = one_answer(200, responses(data), how, data)
    assert.are.equal(actor, r.body.boot_packet.actor_id)
    -- the session is real
    local st = h:post("/v1/sleep", { session_id = r.body.session_id })
    assert.are.equal(200, st)
    serving(h)
  end)

  it("pipelined requests in one write are answered in order", function()
    local h = box.h
    local p1, p2 = A"p1", A"p2"
    local bytes = req("POST", "/v1/wake", wake_body(p1), { token = h.agent, close = false })
      .. req("GET", "/healthz", nil, { close = false })
      .. req("POST", "/v1/run", "{not json", { token = h.agent, close = false })
      .. req("POST", "/v1/wake", wake_body(p2), { token = h.agent })
    local rs, how, data = exchange(h, bytes)
    assert.are.equal(4, #rs, data)
    assert.are.equal("closed", how)
    assert.are.same({ 200, 200, 400, 200 }, { rs[1].status, rs[2].status, rs[3].status, rs[4].status })
    assert.are.equal(p1, rs[1].body.boot_packet.actor_id)
    assert.are.equal("ok", rs[2].body.status)
    assert.are.equal("bad_request", rs[3].body.error.code)
    assert.are.equal(p2, rs[4].body.boot_packet.actor_id)
    -- keep-alive until the last: only the last answer says close
    assert.is_truthy(rs[1].head:lower():match("connection: keep%-alive"))
    assert.is_truthy(rs[4].head:lower():match("connection: close"))
    serving(h)
  end)

  it("a client that disconnects mid-request costs nothing", function()
    local h = box.h
    local baseline = metric(h, "mw_http_connections_open")
    local actor = A"half"
    local full = req("POST", "/v1/wake", wake_body(actor), { token = h.agent })
    local cuts = {
      full:sub(1, 10),                                  -- in the request line
      full:sub(1, full:find("\r\n\r\n") - 5),           -- in the headers
      full:sub(1, #full - 5),                           -- in the body
    }
    for _, part in ipairs(cuts) do
      local c = connect(h)
      assert(c:send(part))
      socket.sleep(0.01)
      c:close()
    end
    -- and one that resets instead of closing
    local c = connect(h)
    assert(c:send(cuts[3]))
    c:setoption("linger", { on = true, timeout = 0 })
    c:close()
    serving(h)
    open_connections_drop_to(h, baseline)
    never_woke(h, actor)
  end)

  it("a client that disconnects mid-response costs nothing", function()
    local h = box.h
    local actor = A"big"
    local sid = session(h, actor)
    -- a 700 KB log entry, so that each answer below is bigger than the socket buffers
    local st, _, raw = h:post("/v1/run", { session_id = sid, input = ("z"):rep(700 * 1024) })
    assert.are.equal(200, st, raw)
    local baseline = metric(h, "mw_http_connections_open")
    local one = req("GET", "/v1/actors/" .. actor .. "/log?limit=1000", nil, { token = h.operator, close = false })
    for _, reset in ipairs { true, false } do
      local c = connect(h)
      assert(c:send(one:rep(4)))
      local first = c:receive(1024)
      assert.is_truthy(first and first:match("^HTTP/1%.1 200"), tostring(first))
      if reset then c:setoption("linger", { on = true, timeout = 0 }) end
      c:close()
    end
    serving(h)
    open_connections_drop_to(h, baseline)
    -- the host still serves the big answer whole
    local st2, body = h:get("/v1/actors/" .. actor .. "/log?limit=1000", h.operator)
    assert.are.equal(200, st2)
    assert.are.equal(700 * 1024, #body.entries[1].body.input)
  end)

  it("bare LF line endings: served or refused with 400 (RFC 7230 3.5), never anything else", function()
    local h = box.h
    local rs, how, data = exchange(h, "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n")
    assert.are.equal(1, #rs, data)
    local st = rs[1].status
    assert.is_true(st == 200 or st == 400, data)
    one_answer(st, rs, how, data)
    if st == 200 then assert.are.equal("ok", rs[1].body.status) end
    -- the same for a request with a body: framed by its Content-Length either way
    local actor = A"lf"
    local body = wake_body(actor)
    rs, how, data = exchange(h, "POST /v1/wake HTTP/1.1\nHost: x\nAuthorization: Bearer " .. h.agent
      .. "\nContent-Length: " .. #body .. "\nConnection: close\n\n" .. body)
    assert.are.equal(1, #rs, data)
    assert.is_true(rs[1].status == 200 or rs[1].status == 400, data)
    if rs[1].status == 200 then assert.are.equal(actor, rs[1].body.boot_packet.actor_id) end
    serving(h)
  end)

  it("duplicate Content-Length is 400, and nothing reaches the engine", function()
    local h = box.h
    local actor = A"dupcl"
    local body = wake_body(actor)
    for _, lens in ipairs { { #body, #body }, { #body, 2 }, { 2, #body } } do
      local bytes = "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
        .. "\r\nContent-Length: " .. lens[1] .. "\r\nContent-Length: " .. lens[2]
        .. "\r\nConnection: close\r\n\r\n" .. body
      local rs, how, data = exchange(h, bytes)
      assert.is_true(#rs >= 1, data)
      local r = one_answer(400, { rs[1] }, how, data)
      assert.are.equal("bad_request", r.body.error.code)
      assert.are.equal(1, #rs, "more than one answer: " .. data)
    end
    never_woke(h, actor)
    serving(h)
  end)

  it("Content-Length together with Transfer-Encoding: chunked is 400, and nothing reaches the engine", function()
    local h = box.h
    local actor = A"clte"
    local body = wake_body(actor)
    local chunked = ("%x\r\n%s\r\n0\r\n\r\n"):format(#body, body)
    local smuggle = req("POST", "/v1/wake", wake_body(A"smuggled"), { token = h.agent })
    for _, hdrs in ipairs {
      { "Content-Length: " .. #chunked, "Transfer-Encoding: chunked" },
      { "Transfer-Encoding: chunked", "Content-Length: " .. #chunked },
      { "Content-Length: 4", "Transfer-Encoding: chunked" },
    } do
      local bytes = "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent .. "\r\n"
        .. table.concat(hdrs, "\r\n") .. "\r\n\r\n" .. chunked .. smuggle
      local rs, how, data = exchange(h, bytes)
      assert.are.equal(1, #rs, "more than one answer: " .. data)
      local r = one_answer(400, rs, how, data)
      assert.are.equal("bad_request", r.body.error.code)
    end
    never_woke(h, actor)
    never_woke(h, A"smuggled")
    serving(h)
  end)

  it("a chunk size that overflows is 400; a huge one is cut at the body limit with 413", function()
    local h = box.h
    local actor = A"chunk"
    local head = "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
      .. "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    local r = one_answer(400, exchange(h, head .. "FFFFFFFFFFFFFFFFFFFFFFFF\r\n" .. wake_body(actor) .. "\r\n0\r\n\r\n"))
    assert.are.equal("bad_request", r.body.error.code)
    -- 4 GiB announced; the host must stop reading past 1 MiB
    local c = connect(h, 5)
    assert(c:send(head .. "100000000\r\n"))
    local piece = ("a"):rep(64 * 1024)
    for _ = 1, 18 do                        -- 1.125 MiB
      if not c:send(piece) then break end
    end
    local data, how = read_all(c)
    c:close()
    r = one_answer(413, responses(data), how, data)
    assert.are.equal("payload_too_large", r.body.error.code)
    never_woke(h, actor)
    serving(h)
  end)

  it("obsolete header folding: refused with 400 or unfolded (RFC 7230 3.2.4), never misread", function()
    local h = box.h
    local rs, how, data = exchange(h, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  b\r\nConnection: close\r\n\r\n")
    assert.are.equal(1, #rs, data)
    assert.is_true(rs[1].status == 200 or rs[1].status == 400, data)
    one_answer(rs[1].status, rs, how, data)
    -- a folded Authorization is either refused or read as "Bearer <token>"
    rs, how, data = exchange(h, "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n " .. h.operator
      .. "\r\nConnection: close\r\n\r\n")
    assert.are.equal(1, #rs, data)
    assert.is_true(rs[1].status == 200 or rs[1].status == 400, data)
    one_answer(rs[1].status, rs, how, data)
    serving(h)
  end)

  it("NUL bytes in the URL or a header are 400", function()
    local h = box.h
    local actor = A"nul"
    local body = wake_body(actor)
    for _, bytes in ipairs {
      "GET /heal\0thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "POST /v1/wake\0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent .. "\r\nContent-Length: " .. #body
        .. "\r\nConnection: close\r\n\r\n" .. body,
      "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent .. "\0\r\nContent-Length: " .. #body
        .. "\r\nConnection: close\r\n\r\n" .. body,
      "POST /v1/wake HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\nAuthorization: Bearer " .. h.agent .. "\r\nContent-Length: "
        .. #body .. "\r\nConnection: close\r\n\r\n" .. body,
      "POST /v1/wake HTTP/1.1\r\nHost: x\r\nX-\0A: b\r\nAuthorization: Bearer " .. h.agent .. "\r\nContent-Length: "
        .. #body .. "\r\nConnection: close\r\n\r\n" .. body,
    } do
      local r = one_answer(400, exchange(h, bytes))
      assert.are.equal("bad_request", r.body.error.code)
    end
    never_woke(h, actor)
    serving(h)
  end)
end)

-- ---- hostile JSON -----------------------------------------------------------------

describe("hostile JSON", function()
  local box = shared_host()

  it("100,000 '[' is 400, not a crash; on run it commits nothing", function()
    local h = box.h
    local actor = A"deep"
    is_error(400, "bad_request", h:post("/v1/wake", '{"actor_id":"' .. actor .. '","x":' .. ("["):rep(100000)))
    is_error(400, "bad_request", h:post("/v1/wake", ("["):rep(100000) .. ("]"):rep(100000)))
    is_error(400, "bad_request", h:post("/v1/wake", ('{"a":'):rep(100000) .. "1" .. ("}"):rep(100000)))
    local sid = session(h, actor)
    is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. sid .. '","input":'
      .. ("["):rep(100000) .. ("]"):rep(100000) .. "}"))
    assert.are.equal(0, log_head(h, actor))
    serving(h)
  end)

  it("1e999999 is 400; on run it commits nothing", function()
    local h = box.h
    local actor = A"huge"
    for _, lit in ipairs { "1e999999", "-1e999999", "1E+999999", ("9"):rep(400) .. ".0e999" } do
      is_error(400, "bad_request", h:post("/v1/wake", '{"actor_id":"' .. actor .. '","x":' .. lit .. "}"))
    end
    local sid = session(h, actor)
    is_error(400, "bad_request", h:post("/v1/run", '{"session_id":"' .. sid .. '","input":1e999999}'))
    assert.are.equal(0, log_head(h, actor))
    serving(h)
  end)

  it("123456789012345678901234567890 is accepted as a double or refused with 400", function()
    local h = box.h
    local actor = A"bigint"
    local sid = session(h, actor)
    local st, r, raw = h:post("/v1/run", '{"session_id":"' .. sid .. '","input":123456789012345678901234567890}')
    assert.is_true(st == 200 or st == 400, raw)
    if st == 200 then
      local head, entries = log_head(h, actor)
      assert.are.equal(1, head)
      assert.is_number(entries[1].body.input)
      assert.is_true(math.abs(entries[1].body.input - 1.2345678901234568e29) < 1e15)
      assert.are.equal(1, r.cursor)
    else
      is_error(400, "bad_request", st, r, raw)
      assert.are.equal(0, log_head(h, actor))
    end
    serving(h)
  end)

  it("a byte order mark at the start of the body is 400; on run it commits nothing", function()
    local h = box.h
    local actor = A"bom"
    is_error(400, "bad_request", h:post("/v1/wake", "\xEF\xBB\xBF" .. wake_body(actor)))
    local sid = session(h, actor)
    is_error(400, "bad_request", h:post("/v1/run", "\xEF\xBB\xBF" .. cjson.encode({ session_id = sid, input = 1 })))
    assert.are.equal(0, log_head(h, actor))
    serving(h)
  end)
end)

-- ---- hostile ids ------------------------------------------------------------------------

describe("hostile actor ids", function()
  local box = shared_host()

  local in_body = {
    { "two dots", ".." },
    { "a dot", "." },
    { "a path", "../etc" },
    { "a slash", "a/b" },
    { "a backslash", "a\\b" },
    { "a NUL", "arc\0" },
    { "65 chars", ("a"):rep(65) },
    { "1000 chars", ("a"):rep(1000) },
    { "Cyrillic a", "\u{430}rc" },
    { "fullwidth letters", "\u{FF41}\u{FF52}\u{FF43}" },
    { "a zero-width space", "arc\u{200B}" },
    { "a combining accent", "arc\u{301}" },
    { "a right-to-left override", "\u{202E}cra" },
    { "a newline", "arc\n" },
    { "a percent escape", "arc%2F" },
  }
  for _, c in ipairs(in_body) do
    it("in the body, " .. c[1] .. ": 400", function()
      local h = box.h
      is_error(400, "bad_request", h:wake(c[2]))
      is_error(400, "bad_request", h:post("/v1/load", { actor_id = c[2] }, h.operator))
      serving(h)
    end)
  end

  -- Paths name an actor that exists, "arc", so that a lax decoding would show.
  local in_path = {
    { "two dots", ".." },
    { "two encoded dots", "%2e%2e" },
    { "an encoded slash", "arc%2Fx" },
    { "an encoded NUL after a real actor", "arc%00x" },
    { "an encoded NUL at the end", "arc%00" },
    { "65 chars", ("a"):rep(65) },
    { "200 chars", ("a"):rep(200) },
    { "Cyrillic a", "%D0%B0rc" },
    { "fullwidth letters", "%EF%BD%81%EF%BD%92%EF%BD%83" },
    { "a zero-width space", "arc%E2%80%8B" },
    { "a bad percent escape", "arc%zz" },
  }
  for _, c in ipairs(in_path) do
    it("in the path, " .. c[1] .. ": 400", function()
      local h = box.h
      local st = h:post("/v1/actors/arc/direction", { direction = "x" }, h.operator)
      assert.are.equal(200, st)
      local head = log_head(h, "arc")
      local wrong = {}
      for _, route in ipairs { { "GET", "log" }, { "GET", "snapshots" }, { "POST", "replay", '{"to":0}' },
                               { "POST", "direction", '{"direction":"through a bad id"}' } } do
        local path = "/v1/actors/" .. c[2] .. "/" .. route[2]
        local st2, body, raw = h:request(route[1], path, route[3], h.operator)
        if st2 ~= 400 or type(body) ~= "table" or type(body.error) ~= "table" or body.error.code ~= "bad_request"
           or type(body.error.message) ~= "string" or body.error.message == "" then
          wrong[#wrong + 1] = route[1] .. " " .. path .. " -> " .. tostring(st2) .. " " .. raw:sub(1, 120)
        end
      end
      -- nothing was written to the real actor through the malformed id
      local head2 = log_head(h, "arc")
      if head2 ~= head then wrong[#wrong + 1] = "arc's log moved from " .. head .. " to " .. head2 end
      assert.are.same({}, wrong)
      serving(h)
    end)
  end
end)

-- ---- limits on time and connections ------------------------------------------------------

describe("a slow client", function()
  local box = shared_host({ args = "--request-timeout 300" })

  it("dribbling bytes past --request-timeout is answered 408 and closed", function()
    local h = box.h
    local actor = A"slow"
    local c = connect(h)
    local t0 = socket.gettime()
    assert(c:send("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent .. "\r\nX-Slow: "))
    c:settimeout(0)
    local got, how = {}, nil
    while socket.gettime() - t0 < 3 do
      socket.sleep(0.05)
      local ok = c:send("a")
      local s, err, partial = c:receive(65536)
      got[#got + 1] = s or partial
      if err == "closed" or not ok then how = "closed"; break end
    end
    c:close()
    local elapsed = socket.gettime() - t0
    local data = table.concat(got)
    assert.are.equal("closed", how, "still open after " .. elapsed .. " s")
    assert.is_true(elapsed >= 0.25, "closed too early: " .. elapsed)
    assert.is_true(elapsed < 2, "closed too late: " .. elapsed)
    local rs = responses(data)
    assert.are.equal(1, #rs, data)
    assert.are.equal(408, rs[1].status, data)
    assert.is_string(rs[1].body.error.message)
    never_woke(h, actor)
    serving(h)
  end)

  it("a request sent in pieces within the timeout is served", function()
    local h = box.h
    local actor = A"pieces"
    local bytes = req("POST", "/v1/wake", wake_body(actor), { token = h.agent })
    local c = connect(h)
    local third = #bytes // 3
    assert(c:send(bytes:sub(1, third)))
    socket.sleep(0.08)
    assert(c:send(bytes:sub(third + 1, 2 * third)))
    socket.sleep(0.08)
    assert(c:send(bytes:sub(2 * third + 1)))
    local data, how = read_all(c)
    c:close()
    local r = one_answer(200, responses(data), how, data)
    assert.are.equal(actor, r.body.boot_packet.actor_id)
    serving(h)
  end)
end)

describe("the connection limit", function()
  local box = shared_host({ args = "--max-connections 4" })

  it("past --max-connections a new connection gets 503 and is closed; the host serves again once one goes", function()
    local h = box.h
    local idle = {}
    for i = 1, 4 do
      local c = connect(h)
      -- one keep-alive request each, so the host has surely accepted and counted them
      assert(c:send(req("GET", "/healthz", nil, { close = false })))
      local line = c:receive("*l")
      assert.are.equal("HTTP/1.1 200 OK", line)
      while true do
        local l = assert(c:receive("*l"))
        if l == "" then break end
      end
      assert(c:receive(31))   -- {"cortex":"dark","status":"ok"}
      idle[i] = c
    end
    local c5 = connect(h)
    c5:send(req("GET", "/healthz"))
    local data, how = read_all(c5)
    c5:close()
    local r = one_answer(503, responses(data), how, data)
    assert.are.equal("unavailable", r.body.error.code)
    for _, c in ipairs(idle) do c:close() end
    -- the host notices the closes; it serves again
    local deadline, st = socket.gettime() + 3, nil
    repeat
      st = h:get("/healthz")
      if st == 200 then break end
      socket.sleep(0.02)
    until socket.gettime() > deadline
    serving(h)
    assert.is_true(metric(h, "mw_http_connections_rejected_total") >= 1)
  end)
end)
