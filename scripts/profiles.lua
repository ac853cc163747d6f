-- profiles.lua -- the boot profiles, as data.  A profile says which skill a
-- run uses when it names none, how many facts the briefing carries, and the
-- briefing's size budget (bytes of canonical JSON per leg list).
return {
  builder   = { skill = "default", facts = 12, latest = 5 },
  companion = { skill = "default", facts = 6,  latest = 3 },
  agent     = { skill = "default", facts = 8,  latest = 5 },
}
