-- waking.lua -- Waking: compose the briefing an actor reads when it comes
-- online.  The direction, sources and corpus legs come from the log (through
-- the folded state); facts come from the Cortex.  Deterministic: the same
-- state and request give the same briefing, byte for byte.

local function direction_leg(state)
  local d = state.direction
  if d == nil then return json.object() end
  return { current = d, set = state.direction_set }
end

-- The roster floor: never empty.  Every declared source with its one line
-- and the feedback that accrued for it in the log (folded by the sweep);
-- with no roster declared, the actor's own log is the declared source.
local function sources_leg(req)
  local feedback = (req.corpus or {}).feedback or {}
  local leg = json.array()
  for _, src in ipairs(req.roster or {}) do
    leg[#leg + 1] = {
      id = src.id, locator = src.locator, does = src.does, subjects = src.subjects,
      feedback = feedback[src.id] or json.object(),
    }
  end
  if #leg == 0 then
    leg[1] = {
      id = "self",
      locator = "log:" .. req.actor_id,
      does = "this actor's own log: what it was asked, what it did, what it handed over",
      subjects = json.array { "atividade" },
      feedback = feedback.self or json.object(),
    }
  end
  return leg
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

-- What to look for in the Cortex: the context hint, else what the actor was
-- directed to and what it handed over (deterministic: built from the state).
local function seeds(req, state)
  if req.context_hint and #req.context_hint > 0 then return req.context_hint end
  local words = {}
  local function collect(v, depth)
    if depth > 3 or #words > 32 then return end
    if type(v) == "string" then words[#words + 1] = v
    elseif type(v) == "table" then
      for _, x in pairs(v) do collect(x, depth + 1) end
    end
  end
  collect(state.direction, 0)
  collect(state.handover, 0)
  -- a hint is at most 2,000 bytes: whatever the state holds, Waking composes
  return (table.concat(words, " "):sub(1, 2000))
end

-- Facts: navigated in the Cortex, seeded by the hint and the state, cut to
-- the profile's budget.  A Cortex that is down darkens this leg only.
local function facts_leg(req, state)
  local budget = (req.profile_config or {}).facts or 10
  local hint = seeds(req, state)
  local ok, res, why = pcall(cortex.navigate, { hint = hint, limit = budget })
  if not ok then res, why = nil, tostring(res) end
  if not res then
    return { status = "dark", reason = why, nodes = json.array(), edges = json.array() }
  end
  return { status = "live", nodes = res.nodes, edges = res.edges }
end

return {
  compose = function(req)
    local state = req.state
    return {
      direction = direction_leg(state),
      sources = sources_leg(req),
      corpus = corpus_leg(req),
      facts = facts_leg(req, state),
    }
  end,
}
