-- sweep.lua -- the sweep: the deterministic, cursor-guarded pass that folds
-- every log entry since the sweep cursor into the corpus exactly once.  It
-- runs in the fold's sandbox (no clock, no randomness, no I/O), so the corpus
-- depends only on the log.  The host stores the corpus and the cursor it
-- reached in one transaction: a crash repeats nothing and skips nothing.

local LATEST = 10   -- how many recent items the corpus keeps

-- A short, deterministic summary of an entry for the corpus's latest items.
local function summary(e)
  local b = e.body
  if e.kind == "run" then return { skill = b.skill } end
  if e.kind == "handover" then return { reason = b.reason } end
  if e.kind == "fact" then
    if b.node then return { node = b.node.key } end
    if b.edge then return { edge = b.edge.from .. " " .. b.edge.rel .. " " .. b.edge.to } end
    return json.object()
  end
  if e.kind == "remember" then return { key = b.key } end
  return json.object()
end

local function feedback(corpus, source)
  corpus.feedback = corpus.feedback or json.object()
  local f = corpus.feedback[source]
  if not f then
    f = { uses = 0, signals = 0, relevance = 0 }
    corpus.feedback[source] = f
  end
  return f
end

return {
  initial = function()
    return { counts = json.object(), latest = json.array(), swept_to = 0, entries = 0 }
  end,
  fold = function(corpus, e)
    corpus.counts[e.kind] = (corpus.counts[e.kind] or 0) + 1
    corpus.entries = corpus.entries + 1
    corpus.swept_to = e.cursor
    if corpus.first_ts == nil then corpus.first_ts = e.ts end
    corpus.last_ts = e.ts
    local latest = corpus.latest
    latest[#latest + 1] = { cursor = e.cursor, kind = e.kind, ts = e.ts, about = summary(e) }
    if #latest > LATEST then table.remove(latest, 1) end
    -- Source feedback, summarised per source: the items an entry says it
    -- used (delta item ids are "<source>/<id>"), and relevance signals.
    local b = e.body
    if type(b) == "table" then
      if type(b.uses) == "table" then
        for _, id in ipairs(b.uses) do
          local src = type(id) == "string" and id:match("^([^/]+)/")
          if src then
            local f = feedback(corpus, src)
            f.uses = f.uses + 1
          end
        end
      end
      if e.kind == "feedback" and type(b.source) == "string" and type(b.signal) == "number" then
        local f = feedback(corpus, b.source)
        f.signals = f.signals + 1
        f.relevance = f.relevance + b.signal
      end
    end
    return corpus
  end,
}
