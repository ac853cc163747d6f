-- default.lua -- the policy a source gets when its roster entry names none:
-- every item passes, scores 1, and carries every subject the source may feed.
return {}
