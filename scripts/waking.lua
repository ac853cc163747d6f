-- waking.lua -- Waking: compose the briefing an actor reads when it comes
-- online.  The direction, sources and corpus legs come from the log (through
-- the folded state); facts come from the Cortex.  Deterministic: the same
-- state and request give the same briefing, byte for byte.

local function direction_leg(state)
  local d = state.direction
  if d == nil then return json.object() end
  return { current = d, set = state.direction_set }
end

-- The roster floor: never empty.  Until a tenant declares a roster, the
-- actor's own log is its declared source.
local function sources_leg(req)
  return json.array {
    {
      id = "self",
      locator = "log:" .. req.actor_id,
      does = "this actor's own log: what it was asked, what it did, what it handed over",
      subjects = json.array { "atividade" },
      feedback = json.object(),
    },
  }
end

-- What the sweep folded: counts by kind, the latest items, and the
-- consolidation point (the head the actor last slept at).
local function corpus_leg(req)
  local c = req.corpus or {}
  return {
    counts = c.counts or json.object(),
    latest = c.latest or json.array(),
    entries = c.entries or 0,
    swept_to = c.swept_to or 0,
    consolidated_to = req.head_cursor,
  }
end

local function facts_leg()
  return {
    status = "dark",
    reason = "no Cortex is installed on this host yet",
    nodes = json.array(),
    edges = json.array(),
  }
end

return {
  compose = function(req)
    local state = req.state
    return {
      direction = direction_leg(state),
      sources = sources_leg(req),
      corpus = corpus_leg(req),
      facts = facts_leg(),
    }
  end,
}
