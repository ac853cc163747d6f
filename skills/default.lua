-- default.lua -- the default skill: records what it was asked.  The host
-- logs every run's input (the `run` entry), and the fold keeps it in
-- state.last_run; with {"remember": {"key": k, "value": v}} it also stages a
-- `remember` entry, which the fold keeps in state.memory[k].
return {
  name = "default",
  description = "Records its input; remembers {remember = {key, value}}.",
  run = function(ctx, input)
    if type(input) == "table" and type(input.remember) == "table"
       and type(input.remember.key) == "string" then
      ctx.remember(input.remember.key, input.remember.value)
    end
    return { recorded = true, cursor = ctx.cursor, runs = (ctx.state.counts or {}).run or 0 }
  end,
}
