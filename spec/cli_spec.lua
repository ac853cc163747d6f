-- cli_spec.lua -- the `mw` command line (contract "Build and CLI"): help,
-- init, token create/revoke, log verify, replay, MW_HOME, and how it fails.

local H = require "helpers"
local mw = require "mw"
local cjson = require "cjson"

local TOKEN = "mw_" .. string.rep("%x", 64)

local function tokens_in(s)
  local t = {}
  for tok in s:gmatch(TOKEN) do t[#t + 1] = tok end
  return t
end

-- The files of a directory with their checksums, as one comparable string.
local function fingerprint_dir(dir)
  local _, out = H.run("cd " .. H.q(dir) .. " && find . -type f | sort | xargs -r sha256sum")
  return out
end

local function init(path, extra, env)
  local code, out, err = H.mw("init --home " .. H.q(path) .. (extra and (" " .. extra) or ""), env)
  assert(code == 0, "mw init failed (" .. tostring(code) .. "): " .. err)
  return out
end

describe("mw", function()
  after_each(H.cleanup)

  describe("help", function()
    it("mw --help exits 0 and names every command and MW_HOME", function()
      for _, flag in ipairs({ "--help", "-h", "help" }) do
        local code, out = H.mw(flag)
        assert.are.equal(0, code)
        for _, word in ipairs({ "init", "token", "log verify", "replay", "MW_HOME" }) do
          assert.is_truthy(out:find(word, 1, true), "mw " .. flag .. " does not mention " .. word)
        end
      end
    end)

    for _, cmd in ipairs({ "init", "token", "log", "replay", "serve" }) do
      it("mw " .. cmd .. " --help exits 0 with its usage", function()
        local code, out, err = H.mw(cmd .. " --help")
        assert.are.equal(0, code, err)
        assert.is_truthy(out:find("usage: mw " .. cmd, 1, true), out)
      end)
    end

    it("mw with no command exits 2 with the usage on stderr", function()
      local code, out, err = H.mw("")
      assert.are.equal(2, code)
      assert.are.equal("", out)
      assert.is_truthy(err:find("usage", 1, true))
    end)
  end)

  describe("usage errors exit 2", function()
    local path
    before_each(function()
      path = H.home_path()
      init(path)
    end)

    it("an unknown command", function()
      local code, _, err = H.mw("frobnicate")
      assert.are.equal(2, code)
      assert.is_truthy(err:find("unknown command", 1, true), err)
    end)

    it("an unknown option, for every command", function()
      for _, cmd in ipairs({ "init", "token create", "log verify", "replay" }) do
        local code, _, err = H.mw(cmd .. " --home " .. H.q(path) .. " --bogus")
        assert.are.equal(2, code, cmd)
        assert.is_truthy(err:find("--bogus", 1, true), cmd .. ": " .. err)
      end
    end)

    it("an unknown subcommand, a missing value, a missing argument", function()
      local h = " --home " .. H.q(path)
      for _, args in ipairs({
        "token frob" .. h, "log frob" .. h, "token" .. h, "log" .. h,
        "token create --tenant t" .. h, "token create --role agent" .. h,
        "token create --tenant t --role king" .. h, "token create --tenant 'a b' --role agent" .. h,
        "token revoke" .. h, "log verify --tenant t" .. h, "log verify --actor a" .. h,
        "replay --tenant t --actor a" .. h, "replay --tenant t --actor a --to -1" .. h,
        "replay --tenant t --actor a --to x" .. h, "replay --tenant t --actor a --to" .. h,
        "log verify --tenant t --actor 'a/b'" .. h, "token create --home",
      }) do
        local code, _, err = H.mw(args)
        assert.are.equal(2, code, "mw " .. args .. ": " .. err)
        assert.is_truthy(#err > 0, "mw " .. args .. " gave no message")
      end
    end)

    it("no home at all", function()
      local code, _, err = H.mw("token create --tenant t --role agent", { MW_HOME = false })
      assert.are.equal(2, code)
      assert.is_truthy(err:find("MW_HOME", 1, true), err)
    end)

    it("and write nothing", function()
      local before = fingerprint_dir(path)
      H.mw("token create --home " .. H.q(path) .. " --tenant t --role king")
      H.mw("token create --home " .. H.q(path) .. " --tenant 'bad tenant' --role agent")
      assert.are.equal(before, fingerprint_dir(path))
    end)
  end)

  describe("init", function()
    it("creates a home and prints the tenant and two working tokens", function()
      local path = H.home_path()
      local out = init(path)
      assert.is_true(H.exists(path .. "/mw.db"))
      assert.is_truthy(out:find("default", 1, true))
      local toks = tokens_in(out)
      assert.are.equal(2, #toks)
      assert.are_not.equal(toks[1], toks[2])
      local home = assert(mw.open(path))
      local roles = {}
      for _, t in ipairs(toks) do
        local tenant, role = assert(home:token_lookup(t))
        assert.are.equal("default", tenant)
        roles[role] = true
      end
      assert.are.same({ agent = true, operator = true }, roles)
      home:close()
    end)

    it("keeps only the tokens' hashes", function()
      local path = H.home_path()
      local toks = tokens_in(init(path))
      local db = H.read(path .. "/mw.db")
      for _, t in ipairs(toks) do
        assert.is_falsy(db:find(t, 1, true), "a token is stored in clear")
        assert.is_falsy(db:find(t:sub(4), 1, true), "a token is stored in clear")
        local n = H.sql(path, "SELECT count(*) FROM tokens WHERE hash=X'" .. mw.sha256(t) .. "'")
        assert.are.equal("1", n)
      end
    end)

    it("--json prints {tenant, agent_token, operator_token}", function()
      local path = H.home_path()
      local out = init(path, "--json")
      local v = cjson.decode(out)
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      assert.are.same({ "agent_token", "operator_token", "tenant" }, keys)
      assert.are.equal("default", v.tenant)
      assert.is_truthy(v.agent_token:match("^" .. TOKEN .. "$"))
      assert.is_truthy(v.operator_token:match("^" .. TOKEN .. "$"))
      local home = assert(mw.open(path))
      assert.are.same({ "default", "agent" }, { home:token_lookup(v.agent_token) })
      assert.are.same({ "default", "operator" }, { home:token_lookup(v.operator_token) })
      home:close()
    end)

    it("on an existing home changes nothing, prints no token, and says so", function()
      local path = H.home_path()
      init(path)
      local sum, files = H.file_sha256(path .. "/mw.db"), fingerprint_dir(path)
      for _, extra in ipairs({ "", "--json" }) do
        local out = init(path, extra)
        assert.are.equal(0, #tokens_in(out), "a second init printed a token")
        assert.is_falsy(out:find("mw_", 1, true))
        assert.is_truthy(out:find("already", 1, true) or out:find("exists", 1, true), out)
        assert.are.equal(sum, H.file_sha256(path .. "/mw.db"))
        assert.are.equal(files, fingerprint_dir(path))
      end
      assert.are.equal("2", H.sql(path, "SELECT count(*) FROM tokens"))
    end)

    it("refuses a directory whose mw.db is not MW's, and a path that is a file", function()
      local dir = H.tmpdir()
      H.run("sqlite3 " .. H.q(dir .. "/mw.db") .. " 'CREATE TABLE t(x); INSERT INTO t VALUES(1)'")
      local before = fingerprint_dir(dir)
      local code, out, err = H.mw("init --home " .. H.q(dir))
      assert.are.equal(1, code)
      assert.are.equal(0, #tokens_in(out))
      assert.is_truthy(err:find("not an MW home", 1, true), err)
      assert.are.equal(before, fingerprint_dir(dir))
      local file = H.tmpfile("just a file")
      code, _, err = H.mw("init --home " .. H.q(file))
      assert.are.equal(1, code)
      assert.is_truthy(err:find("not a directory", 1, true), err)
      assert.are.equal("just a file", H.read(file))
    end)
  end)

  describe("MW_HOME", function()
    it("stands in for --home", function()
      local path = H.home_path()
      local code, out = H.mw("init --json", { MW_HOME = path })
      assert.are.equal(0, code)
      assert.is_true(H.exists(path .. "/mw.db"))
      assert.are.equal("default", cjson.decode(out).tenant)
      local tok
      code, tok = H.mw("token create --tenant acme --role agent", { MW_HOME = path })
      assert.are.equal(0, code)
      local home = assert(mw.open(path))
      assert.are.equal("acme", (home:token_lookup(tok:match(TOKEN))))
      local log = assert(home:log("acme", "arc"))
      assert(log:append("note", {}))
      code, out = H.mw("log verify --tenant acme --actor arc", { MW_HOME = path })
      assert.are.equal(0, code, out)
      code, out = H.mw("replay --tenant acme --actor arc --to 1", { MW_HOME = path })
      assert.are.equal(0, code)
      assert.is_truthy(out:find("^{"))
      home:close()
    end)

    it("gives way to an explicit --home", function()
      local path = H.home_path()
      init(path)
      local code = H.mw("token create --home " .. H.q(path) .. " --tenant t --role agent",
        { MW_HOME = H.tmpdir() .. "/nothing-here" })
      assert.are.equal(0, code)
    end)
  end)

  describe("token", function()
    local path
    before_each(function()
      path = H.home_path()
      init(path)
    end)

    it("create prints a new token for a new tenant (text)", function()
      local code, out, err = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role operator")
      assert.are.equal(0, code, err)
      local tok = out:match("^(" .. TOKEN .. ")\n$")
      assert.is_string(tok, out)
      local home = assert(mw.open(path))
      assert.are.same({ "acme", "operator" }, { home:token_lookup(tok) })
      -- only the whole token: not one with more after it, nor a prefix
      for _, wrong in ipairs({ tok .. "\0", tok .. "\0x", tok:sub(1, -2), tok .. "0" }) do
        assert.are.same({ nil, "EAUTH" }, { select(1, home:token_lookup(wrong)), select(3, home:token_lookup(wrong)) })
      end
      assert.are.equal("1", H.sql(path, "SELECT count(*) FROM tenants WHERE name='acme'"))
      home:close()
    end)

    it("create --json prints {tenant, role, token}", function()
      local code, out = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role agent --json")
      assert.are.equal(0, code)
      local v = cjson.decode(out)
      assert.are.equal("acme", v.tenant)
      assert.are.equal("agent", v.role)
      assert.is_truthy(v.token:match("^" .. TOKEN .. "$"))
      local home = assert(mw.open(path))
      assert.are.same({ "acme", "agent" }, { home:token_lookup(v.token) })
      home:close()
    end)

    it("revoke takes effect at once; revoking it again or an unknown token exits 1", function()
      local home = assert(mw.open(path))   -- open before: the change must still show
      local _, tok = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role agent")
      tok = tok:match(TOKEN)
      assert(home:token_lookup(tok))
      local code, _, err = H.mw("token revoke --home " .. H.q(path) .. " --token " .. tok)
      assert.are.equal(0, code, err)
      local ok, msg, ecode = home:token_lookup(tok)
      assert.is_nil(ok)
      assert.is_string(msg)
      assert.are.equal("EAUTH", ecode)
      code, _, err = H.mw("token revoke --home " .. H.q(path) .. " --token " .. tok)
      assert.are.equal(1, code)
      assert.is_truthy(#err > 0)
      code, _, err = H.mw("token revoke --home " .. H.q(path) .. " --token mw_" .. string.rep("0", 64))
      assert.are.equal(1, code)
      assert.is_truthy(err:find("no such token", 1, true), err)
      home:close()
    end)

    it("revoking one token leaves the others working", function()
      local _, a = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role agent")
      local _, b = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role agent")
      a, b = a:match(TOKEN), b:match(TOKEN)
      assert.are.equal(0, (H.mw("token revoke --home " .. H.q(path) .. " --token " .. a)))
      local home = assert(mw.open(path))
      assert.is_nil((home:token_lookup(a)))
      assert.are.equal("acme", (home:token_lookup(b)))
      home:close()
    end)
  end)

  describe("log verify", function()
    local path, home, log
    before_each(function()
      path = H.home_path()
      init(path)
      home = assert(mw.open(path))
      log = assert(home:log("acme", "arc"))
      for i = 1, 6 do assert(log:append("tick", { i = i })) end
    end)
    after_each(function() home:close() end)

    local function verify(actor, env)
      return H.mw("log verify --home " .. H.q(path) .. " --tenant acme --actor " .. (actor or "arc"), env)
    end

    it("exits 0 when the chain holds", function()
      local code, out, err = verify()
      assert.are.equal(0, code, err)
      assert.is_truthy(out:find("6", 1, true), out)
    end)

    it("exits 1 naming the first bad cursor", function()
      local sid = H.stream_id(path, "acme", "arc")
      H.sql(path, string.format("UPDATE entries SET body='{\"i\":40}' WHERE stream=%d AND cursor=4", sid))
      H.sql(path, string.format("UPDATE entries SET body='{\"i\":50}' WHERE stream=%d AND cursor=5", sid))
      local code, out, err = verify()
      assert.are.equal(1, code)
      local text = out .. err
      assert.is_truthy(text:find("cursor 4", 1, true), text)
      assert.is_falsy(text:find("cursor 5", 1, true), text)
    end)

    it("exits 1 for an actor with no log", function()
      local code, _, err = verify("ghost")
      assert.are.equal(1, code)
      assert.is_truthy(err:find("ghost", 1, true), err)
    end)

    it("checks an HMAC chain with its key, and says the key is missing without it", function()
      local key = H.tmpfile("cli-chain-key-0123456789")
      local kpath = H.home_path()
      init(kpath, nil, { MW_CHAIN_KEY_FILE = key })
      local code, _, err = H.lua([[
        local mw = require "mw"
        local home = assert(mw.open(arg[1]))
        local log = assert(home:log("acme", "arc"))
        for i = 1, 3 do assert(log:append("tick", { i = i })) end
      ]], { MW_CHAIN_KEY_FILE = key }, kpath)
      assert.are.equal(0, code, err)
      local args = "log verify --home " .. H.q(kpath) .. " --tenant acme --actor arc"
      code, _, err = H.mw(args, { MW_CHAIN_KEY_FILE = key })
      assert.are.equal(0, code, err)
      code, _, err = H.mw(args, { MW_CHAIN_KEY_FILE = false })
      assert.are.equal(1, code)
      assert.is_truthy(err:find("MW_CHAIN_KEY_FILE", 1, true), err)
    end)
  end)

  describe("replay", function()
    local path, home, log
    before_each(function()
      path = H.home_path()
      init(path)
      home = assert(mw.open(path))
      log = assert(home:log("acme", "arc"))
      assert(log:append("run", { skill = "build", input = { files = mw.array(), opts = mw.object() } }))
      assert(log:append("remember", { key = "zeta", value = { 3, 2, 1 } }))
      assert(log:append("remember", { key = "alpha", value = math.maxinteger }))
    end)
    after_each(function() home:close() end)

    local function replay(to)
      return H.mw("replay --home " .. H.q(path) .. " --tenant acme --actor arc --to " .. to)
    end

    it("--to N prints the state at N as canonical JSON", function()
      local f = assert(home:fold(H.fold_path))
      for n = 0, 3 do
        local code, out, err = replay(n)
        assert.are.equal(0, code, err)
        local text = out:match("^(.-)\n$")
        assert.is_string(text, "not one line: " .. out)
        assert.are.equal(mw.json.canonical(text), text)
        assert.are.equal(assert(log:replay(f, n)), text)
      end
      local _, out = replay(3)
      assert.is_truthy(out:find('"memory":{"alpha":9223372036854775807,"zeta":[3,2,1]}', 1, true), out)
      assert.is_truthy(out:find('"input":{"files":[],"opts":{}}', 1, true), out)
    end)

    it("uses the fold in MW_SCRIPTS, as the host does", function()
      H.write_fold("return function(s, e) s.n = (s.n or 0) + 1 return s end", path)
      local code, out = H.mw("replay --home " .. H.q(path) .. " --tenant acme --actor arc --to 2",
                             { MW_SCRIPTS = path .. "/scripts" })
      assert.are.equal(0, code)
      assert.are.equal('{"n":2}\n', out)
    end)

    it("is not stopped by a corrupt head: the same bytes as before", function()
      local f = assert(home:fold(H.fold_path))
      local _, before = replay(3)
      local id = assert(log:snapshot(f, { head = true }))
      H.sql(path, "UPDATE snapshots SET state='{}' WHERE id='" .. id .. "'")
      local _, _, ecode = log:hydrate(f)
      assert.are.equal("ECORRUPT", ecode)   -- a wake is refused...
      for _, n in ipairs({ 3, 2 }) do        -- ...a replay is not
        local code, out, err = replay(n)
        assert.are.equal(0, code, err)
        if n == 3 then assert.are.equal(before, out) end
      end
    end)

    it("--to past the end exits 1 with a message", function()
      local code, out, err = replay(4)
      assert.are.equal(1, code)
      assert.are.equal("", out)
      assert.is_truthy(err:find("past", 1, true), err)
    end)

    it("a fold that fails exits 1 with its message", function()
      H.write_fold("return function(s, e) error('fold says no') end", path)
      local code, out, err = H.mw("replay --home " .. H.q(path) .. " --tenant acme --actor arc --to 1",
                                  { MW_SCRIPTS = path .. "/scripts" })
      assert.are.equal(1, code)
      assert.are.equal("", out)
      assert.is_truthy(err:find("fold says no", 1, true), err)
    end)
  end)

  describe("a directory that is not an MW home", function()
    local function refused(path, what)
      for _, args in ipairs({
        "log verify --tenant acme --actor arc",
        "replay --tenant acme --actor arc --to 0",
        "token create --tenant acme --role agent",
        "token revoke --token mw_" .. string.rep("1", 64),
      }) do
        local code, out, err = H.mw(args .. " --home " .. H.q(path))
        assert.is_true(code ~= 0, what .. ": mw " .. args .. " exited 0")
        assert.are.equal("", out)
        assert.is_truthy(err:find("not an MW home", 1, true), what .. ": " .. err)
      end
    end

    it("an empty directory is refused with a clear error and left empty", function()
      local dir = H.tmpdir()
      refused(dir, "empty dir")
      assert.are.equal("", fingerprint_dir(dir))
      assert.is_false(H.exists(dir .. "/mw.db"))
    end)

    it("a missing directory is refused and not created", function()
      local dir = H.tmpdir() .. "/missing"
      refused(dir, "missing dir")
      local code = H.run("test -e " .. H.q(dir))
      assert.are_not.equal(0, code)
    end)

    it("a directory whose mw.db is another database is refused", function()
      local dir = H.tmpdir()
      H.run("sqlite3 " .. H.q(dir .. "/mw.db") .. " 'CREATE TABLE t(x)'")
      refused(dir, "foreign mw.db")
    end)

    it("a directory whose mw.db is not a database is refused", function()
      local dir = H.tmpdir()
      H.write(dir .. "/mw.db", "this is not sqlite\n")
      local code, out, err = H.mw("log verify --tenant acme --actor arc --home " .. H.q(dir))
      assert.are_not.equal(0, code)
      assert.are.equal("", out)
      assert.is_truthy(#err > 0)
      assert.are.equal("this is not sqlite\n", H.read(dir .. "/mw.db"))
    end)
  end)

  describe("a read-only home", function()
    it("refuses writes cleanly and changes nothing", function()
      if H.uid() == 0 then
        pending("running as root: chmod a-w does not stop root from writing, so a read-only home cannot be made here")
        return
      end
      local path = H.home_path()
      init(path)
      local home = assert(mw.open(path))
      assert(assert(home:log("acme", "arc")):append("tick", {}))
      home:close()
      H.run("chmod -R a-w " .. H.q(path))
      local before = fingerprint_dir(path)
      local code, out, err = H.mw("token create --home " .. H.q(path) .. " --tenant acme --role agent")
      assert.are_not.equal(0, code)
      assert.are.equal(0, #tokens_in(out))
      assert.is_truthy(#err > 0)
      -- through the module: no open for writing, or no write
      local h2, msg, ecode = mw.open(path)
      if h2 then
        local log = h2:log("acme", "arc", false)
        local ok
        if log then ok, msg, ecode = log:append("tick", {}) end
        assert.is_nil(ok)
        h2:close()
      end
      assert.are.equal("EUNAVAIL", ecode, msg)
      H.run("chmod -R u+w " .. H.q(path))
      assert.are.equal(before, fingerprint_dir(path))
    end)
  end)
end)
