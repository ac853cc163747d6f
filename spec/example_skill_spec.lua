-- example_skill_spec.lua -- how a skill author tests a skill: in process, with
-- mw.host (the engine without HTTP), on a temporary home.  The skill under
-- test is examples/skills/greet.lua.  See docs/skills.md, "Testing a skill".
local mw = require "mw"   -- build/mw.so (busted --cpath='build/?.so')

local repo = os.getenv("PWD")   -- the specs run from the repository's root

local function sh(cmd) assert(os.execute(cmd), cmd) end

describe("the greet skill", function()
  local home, host

  before_each(function()
    -- a home, with the skill in its default tenant's skills folder
    home = os.tmpname()
    os.remove(home)
    assert(mw.open(home, { create = true })):close()
    sh("mkdir -p " .. home .. "/tenants/default/skills")
    sh("cp " .. repo .. "/examples/skills/greet.lua " .. home .. "/tenants/default/skills/")
    host = assert(mw.host { home = home, scripts = os.getenv("MW_SCRIPTS"), skills = repo .. "/skills" })
  end)

  after_each(function()
    host:close()
    sh("rm -rf " .. home)
  end)

  it("greets, remembers, and still knows after a sleep and a new wake", function()
    -- wake -> run -> sleep
    local status, woke = host:call("wake", { actor_id = "ada" })
    assert.are.equal(200, status)

    local status2, ran = host:call("run", { session_id = woke.session_id, skill = "greet", input = { name = "Ada" } })
    assert.are.equal(200, status2)
    assert.are.same({ greeting = "Hello, Ada!", times = 1 }, ran.result)
    assert.are.equal(2, ran.committed)   -- the run entry, and what the skill remembered

    assert.are.equal(200, (host:call("sleep", { session_id = woke.session_id })))

    -- wake again: the state the skill left
    local _, again = host:call("wake", { actor_id = "ada" })
    assert.are.equal(1, again.boot_packet.state.memory["greeted:Ada"])

    local _, ran2 = host:call("run", { session_id = again.session_id, skill = "greet", input = { name = "Ada" } })
    assert.are.equal(2, ran2.result.times)
    host:call("sleep", { session_id = again.session_id })

    -- the log holds what each run wrote
    local _, log = host:call("log", nil, { actor = "ada", query = "from=1&limit=10" })
    assert.are.same({ "run", "remember", "handover", "run", "remember", "handover" },
      { log.entries[1].kind, log.entries[2].kind, log.entries[3].kind,
        log.entries[4].kind, log.entries[5].kind, log.entries[6].kind })
  end)

  it("greets the world when no name is given", function()
    local _, woke = host:call("wake", { actor_id = "bob" })
    local status, ran = host:call("run", { session_id = woke.session_id, skill = "greet" })
    assert.are.equal(200, status)
    assert.are.equal("Hello, world!", ran.result.greeting)
    host:call("sleep", { session_id = woke.session_id })
  end)

  it("can be entered as a skill, as heartbeats and the operator do", function()
    local status, answer = host:call("skill", { input = { name = "Cy" } }, { actor = "cy", skill = "greet" })
    assert.are.equal(200, status)
    assert.are.equal("Hello, Cy!", answer.result.greeting)
    local _, woke = host:call("wake", { actor_id = "cy" })
    assert.are.equal(1, woke.boot_packet.state.memory["greeted:Cy"])
    host:call("sleep", { session_id = woke.session_id })
  end)
end)
