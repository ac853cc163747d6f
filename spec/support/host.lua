-- host.lua -- start a real `mw serve` on a temporary home for a spec, talk to
-- it over HTTP (lua-socket), stop it.  Every spec that uses it calls
-- host.start() in setup/before_each and h:stop() in teardown/after_each.
local http = require "socket.http"
local ltn12 = require "ltn12"
local socket = require "socket"
local cjson = require "cjson"

local M = {}
local build = os.getenv("MW_BUILD") or "build"
M.mw = build .. "/mw"

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end
M.sh = sh

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

local Host = {}
Host.__index = Host

-- opts.home (reuse a home), opts.args (extra serve flags), opts.env
function M.start(opts)
  opts = opts or {}
  local self = setmetatable({}, Host)
  if opts.home then
    self.home = opts.home
  else
    self.home = os.tmpname()
    os.remove(self.home)
    local out = sh(M.mw .. " init --home " .. self.home .. " --json")
    local t = cjson.decode(out)
    self.agent, self.operator = t.agent_token, t.operator_token
  end
  self.out = self.home .. ".out"
  self.log = self.home .. ".log"
  os.remove(self.out)
  self.exitfile = self.home .. ".exit"
  os.remove(self.exitfile)
  -- a wrapper shell waits for the host and records its exit status
  -- MW_VALGRIND=1 runs the host under valgrind: any error or definite leak
  -- makes it exit 99, which the SIGTERM-drain checks see as a failure
  -- (one log per process, HOME.vg.PID; Host:stop fails when any is not empty,
  -- since most specs never look at the exit status)
  local vg = os.getenv("MW_VALGRIND") and
    ("valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --log-file=" ..
     self.home .. ".vg.%p ") or ""
  local inner = string.format("%s%s%s serve --home %s --listen 127.0.0.1:0 %s >%s 2>>%s & p=$!; echo $p; wait $p; echo $? >%s",
    opts.env or "", vg, M.mw, self.home, opts.args or "", self.out, self.log, self.exitfile)
  local p = io.popen("sh -c '" .. inner:gsub("'", "'\\''") .. "' &")
  self.pid = tonumber(p:read("l"))
  self.wrapper = p
  local deadline = socket.gettime() + (os.getenv("MW_VALGRIND") and 60 or 10)
  while socket.gettime() < deadline do
    local s = read_file(self.out) or ""
    local url = s:match("listening on (http://[%d%.]+:%d+)")
    if url then self.url = url; break end
    socket.sleep(0.01)
  end
  assert(self.url, "the host did not start: " .. (read_file(self.log) or ""))
  return self
end

function Host:alive()
  local _, code = sh("kill -0 " .. self.pid)
  return code == 0
end

-- Sends a signal and waits for the process to end; returns its exit status
-- when known (via /proc it is not, so we only wait).
function Host:signal(sig)
  sh("kill -" .. sig .. " " .. self.pid)
  -- under valgrind the exit (and its leak check) is slow: a KILL after 10 s would skip the check
  local deadline = socket.gettime() + (os.getenv("MW_VALGRIND") and 60 or 10)
  while socket.gettime() < deadline and self:alive() do socket.sleep(0.01) end
  -- reap the zombie, if it is ours: it is a child of the shell, already reaped
end

-- The host's exit status once it has ended (nil while it runs).
function Host:exit_status()
  local deadline = socket.gettime() + 5
  while socket.gettime() < deadline do
    local s = read_file(self.exitfile)
    if s and s:match("%d") then return tonumber(s:match("%d+")) end
    socket.sleep(0.01)
  end
end

function Host:stop(keep_home)
  if self.pid and self:alive() then self:signal("TERM") end
  if self.pid and self:alive() then self:signal("KILL") end
  if self.wrapper then self.wrapper:close(); self.wrapper = nil end
  if not keep_home then
    sh("rm -rf " .. self.home .. " " .. self.out .. " " .. self.log .. " " .. self.exitfile)
  end
  if os.getenv("MW_VALGRIND") then
    -- what valgrind said about every host process on this home so far; a report
    -- is kept as /tmp/mw-vg-*.log and fails the test
    local found = {}
    for f in sh("ls " .. self.home .. ".vg.* 2>/dev/null"):gmatch("[^\n]+") do
      local text = read_file(f) or ""
      if text:match("%S") then
        local keep = "/tmp/mw-vg-" .. f:match("[^/]+$") .. ".log"
        sh("cp " .. f .. " " .. keep)
        found[#found + 1] = keep .. ":\n" .. text
      end
      os.remove(f)
    end
    assert(#found == 0, "valgrind reported errors in the host:\n" .. table.concat(found, "\n"))
  end
end

function Host:restart(extra)
  self:stop(true)
  local h = M.start({ home = self.home, args = extra and extra.args, env = extra and extra.env })
  self.pid, self.url = h.pid, h.url
  return self
end

-- request(method, path, body (string or table), token) -> status, decoded|raw, raw
function Host:request(method, path, body, token)
  if type(body) == "table" then body = cjson.encode(body) end
  local chunks = {}
  local headers = { ["Content-Type"] = "application/json" }
  if body then headers["Content-Length"] = tostring(#body) end
  if token ~= false then headers["Authorization"] = "Bearer " .. (token or self.agent) end
  local _, status = http.request {
    url = self.url .. path, method = method, headers = headers,
    source = body and ltn12.source.string(body) or nil,
    sink = ltn12.sink.table(chunks),
  }
  local raw = table.concat(chunks)
  local ok, decoded = pcall(cjson.decode, raw)
  return status, ok and decoded or raw, raw
end

function Host:post(path, body, token) return self:request("POST", path, body, token) end
function Host:get(path, token) return self:request("GET", path, nil, token) end

function Host:wake(actor, extra, token)
  local body = { actor_id = actor }
  for k, v in pairs(extra or {}) do body[k] = v end
  return self:post("/v1/wake", body, token)
end

function Host:hostlog() return read_file(self.log) or "" end

-- Raw TCP: send bytes, read until close or timeout; returns what came back.
function Host:raw(bytes, timeout)
  local host, port = self.url:match("http://([%d%.]+):(%d+)")
  local c = assert(socket.tcp())
  c:settimeout(timeout or 2)
  assert(c:connect(host, tonumber(port)))
  if type(bytes) == "table" then
    for _, b in ipairs(bytes) do c:send(b); socket.sleep(0.001) end
  else
    c:send(bytes)
  end
  local parts = {}
  while true do
    local s, err, partial = c:receive(4096)
    if s then parts[#parts + 1] = s
    else
      if partial and #partial > 0 then parts[#parts + 1] = partial end
      break
    end
  end
  c:close()
  return table.concat(parts)
end

M.sqlite = function(home, sql)
  return sh(string.format("sqlite3 %s/mw.db %q", home, sql))
end

return M
