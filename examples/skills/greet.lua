-- greet.lua -- an example skill: greets someone by name and remembers how many
-- times it has greeted them.  Put it in HOME/tenants/<tenant>/skills/ and run
-- it with the input {"name": "Ada"}.  Its test: spec/example_skill_spec.lua.
return {
  name = "greet",
  description = "Greets input.name and remembers how often it greeted each name.",

  -- ctx.state is the actor's state (its log, folded) as this run starts.
  -- ctx.remember stages a `remember` entry; it is committed with the run, and
  -- the default fold keeps it in state.memory[key].
  run = function(ctx, input)
    local name = type(input) == "table" and type(input.name) == "string" and input.name or "world"
    local key = "greeted:" .. name
    local times = ((ctx.state.memory or {})[key] or 0) + 1
    ctx.remember(key, times)
    return { greeting = string.format("Hello, %s!", name), times = times }
  end,
}
