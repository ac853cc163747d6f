-- fuzz_regressions_spec.lua -- inputs the fuzz targets (fuzz/*_fuzz.c, run by
-- fuzz/run.sh) found, each a test named after what it caught.  The crashing
-- inputs are kept as they were found; see the comments for the target and
-- the check that fired.

local H = require "helpers"
local mw = require "mw"
local J = mw.json

describe("fuzz regressions: canonical JSON (json_fuzz)", function()
  -- json_fuzz check 3: "Lua decode+encode of the canonical text changes its
  -- bytes".  Input [-9223372036854775809]: text canon writes the double -2^63
  -- as -9223372036854776000 (a literal outside int64 goes through
  -- mw__json_double); the Lua decoder reads that back as the float -2^63,
  -- and the encoder writes an integral float in [-2^63, 2^63) with %lld:
  -- -9223372036854775808.  So the canonical bytes of a body do not survive a
  -- trip through Lua (a fold's state, a skill's input) unchanged.
  it("json_lua_roundtrip_float_minus_2p63: canonical text of -2^63 as a float survives decode+encode", function()
    for _, input in ipairs({
      "[-9223372036854775809]",
      "-9223372036854775810",
      '{"a":-9223372036854775808.0}',
      "-9.223372036854775808e18",
    }) do
      local canon = assert(J.canonical(input))
      assert.are.equal(canon, J.encode(J.decode(canon)), "canonical " .. canon .. " of " .. input)
    end
  end)

  it("json_lua_encode_matches_text_canon_minus_2p63: decode+encode of the input equals its text canon", function()
    for _, input in ipairs({ "[-9223372036854775809]", "-9223372036854775810" }) do
      assert.are.equal(J.canonical(input), J.encode(J.decode(input)), input)
    end
  end)

  it("json_int64_min_integer_literal_stays_exact: the integer -2^63 is untouched by the fix", function()
    assert.are.equal("-9223372036854775808", J.canonical("-9223372036854775808"))
    assert.are.equal("-9223372036854775808", J.encode(J.decode("-9223372036854775808")))
    assert.are.equal("-9223372036854775808", J.encode(math.mininteger))
  end)
end)

describe("fuzz regressions: log chain (chain_fuzz)", function()
  local path, home, log
  before_each(function()
    path = H.home_path()
    home = assert(mw.open(path, { create = true }))
    log = assert(home:log("acme", "arc"))
    for i = 1, 6 do assert(log:append("run", { i = i })) end
    assert(log:verify())
  end)
  after_each(function()
    if home then home:close() end
    H.cleanup()
  end)

  -- chain_fuzz: "verify accepts a chain whose row at position 2 is not the
  -- pristine one -- kind: 4 bytes, was 3 bytes".  Input 00 09 01 03 00: insert
  -- a NUL at the end of entry 2's kind.  mw_log_verify hashes the kind up to
  -- its first NUL (strlen of sqlite3_column_text), so "run\0" -- or
  -- "run\0anything" -- hashes as "run" and the tampered row verifies.
  it("chain_verify_kind_with_embedded_nul: a kind with bytes after a NUL is tampering", function()
    local sid = H.stream_id(path, "acme", "arc")
    H.sql(path, string.format(
      "UPDATE entries SET kind=CAST(X'72756E00657669' AS TEXT) WHERE stream=%d AND cursor=2", sid))
    assert.are.equal("72756E00657669",
      H.sql(path, string.format("SELECT hex(kind) FROM entries WHERE stream=%d AND cursor=2", sid)))
    local ok, msg, code, bad = log:verify()
    assert.is_nil(ok, "verify accepted a kind stored as run\\0evi")
    assert.are.equal("EBROKEN", code, msg)
    assert.are.equal(2, bad, msg)
  end)

  it("chain_verify_kind_trailing_nul_only: even a lone trailing NUL is caught", function()
    local sid = H.stream_id(path, "acme", "arc")
    H.sql(path, string.format("UPDATE entries SET kind=CAST(X'72756E00' AS TEXT) WHERE stream=%d AND cursor=5", sid))
    local ok, msg, code, bad = log:verify()
    assert.is_nil(ok, "verify accepted a kind stored as run\\0")
    assert.are.equal("EBROKEN", code, msg)
    assert.are.equal(5, bad, msg)
  end)
end)
