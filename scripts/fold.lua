-- fold.lua -- the default fold: how an actor's log becomes its state.
-- Runs in a deterministic sandbox (no clock, no randomness, no I/O; pairs
-- visits keys in sorted order), once per entry: state = fold(state, entry).
-- entry = { cursor = n, ts = ms, kind = "run", body = <decoded JSON> }.
-- Changing this file changes the fold's fingerprint: snapshots made by the
-- old version are bypassed and state is rebuilt ("refolded").

local function count(state, kind)
  local c = state.counts
  if not c then c = {}; state.counts = c end
  c[kind] = (c[kind] or 0) + 1
end

local handlers = {}

-- A run: what the skill was asked, kept as the actor's last input.
function handlers.run(state, e)
  state.last_run = { skill = e.body.skill, input = e.body.input, cursor = e.cursor }
end

-- A handover: what the actor carries to its next wake.
function handlers.handover(state, e)
  state.handover = e.body.handover
  state.last_sleep = { cursor = e.cursor, reason = e.body.reason }
end

-- The operator's direction: goals and themes.
function handlers.direction(state, e)
  state.direction = e.body.direction
  state.direction_set = { cursor = e.cursor, ts = e.ts, by = e.body.by }
end

-- A note the actor chose to remember: { key = "...", value = <JSON> }.
function handlers.remember(state, e)
  local key = e.body.key
  if type(key) == "string" then
    state.memory = state.memory or {}
    state.memory[key] = e.body.value
  end
end

return {
  initial = function() return {} end,
  fold = function(state, e)
    count(state, e.kind)
    state.cursor = e.cursor
    local h = handlers[e.kind]
    if h then h(state, e) end
    return state
  end,
}
