-- delta.lua -- how pulled items become delta items: the source's policy
-- filters, scores and tags each item with subjects.  A source is blind to
-- subject: the subject is a lens on the read, a tag on the yield, and a
-- policy may only tag subjects the roster lets the source feed.
--   apply(source, items, policy) -> items with id "<source>/<raw id>",
--   source, subjects and score, in the order pulled.
return function(source, items, policy)
  local allowed = {}
  for _, s in ipairs(source.subjects) do allowed[s] = true end
  local out = json.array()
  for _, item in ipairs(items) do
    if not policy.filter or policy.filter(item, source) then
      local subjects = policy.subjects and policy.subjects(item, source) or source.subjects
      local tags = json.array()
      for _, s in ipairs(subjects) do
        if allowed[s] then tags[#tags + 1] = s end
      end
      if #tags > 0 then
        local score = policy.score and policy.score(item, source) or 1
        if type(score) ~= "number" or score ~= score then
          error("policy score for " .. tostring(item.id) .. " is not a number")
        end
        local d = {}
        for k, v in pairs(item) do d[k] = v end
        d.id = source.id .. "/" .. tostring(item.id)
        d.source = source.id
        d.subjects = tags
        d.score = score
        out[#out + 1] = d
      end
    end
  end
  return out
end
