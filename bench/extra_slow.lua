-- bench/extra_slow.lua -- a feed server that answers every request after a delay,
-- for bench/extra.sh (a slow source beside concurrent wakes).  Needs lua-socket.
--   lua5.4 bench/extra_slow.lua PORTFILE DELAY_S
-- Listens on 127.0.0.1:0, writes its port to PORTFILE, and answers each GET
-- with a JSON feed of one item DELAY_S seconds after its request arrived; many
-- requests may wait at once (one select loop).  Appends "served N inflight_max M"
-- to PORTFILE..".stats" after each answer.  Runs until killed.
local socket = require "socket"
local PORTFILE, DELAY = arg[1], tonumber(arg[2] or "5")
local srv = assert(socket.bind("127.0.0.1", 0))
srv:settimeout(0)
local _, port = srv:getsockname()
local f = assert(io.open(PORTFILE .. ".tmp", "w")); f:write(port, "\n"); f:close()
os.rename(PORTFILE .. ".tmp", PORTFILE)

local conns = {}   -- sock -> {buf, due}
local served, inflight_max = 0, 0
while true do
  local rd = { srv }
  for c in pairs(conns) do rd[#rd + 1] = c end
  local ready = socket.select(rd, nil, 0.02)
  for _, s in ipairs(ready) do
    if s == srv then
      local c = srv:accept()
      if c then c:settimeout(0); conns[c] = { buf = "" } end
    elseif conns[s] then
      local data, err, part = s:receive(4096)
      local got = data or part
      local st = conns[s]
      if got and #got > 0 then
        st.buf = st.buf .. got
        if not st.due and st.buf:find("\r\n\r\n", 1, true) then st.due = socket.gettime() + DELAY end
      end
      if err == "closed" then s:close(); conns[s] = nil end
    end
  end
  local now, n = socket.gettime(), 0
  for c, st in pairs(conns) do
    if st.due then n = n + 1 end
    if st.due and now >= st.due then
      local body = string.format('[{"id":"slow-%d","title":"slow item %d"}]', served, served)
      c:settimeout(1)
      c:send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
        .. #body .. "\r\n\r\n" .. body)
      c:close()
      conns[c] = nil
      served = served + 1
      local sf = io.open(PORTFILE .. ".stats", "w")
      if sf then sf:write(string.format("served %d inflight_max %d\n", served, inflight_max)); sf:close() end
    end
  end
  if n > inflight_max then inflight_max = n end
end
