-- c_spec.lua -- the C test programs (spec/c/*_test.c, built into
-- MW_BUILD/test/*_test) as busted test cases: each program runs once when this file
-- loads; every TAP line it printed becomes one `it`, plus one `it` that the
-- program ran to completion (exit 0, and as many results as its plan said).

local H = require "helpers"

local testdir = H.build .. "/test"

local function list_programs()
  -- The Makefile builds spec/c/NAME_test.c into MW_BUILD/test/NAME_test; other
  -- files there (a preloadable .so a spec builds, say) are not test programs.
  local code, out = H.run("find " .. H.q(testdir) .. " -maxdepth 1 -type f -name '*_test' -perm -u+x 2>/dev/null | sort")
  local progs = {}
  if code ~= 0 then return progs end
  for line in out:gmatch("[^\n]+") do progs[#progs + 1] = line end
  return progs
end

-- Parses TAP output: results {ok, n, name, directive, reason} and the plan.
local function parse_tap(out)
  local results, plan = {}, nil
  for line in out:gmatch("[^\n]*") do
    local p = line:match("^1%.%.(%d+)")
    if p then plan = tonumber(p) end
    local notok, n, rest = line:match("^(not )ok%s+(%d+)%s*(.*)$")
    if not notok then
      n, rest = line:match("^ok%s+(%d+)%s*(.*)$")
    end
    if n then
      local name = rest:gsub("^%-%s*", "")
      local directive, reason
      local d, r = name:match("#%s*([Ss][Kk][Ii][Pp])%S*%s*(.*)$")
      if not d then d, r = name:match("#%s*([Tt][Oo][Dd][Oo])%s*(.*)$") end
      if d then
        directive, reason = d:upper(), r
        name = name:gsub("%s*#.*$", "")
      end
      results[#results + 1] = {
        ok = notok == nil, n = tonumber(n), name = name, directive = directive, reason = reason,
      }
    end
  end
  return results, plan
end

describe("C test programs", function()
  local progs = list_programs()
  if #progs == 0 then
    pending("no C test programs in " .. testdir .. " (spec/c/*_test.c)")
    return
  end
  for _, prog in ipairs(progs) do
    local pname = prog:match("([^/]+)$")
    -- Run it now, at load time (from the directory busted runs in, the
    -- repository), so each TAP line can be its own test case.
    local code, out, err = H.run("timeout 120 " .. H.q(prog))
    local results, plan = parse_tap(out)
    describe(pname, function()
      for _, r in ipairs(results) do
        local title = string.format("%d - %s", r.n, r.name)
        if r.directive == "SKIP" then
          pending(title .. " (skipped: " .. (r.reason or "") .. ")")
        elseif r.directive == "TODO" and not r.ok then
          pending(title .. " (TODO: " .. (r.reason or "") .. ")")
        else
          it(title, function()
            assert(r.ok, pname .. ": not ok " .. title .. "\n--- stderr ---\n" .. err)
          end)
        end
      end
      it("runs to completion (exit 0" .. (plan and ", " .. plan .. " results" or "") .. ")", function()
        assert(code == 0, pname .. " exited " .. tostring(code) .. "\n--- stderr ---\n" .. err)
        assert(#results > 0, pname .. " printed no TAP result line")
        if plan then
          assert(#results == plan, string.format("%s planned %d results and printed %d", pname, plan, #results))
        end
      end)
    end)
  end
end)
