-- helpers.lua -- shared by the specs: temporary homes, running commands and
-- child Lua processes, where the build and the scripts are.
--
-- Every path comes from the environment `make test` / `make sanitize` set:
-- MW_BUILD (the build tree: mw, mw.so, test/*) and MW_SCRIPTS (fold.lua).

local H = {}

local function abspath(p)
  if p:sub(1, 1) == "/" then return p end
  local pwd = os.getenv("PWD")
  if not pwd then
    local f = io.popen("pwd")
    pwd = f:read("l")
    f:close()
  end
  return pwd .. "/" .. p
end

H.build = abspath(os.getenv("MW_BUILD") or "build")
H.scripts = abspath(os.getenv("MW_SCRIPTS") or "scripts")
H.mw_bin = H.build .. "/mw"
H.fold_path = H.scripts .. "/fold.lua"
H.lua_bin = "lua5.4"

-- Make sure this process finds the module of the build under test, whatever
-- --cpath busted was given.
if not package.cpath:find(H.build .. "/?.so", 1, true) then
  package.cpath = H.build .. "/?.so;" .. package.cpath
end

-- Quote a string for /bin/sh.
function H.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local created = {}

-- A fresh, empty directory under /tmp (os.tmpname-based); removed by cleanup().
function H.tmpdir()
  local name = os.tmpname()   -- creates an empty file with a unique name
  os.remove(name)
  assert(os.execute("mkdir -m 700 " .. H.q(name)), "cannot create " .. name)
  created[#created + 1] = name
  return name
end

-- A path for a home that does not exist yet, inside a fresh tmp dir.
function H.home_path()
  return H.tmpdir() .. "/home"
end

-- A temporary file path (removed by cleanup()).
function H.tmpfile(contents)
  local name = os.tmpname()
  created[#created + 1] = name
  if contents then H.write(name, contents) end
  return name
end

-- Removes every temporary file and directory made so far.
function H.cleanup()
  for i = #created, 1, -1 do
    local p = created[i]
    os.execute("chmod -R u+w " .. H.q(p) .. " 2>/dev/null; rm -rf " .. H.q(p))
    created[i] = nil
  end
end

function H.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

function H.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function H.write(path, s)
  local f = assert(io.open(path, "wb"))
  assert(f:write(s))
  assert(f:close())
  return path
end

-- Runs a shell command; returns exit code, stdout, stderr.  A command killed
-- by a signal returns 128 + the signal number, as a shell would.
function H.run(cmd)
  local out, err = os.tmpname(), os.tmpname()
  local p = assert(io.popen("( " .. cmd .. " ) >" .. H.q(out) .. " 2>" .. H.q(err), "r"))
  p:read("a")
  local ok, how, code = p:close()
  local so, se = H.read(out) or "", H.read(err) or ""
  os.remove(out)
  os.remove(err)
  if how == "signal" then code = 128 + code end
  return code or (ok and 0 or 1), so, se
end

-- "K=V K2=V2 " from a table, for a command line.
function H.envprefix(env)
  if not env then return "" end
  local keys = {}
  for k in pairs(env) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = env[k]
    if v == false then
      parts[#parts + 1] = "-u " .. k
    else
      parts[#parts + 1] = k .. "=" .. H.q(v)
    end
  end
  if #parts == 0 then return "" end
  return "env " .. table.concat(parts, " ") .. " "
end

-- Runs the mw binary with the given argument string (already quoted as
-- needed); env is an optional table of variables (false unsets one).
function H.mw(args, env)
  return H.run(H.envprefix(env) .. H.q(H.mw_bin) .. " " .. args)
end

-- The prelude every child Lua process gets: the module of the build under
-- test, and `arg` for its own arguments.
local PRELUDE = "package.cpath = %q .. ';' .. package.cpath\n"

-- Writes a child Lua script (prefixed so it finds mw.so) and returns its path.
function H.lua_script(src)
  return H.tmpfile(string.format(PRELUDE, H.build .. "/?.so") .. src)
end

-- Runs a Lua 5.4 child process on the source text; extra args are passed
-- (quoted) as arg[1..n].  Returns exit code, stdout, stderr.
function H.lua(src, env, ...)
  local path = H.lua_script(src)
  local args = {}
  for i = 1, select("#", ...) do args[#args + 1] = H.q(select(i, ...)) end
  return H.run(H.envprefix(env) .. H.lua_bin .. " " .. H.q(path) .. " " .. table.concat(args, " "))
end

-- Writes a fold source into a file (in a tmp dir) and returns its path.
-- With `home`, writes HOME/scripts/fold.lua instead (what the CLI uses).
function H.write_fold(src, home)
  if home then
    os.execute("mkdir -p " .. H.q(home .. "/scripts"))
    return H.write(home .. "/scripts/fold.lua", src)
  end
  return H.write(H.tmpdir() .. "/fold.lua", src)
end

-- Runs SQL against HOME/mw.db with the sqlite3 command-line shell.
-- Returns stdout (trimmed); raises with stderr when sqlite3 fails.
function H.sql(home, sql)
  local code, out, err = H.run("sqlite3 -batch -cmd '.timeout 5000' " .. H.q(home .. "/mw.db") .. " " .. H.q(sql))
  if code ~= 0 or err:match("%S") then
    error("sqlite3 failed (" .. tostring(code) .. "): " .. err .. "\nSQL: " .. sql, 2)
  end
  return (out:gsub("%s+$", ""))
end

-- The streams.id of (tenant, actor).
function H.stream_id(home, tenant, actor)
  local id = H.sql(home, string.format("SELECT id FROM streams WHERE tenant='%s' AND actor='%s'", tenant, actor))
  return assert(tonumber(id), "no stream for " .. tenant .. "/" .. actor)
end

-- SHA-256 of a file's bytes (hex), or nil when it cannot be read.
function H.file_sha256(path)
  local s = H.read(path)
  if not s then return nil end
  return require("mw").sha256(s)
end

function H.uid()
  local f = io.popen("id -u")
  local u = tonumber(f:read("l"))
  f:close()
  return u
end

-- Opens (creating) a home in a fresh tmp dir: returns home object, its path.
function H.new_home()
  local mw = require "mw"
  local path = H.home_path()
  local home = assert(mw.open(path, { create = true }))
  return home, path
end

-- Splits text into lines.
function H.lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

return H
