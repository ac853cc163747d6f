-- hostile_spec.lua -- hostile HTTP over raw TCP against a real host: garbage,
-- oversize and malformed framing, request smuggling shapes, slow and vanishing
-- clients, hostile JSON and hostile ids, the connection limit.  Every test
-- ends by checking that the host still answers GET /healthz 200.
--
-- The plain request -> answer cases are ONE table, CASES (below): each row is
-- one hostile request with the contract's expected status (and error code
-- where the contract fixes it); one `it` per row, each followed by the
-- GET /healthz 200 check.  Cases that need choreography (byte-at-a-time and
-- pipelined writes, clients that vanish, slow clients, the connection limit)
-- stay separate `it`s after the table.
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
-- bytes may be a list of pieces, sent one after the other until one fails
-- (the host may answer and close before it has read them all).
local function exchange(h, bytes, timeout)
  local c = connect(h, timeout)
  local err
  for _, piece in ipairs(type(bytes) == "table" and bytes or { bytes }) do
    local ok, e = c:send(piece)
    if not ok then err = e; break end
  end
  local data, how = read_all(c)
  c:close()
  return responses(data), how, data, err
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

-- ---- the table of hostile requests --------------------------------------------------------
--
-- A row: name; bytes (a string, a list of pieces, or function(h) -> either);
-- status (the expected status, or a list when the contract and RFC 7230 allow
-- either of them); code (the error code, where the contract fixes it); actor
-- (an actor the request names that must not have been woken by it); check
-- (function(h, r, data): what else must hold afterwards).

-- "<<agent>>" and "<<operator>>" stand for the host's tokens.
-- As never_woke, then back to sleep: rows share actors.
local function untouched(h, actor)
  local st, w, text = h:wake(actor)
  assert.are.equal(200, st, "the actor was left awake: " .. tostring(text))
  assert.are.equal(0, w.boot_packet.cursor)
  assert.are.equal(200, (h:post("/v1/sleep", { session_id = w.session_id })))
end

local function raw(bytes)
  return function(h) return (bytes:gsub("<<(%a+)>>", function(k) return h[k] end)) end
end
local function post(path, body, role, headers)
  return function(h) return req("POST", path, body, { token = h[role or "agent"], headers = headers }) end
end
local function wake_with(fields)
  return post("/v1/wake", fields)
end
-- run on a fresh session of actor with this literal as input
local function run_with(actor, input_literal)
  return function(h)
    local sid = session(h, actor)
    return req("POST", "/v1/run", '{"session_id":"' .. sid .. '","input":' .. input_literal .. "}", { token = h.agent })
  end
end
local function commits_nothing(actor)
  return function(h) assert.are.equal(0, (log_head(h, actor))) end
end
-- the run committed one entry whose canonical body has this input
local function committed_input(actor, canonical)
  return function(h, r)
    assert.are.equal(1, r.body.cursor)
    local st, _, text = h:get("/v1/actors/" .. actor .. "/log?from=1&limit=10", h.operator)
    assert.are.equal(200, st, text)
    assert.is_truthy(text:find('"input":' .. canonical .. ',', 1, true)
                     or text:find('"input":' .. canonical .. '}', 1, true),
                     "the log does not hold input " .. canonical .. ": " .. text)
  end
end
local function woke(actor)
  return function(_, r) assert.are.equal(actor, r.body.boot_packet.actor_id) end
end

local function chunked_wake(h, actor, size_line)
  local body = wake_body(actor)
  return "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
    .. "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    .. (size_line or ("%x"):format(#body)) .. "\r\n" .. body .. "\r\n0\r\n\r\n"
end

local CASES = {}
local function add(row) CASES[#CASES + 1] = row end

-- HTTP framing: garbage and request lines ---------------------------------------------------
local noise = {}
for i = 1, 4096 do noise[i] = string.char((i * 7919 + 13) % 256) end
add { name = "a TLS ClientHello", status = 400, code = "bad_request",
      bytes = "\22\3\1\2\0\1\0\1\252\3\3" .. ("\0"):rep(32) .. "\0\0\2\0\47\1\0\r\n\r\n" }
add { name = "4 KiB of binary noise", status = 400, code = "bad_request", bytes = "\1" .. table.concat(noise) }
add { name = "a line of prose", status = 400, code = "bad_request", bytes = "hello there\r\n\r\n" }
add { name = "a method alone", status = 400, code = "bad_request", bytes = "GET\r\n\r\n" }
add { name = "a request line that starts with a space", status = 400, code = "bad_request", bytes = " / HTTP/1.1\r\n\r\n" }
-- http_parser takes a request line with no version as HTTP/0.9; the contract
-- does not say, so served or refused are both allowed
add { name = "an HTTP/0.9 request line (no version): served or 400", status = { 200, 400 },
      bytes = "GET /healthz\r\n\r\n" }
add { name = "the HTTP/2 connection preface", status = 400, code = "bad_request",
      bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" }
add { name = "a method in lower case", status = { 400, 404 },
      bytes = "get /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" }
add { name = "an unknown method", status = { 400, 404 },
      bytes = "BREW /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" }
add { name = "a space inside the URL", status = 400, code = "bad_request",
      bytes = "GET /heal thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" }
add { name = "an absolute-form URL is served (RFC 7230 5.3.2)", status = 200,
      bytes = "GET http://mw.test/healthz HTTP/1.1\r\nHost: mw.test\r\nConnection: close\r\n\r\n",
      check = function(_, r) assert.are.equal("ok", r.body.status) end }

-- HTTP framing: line endings, folding, malformed headers, NUL bytes ---------------------------
add { name = "bare LF line endings: served or 400 (RFC 7230 3.5)", status = { 200, 400 },
      bytes = "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n",
      check = function(_, r) if r.status == 200 then assert.are.equal("ok", r.body.status) end end }
add { name = "bare LF on a request with a body: served or 400, framed by its Content-Length", status = { 200, 400 },
      bytes = function(h)
        local body = wake_body("hx-lf")
        return "POST /v1/wake HTTP/1.1\nHost: x\nAuthorization: Bearer " .. h.agent
          .. "\nContent-Length: " .. #body .. "\nConnection: close\n\n" .. body
      end,
      check = function(_, r) if r.status == 200 then assert.are.equal("hx-lf", r.body.boot_packet.actor_id) end end }
add { name = "obsolete header folding: 400 or unfolded (RFC 7230 3.2.4)", status = { 200, 400 },
      bytes = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  b\r\nConnection: close\r\n\r\n" }
add { name = "a folded Authorization: 400 or read as Bearer <token>", status = { 200, 400 },
      bytes = raw"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n <<operator>>\r\nConnection: close\r\n\r\n" }
add { name = "a header line with no colon", status = 400, code = "bad_request",
      bytes = "GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\nConnection: close\r\n\r\n" }
add { name = "NUL in the URL", status = 400, code = "bad_request",
      bytes = "GET /heal\0thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" }
do
  local body = wake_body("hx-nul")
  local tail = "\r\nContent-Length: " .. #body .. "\r\nConnection: close\r\n\r\n" .. body
  add { name = "NUL at the end of a POST's URL", status = 400, code = "bad_request", actor = "hx-nul",
        bytes = raw("POST /v1/wake\0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>" .. tail) }
  add { name = "NUL after the bearer token", status = 400, code = "bad_request", actor = "hx-nul",
        bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\0" .. tail) }
  add { name = "NUL in a header value", status = 400, code = "bad_request", actor = "hx-nul",
        bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\nAuthorization: Bearer <<agent>>" .. tail) }
  add { name = "NUL in a header name", status = 400, code = "bad_request", actor = "hx-nul",
        bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nX-\0A: b\r\nAuthorization: Bearer <<agent>>" .. tail) }
end

-- HTTP framing: Content-Length and Transfer-Encoding ---------------------------------------------
do
  local body = wake_body("hx-dupcl")
  for _, lens in ipairs { { #body, #body }, { #body, 2 }, { 2, #body } } do
    add { name = ("duplicate Content-Length %d, %d"):format(lens[1], lens[2]), status = 400, code = "bad_request",
          actor = "hx-dupcl",
          bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\r\nContent-Length: "
            .. lens[1] .. "\r\nContent-Length: " .. lens[2] .. "\r\nConnection: close\r\n\r\n" .. body) }
  end
  local cbody = wake_body("hx-clte")
  local chunked = ("%x\r\n%s\r\n0\r\n\r\n"):format(#cbody, cbody)
  for _, hdrs in ipairs {
    { "Content-Length: " .. #chunked, "Transfer-Encoding: chunked" },
    { "Transfer-Encoding: chunked", "Content-Length: " .. #chunked },
    { "Content-Length: 4", "Transfer-Encoding: chunked" },
  } do
    add { name = "Content-Length with Transfer-Encoding: chunked (" .. hdrs[1] .. " first), a request smuggled behind",
          status = 400, code = "bad_request", actor = "hx-clte",
          bytes = function(h)
            return "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent .. "\r\n"
              .. table.concat(hdrs, "\r\n") .. "\r\n\r\n" .. chunked
              .. req("POST", "/v1/wake", wake_body("hx-smuggled"), { token = h.agent })
          end,
          check = function(h) untouched(h, "hx-smuggled") end }
  end
end
add { name = "Transfer-Encoding: gzip (chunked not final: RFC 7230 3.3.3)", status = 400, code = "bad_request",
      actor = "hx-gzip",
      bytes = function(h)
        local body = wake_body("hx-gzip")
        return "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
          .. "\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n" .. body
      end }
add { name = "a chunk size in bad hex", status = 400, code = "bad_request", actor = "hx-badhex",
      bytes = function(h) return chunked_wake(h, "hx-badhex", "zz") end }
add { name = "a chunk size that overflows 64 bits", status = 400, code = "bad_request", actor = "hx-chunk",
      bytes = function(h) return chunked_wake(h, "hx-chunk", "FFFFFFFFFFFFFFFFFFFFFFFF") end }
add { name = "a 4 GiB chunk: cut at the 1 MiB body limit", status = 413, code = "payload_too_large", timeout = 5,
      actor = "hx-chunk4g",
      bytes = function(h)
        local pieces = { "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
          .. "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n100000000\r\n" }
        for i = 2, 19 do pieces[i] = ("a"):rep(64 * 1024) end          -- 1.125 MiB
        return pieces
      end }
add { name = "a chunk extension is served", status = 200,
      bytes = function(h) return chunked_wake(h, "hx-chunkext", ("%x;name=value"):format(#wake_body("hx-chunkext"))) end,
      check = woke("hx-chunkext") }
add { name = "a negative Content-Length", status = 400, code = "bad_request", actor = "hx-negcl",
      bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\r\nContent-Length: -1\r\n"
        .. "Connection: close\r\n\r\n" .. wake_body("hx-negcl")) }
add { name = "a Content-Length that is not a number", status = 400, code = "bad_request", actor = "hx-abccl",
      bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\r\nContent-Length: abc\r\n"
        .. "Connection: close\r\n\r\n" .. wake_body("hx-abccl")) }
add { name = "a GET with a body (that looks like a request) is served once", status = 200,
      bytes = function()
        local inner = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        return "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: " .. #inner .. "\r\nConnection: close\r\n\r\n" .. inner
      end,
      check = function(_, r) assert.are.equal("ok", r.body.status) end }

-- headers and the credential ------------------------------------------------------------------
add { name = "Authorization twice (agent, then operator) on an operator route: never 200", status = { 400, 401 },
      bytes = raw"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\r\nAuthorization: Bearer <<operator>>\r\nConnection: close\r\n\r\n" }
add { name = "Authorization twice (operator, then agent) on an operator route: never 200", status = { 400, 401 },
      bytes = raw"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<operator>>\r\nAuthorization: Bearer <<agent>>\r\nConnection: close\r\n\r\n" }
add { name = "a 17 KiB header value", status = 431,
      bytes = req("GET", "/healthz", nil, { headers = { "X-Big: " .. ("a"):rep(17 * 1024) } }) }
add { name = "a 16 KiB header value (the head is over 16 KiB)", status = 431,
      bytes = req("GET", "/healthz", nil, { headers = { "X-Big: " .. ("a"):rep(16 * 1024) } }) }
do
  local many = {}
  for i = 1, 700 do many[i] = ("X-H%d: %s"):format(i, ("b"):rep(20)) end
  add { name = "700 headers (17 KiB)", status = 431, bytes = req("GET", "/healthz", nil, { headers = many }) }
end
add { name = "a 17 KiB query string", status = 431, bytes = req("GET", "/healthz?" .. ("q"):rep(17 * 1024)) }
add { name = "a 17 KiB header name", status = 431,
      bytes = req("GET", "/healthz", nil, { headers = { ("X-" .. ("n"):rep(17 * 1024)) .. ": v" } }) }
add { name = "a 15 KiB header value is served", status = 200,
      bytes = req("GET", "/healthz", nil, { headers = { "X-Big: " .. ("a"):rep(15 * 1024) } }) }

-- sizes ---------------------------------------------------------------------------------------------
add { name = "a 1 MiB string value (body over the 1 MiB limit)", status = 413, code = "payload_too_large",
      actor = "hx-1mb", timeout = 5,
      bytes = function(h)
        local body = '{"actor_id":"hx-1mb","x":"' .. ("a"):rep(1024 * 1024) .. '"}'
        local head = "POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " .. h.agent
          .. "\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\nConnection: close\r\n\r\n"
        local pieces = { head }
        for i = 1, #body, 64 * 1024 do pieces[#pieces + 1] = body:sub(i, i + 64 * 1024 - 1) end
        return pieces
      end }
add { name = "a Content-Length of 2 MiB, no body sent", status = 413, code = "payload_too_large", actor = "hx-2mb",
      bytes = raw("POST /v1/wake HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer <<agent>>\r\nContent-Length: 2097152\r\n"
        .. "Connection: close\r\n\r\n") }
add { name = "a context_hint of 2,001 bytes", status = 400, code = "bad_request", actor = "hx-hint",
      bytes = wake_with('{"actor_id":"hx-hint","context_hint":"' .. ("h"):rep(2001) .. '"}') }
add { name = "a context_hint of 2,000 bytes is served", status = 200,
      bytes = wake_with('{"actor_id":"hx-hint2k","context_hint":"' .. ("h"):rep(2000) .. '"}'),
      check = woke("hx-hint2k") }

-- hostile JSON ----------------------------------------------------------------------------------------
add { name = "100,000 '[' unclosed", status = 400, code = "bad_request", actor = "hx-deep1",
      bytes = wake_with('{"actor_id":"hx-deep1","x":' .. ("["):rep(100000)) }
add { name = "100,000 nested arrays", status = 400, code = "bad_request",
      bytes = wake_with(("["):rep(100000) .. ("]"):rep(100000)) }
add { name = "100,000 nested objects", status = 400, code = "bad_request",
      bytes = wake_with(('{"a":'):rep(100000) .. "1" .. ("}"):rep(100000)) }
add { name = "run with 100,000 nested arrays commits nothing", status = 400, code = "bad_request",
      bytes = run_with("hx-deep2", ("["):rep(100000) .. ("]"):rep(100000)), check = commits_nothing("hx-deep2") }
add { name = "run with nesting 300 (> 256) commits nothing", status = 400, code = "bad_request",
      bytes = run_with("hx-deep3", ("["):rep(300) .. ("]"):rep(300)), check = commits_nothing("hx-deep3") }
add { name = "run with nesting 200 is served", status = 200,
      bytes = run_with("hx-deep4", ("["):rep(200) .. ("]"):rep(200)),
      check = committed_input("hx-deep4", ("["):rep(200) .. ("]"):rep(200)) }
for _, lit in ipairs { "1e999999", "-1e999999", "1E+999999", ("9"):rep(400) .. ".0e999" } do
  add { name = "the number " .. lit:sub(1, 20) .. " in a wake", status = 400, code = "bad_request", actor = "hx-huge",
        bytes = wake_with('{"actor_id":"hx-huge","x":' .. lit .. "}") }
end
add { name = "run with 1e999999 commits nothing", status = 400, code = "bad_request",
      bytes = run_with("hx-huge2", "1e999999"), check = commits_nothing("hx-huge2") }
add { name = "run with 1e400 commits nothing", status = 400, code = "bad_request",
      bytes = run_with("hx-huge3", "1e400"), check = commits_nothing("hx-huge3") }
add { name = "run with 123456789012345678901234567890: a double or 400", status = { 200, 400 },
      bytes = run_with("hx-bigint", "123456789012345678901234567890"),
      check = function(h, r)
        local head, entries = log_head(h, "hx-bigint")
        if r.status == 200 then
          assert.are.equal(1, head)
          assert.are.equal(1, r.body.cursor)
          assert.is_number(entries[1].body.input)
          assert.is_true(math.abs(entries[1].body.input - 1.2345678901234568e29) < 1e15)
        else
          assert.are.equal("bad_request", r.body.error.code)
          assert.are.equal(0, head)
        end
      end }
add { name = "run with -0 is stored as 0 (RFC 8785)", status = 200,
      bytes = run_with("hx-negzero", "-0"), check = committed_input("hx-negzero", "0") }
add { name = "run with 1.0E+2 is stored as 100 (RFC 8785)", status = 200,
      bytes = run_with("hx-exp", "1.0E+2"), check = committed_input("hx-exp", "100") }
add { name = "a UTF-8 byte order mark before a wake", status = 400, code = "bad_request", actor = "hx-bom",
      bytes = wake_with("\xEF\xBB\xBF" .. wake_body("hx-bom")) }
add { name = "a UTF-8 byte order mark before a run commits nothing", status = 400, code = "bad_request",
      bytes = function(h)
        local sid = session(h, "hx-bom2")
        return req("POST", "/v1/run", "\xEF\xBB\xBF" .. cjson.encode({ session_id = sid, input = 1 }), { token = h.agent })
      end,
      check = commits_nothing("hx-bom2") }
add { name = "a UTF-16LE body with its byte order mark", status = 400, code = "bad_request", actor = "hx-utf16",
      bytes = wake_with("\xFF\xFE" .. (wake_body("hx-utf16"):gsub(".", "%0\0"))) }
add { name = "a lone high surrogate escape", status = 400, code = "bad_request",
      bytes = run_with("hx-sur1", '"a\\uD800b"'), check = commits_nothing("hx-sur1") }
add { name = "a lone low surrogate escape", status = 400, code = "bad_request",
      bytes = run_with("hx-sur2", '"\\uDC00"'), check = commits_nothing("hx-sur2") }
add { name = "a surrogate encoded as raw UTF-8 bytes (CESU)", status = 400, code = "bad_request",
      bytes = run_with("hx-sur3", '"\xED\xA0\x80"'), check = commits_nothing("hx-sur3") }
add { name = "overlong UTF-8 ('/' as C0 AF)", status = 400, code = "bad_request",
      bytes = run_with("hx-overlong", '"\xC0\xAF"'), check = commits_nothing("hx-overlong") }
add { name = "invalid UTF-8 (a lone continuation byte)", status = 400, code = "bad_request",
      bytes = run_with("hx-badutf", '"a\x80b"'), check = commits_nothing("hx-badutf") }
add { name = "duplicate keys at the top level", status = 400, code = "bad_request", actor = "hx-dupk1",
      bytes = wake_with('{"actor_id":"hx-dupk1","actor_id":"hx-dupk2"}'), check = function(h) untouched(h, "hx-dupk2") end }
add { name = "duplicate keys inside a run's input", status = 400, code = "bad_request",
      bytes = run_with("hx-dupk3", '{"a":1,"b":{"c":1,"c":2}}'), check = commits_nothing("hx-dupk3") }
add { name = "duplicate keys that differ only by escaping", status = 400, code = "bad_request",
      bytes = run_with("hx-dupk4", '{"a":1,"\\u0061":2}'), check = commits_nothing("hx-dupk4") }
add { name = "a key with \\u0000 in it round-trips", status = 200,
      bytes = run_with("hx-nulkey", '{"a\\u0000b":1}'), check = committed_input("hx-nulkey", '{"a\\u0000b":1}') }
add { name = "NaN", status = 400, code = "bad_request",
      bytes = run_with("hx-nan", "NaN"), check = commits_nothing("hx-nan") }
add { name = "a number with a leading zero", status = 400, code = "bad_request",
      bytes = run_with("hx-lead0", "012"), check = commits_nothing("hx-lead0") }
add { name = "a raw control character inside a string", status = 400, code = "bad_request",
      bytes = run_with("hx-ctrl", '"a\nb"'), check = commits_nothing("hx-ctrl") }
add { name = "trailing bytes after the JSON", status = 400, code = "bad_request", actor = "hx-trail",
      bytes = wake_with('{"actor_id":"hx-trail"} x') }
add { name = "a top-level tenant_id", status = 400, code = "tenant_in_payload", actor = "hx-tenant",
      bytes = wake_with('{"actor_id":"hx-tenant","tenant_id":"default"}') }
add { name = "a body that is an array", status = 400, code = "bad_request", bytes = wake_with('["hx-arr"]') }
add { name = "an actor_id that is a number", status = 400, code = "bad_request", bytes = wake_with('{"actor_id":7}') }

-- hostile actor ids in the body (wake, and load as the operator) ---------------------------------------
for _, c in ipairs {
  { "two dots", ".." }, { "a dot", "." }, { "a path", "../etc" }, { "a slash", "a/b" }, { "a backslash", "a\\b" },
  { "a NUL", "arc\0" }, { "65 chars", ("a"):rep(65) }, { "1000 chars", ("a"):rep(1000) },
  { "Cyrillic a", "\u{430}rc" }, { "fullwidth letters", "\u{FF41}\u{FF52}\u{FF43}" },
  { "a zero-width space", "arc\u{200B}" }, { "a combining accent", "arc\u{301}" },
  { "a right-to-left override", "\u{202E}cra" }, { "a newline", "arc\n" }, { "a percent escape", "arc%2F" },
  { "a leading space", " arc" }, { "a trailing space", "arc " }, { "a tab", "ar\tc" }, { "the empty string", "" },
  { "fullwidth digits", "arc\u{FF11}" },
} do
  add { name = "actor_id in a wake, " .. c[1], status = 400, code = "bad_request",
        bytes = post("/v1/wake", cjson.encode({ actor_id = c[2] })) }
  add { name = "actor_id in a load, " .. c[1], status = 400, code = "bad_request",
        bytes = post("/v1/load", cjson.encode({ actor_id = c[2] }), "operator") }
end
add { name = "actor_id of 64 chars in a wake is served", status = 200,
      bytes = post("/v1/wake", wake_body(("w"):rep(64))), check = woke(("w"):rep(64)) }
add { name = "actor_id of 64 chars in a load is served", status = 200,
      bytes = post("/v1/load", wake_body(("l"):rep(64)), "operator"), check = woke(("l"):rep(64)) }

-- hostile actor ids in the path: paths name an actor that exists, "arc", so that a lax
-- decoding would show; nothing may be written to arc through them.
local ARC_HEAD
local function arc_head(h)
  if not ARC_HEAD then
    local st, _, text = h:post("/v1/actors/arc/direction", { direction = "x" }, h.operator)
    assert.are.equal(200, st, text)
    ARC_HEAD = log_head(h, "arc")
  end
  return ARC_HEAD
end
for _, c in ipairs {
  { "two dots", ".." }, { "two encoded dots", "%2e%2e" }, { "an encoded slash", "arc%2Fx" },
  { "an encoded NUL after a real actor", "arc%00x" }, { "an encoded NUL at the end", "arc%00" },
  { "65 chars", ("a"):rep(65) }, { "200 chars", ("a"):rep(200) }, { "Cyrillic a", "%D0%B0rc" },
  { "fullwidth letters", "%EF%BD%81%EF%BD%92%EF%BD%83" }, { "a zero-width space", "arc%E2%80%8B" },
  { "a bad percent escape", "arc%zz" },
} do
  for _, route in ipairs { { "GET", "log" }, { "GET", "snapshots" }, { "POST", "replay", '{"to":0}' },
                           { "POST", "direction", '{"direction":"through a bad id"}' } } do
    add { name = ("actor id in the path, %s: %s %s"):format(c[1], route[1], route[2]), status = 400, code = "bad_request",
          bytes = function(h)
            arc_head(h)
            return req(route[1], "/v1/actors/" .. c[2] .. "/" .. route[2], route[3], { token = h.operator })
          end,
          check = function(h) assert.are.equal(arc_head(h), (log_head(h, "arc")), "arc's log moved") end }
  end
end

describe("hostile requests, one table", function()
  local box = shared_host()

  it("the table holds at least 50 hostile requests", function()
    assert.is_true(#CASES >= 50, #CASES .. " rows")
  end)

  for i, row in ipairs(CASES) do
    it(("#%d %s: %s"):format(i, row.name, type(row.status) == "table" and table.concat(row.status, " or ")
                                            or tostring(row.status)), function()
      local h = box.h
      local bytes = row.bytes
      if type(bytes) == "function" then bytes = bytes(h) end
      local rs, how, data = exchange(h, bytes, row.timeout)
      local allowed = type(row.status) == "table" and row.status or { row.status }
      local st = rs[1] and rs[1].status
      local why = "got: " .. tostring(st) .. " " .. data:sub(1, 400)
      local ok = false
      for _, s in ipairs(allowed) do ok = ok or s == st end
      assert.is_true(ok, "expected " .. table.concat(allowed, " or ") .. "; " .. why)
      local r = one_answer(st, rs, how, data:sub(1, 400))
      if row.code then assert.are.equal(row.code, r.body.error.code, why) end
      if row.check then row.check(h, r, data) end
      if row.actor then untouched(h, row.actor) end
      serving(h)
    end)
  end
end)

-- ---- choreography: byte-at-a-time, pipelining, vanishing clients ------------------------------

describe("hostile HTTP choreography", function()
  local box = shared_host()

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
