-- json_spec.lua -- mw.json: canonical JSON (contract "Canonical JSON"):
-- RFC 8785 with exact int64, refusals, and {} / [] kept apart.

require "helpers"
local mw = require "mw"
local J = mw.json

-- Asserts a refusal: nil, a message, and the code (default EJSON).
local function refused(code, pattern, ok, msg, got_code)
  assert.is_nil(ok, "expected a refusal, got " .. tostring(ok))
  assert.is_string(msg)
  assert.is_true(#msg > 0, "refusal without a message")
  assert.are.equal(code or "EJSON", got_code)
  if pattern then
    assert.is_truthy(msg:find(pattern), "message '" .. msg .. "' does not mention '" .. pattern .. "'")
  end
end

local function nest(open, close, n, inner)
  return string.rep(open, n) .. (inner or "") .. string.rep(close, n)
end

describe("mw.json.canonical", function()
  it("sorts object keys, recursively, and keeps array order", function()
    assert.are.equal('{"a":2,"b":1,"c":{"y":[3,2,1],"z":1}}',
      J.canonical('{"b":1,"a":2,"c":{"z":1,"y":[3,2,1]}}'))
  end)

  it("sorts keys by UTF-16 code units (RFC 8785), not by UTF-8 bytes", function()
    -- U+1F600 is D83D DE00 in UTF-16, before U+FB01; in UTF-8 it sorts after.
    assert.are.equal('{"a":0,"\u{1F600}":1,"\u{FB01}":2}',
      J.canonical('{"\u{FB01}":2,"\u{1F600}":1,"a":0}'))
  end)

  it("removes insignificant whitespace", function()
    assert.are.equal('{"a":[1,2,{"b":true}],"c":null}',
      J.canonical(' \n{ "c" :\tnull ,\r\n "a" : [ 1 , 2 , { "b" : true } ] }\n '))
  end)

  it("writes strings with the one RFC 8785 escaping", function()
    local got = J.canonical('"\\u0041\\u00e9\\/\\b\\f\\n\\r\\t\\u001f\\u007f\\"\\\\\\ud83d\\ude00"')
    assert.are.equal('"A\u{e9}/\\b\\f\\n\\r\\t\\u001f\127\\"\\\\\u{1F600}"', got)
  end)

  it("writes numbers in their ECMAScript form", function()
    assert.are.equal('[1,100,0,0.1,1e-7,1e+21,1.5e+300,0.5]',
      J.canonical('[1.0,1e2,-0,0.1,1E-7,1e21,1.5e300,5e-1]'))
  end)

  it("keeps the int64 extremes exact", function()
    assert.are.equal("9223372036854775807", J.canonical("9223372036854775807"))
    assert.are.equal("-9223372036854775808", J.canonical("-9223372036854775808"))
    assert.are.equal('[9223372036854775807,-9223372036854775808,9223372036854775806]',
      J.canonical('[9223372036854775807, -9223372036854775808, 9223372036854775806]'))
  end)

  it("does not clamp integers just outside int64 to its extremes", function()
    local hi, lo = J.canonical("9223372036854775808"), J.canonical("-9223372036854775809")
    assert.is_string(hi)
    assert.are_not.equal("9223372036854775807", hi)
    assert.are_not.equal("-9223372036854775808", lo)
  end)

  it("refuses duplicate keys, also when spelled with escapes", function()
    refused("EJSON", "duplicate", J.canonical('{"a":1,"a":2}'))
    refused("EJSON", "duplicate", J.canonical('{"a":1,"\\u0061":2}'))
    refused("EJSON", "duplicate", J.canonical('{"x":{"a":1,"b":2,"a":3}}'))
  end)

  it("refuses lone surrogates", function()
    refused("EJSON", "surrogate", J.canonical('"\\ud800"'))
    refused("EJSON", "surrogate", J.canonical('"\\udc00"'))
    refused("EJSON", "surrogate", J.canonical('"a\\ud83dx"'))
    refused("EJSON", "surrogate", J.canonical('"\\ud800\\u0041"'))
    refused("EJSON", "surrogate", J.canonical('{"\\udfff":1}'))
  end)

  it("refuses invalid UTF-8", function()
    for _, bad in ipairs({ "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80", "\x80" }) do
      refused("EJSON", "UTF%-8", J.canonical('"' .. bad .. '"'))
      refused("EJSON", nil, J.canonical('{"' .. bad .. '":1}'))
    end
  end)

  it("accepts nesting 256 deep and refuses 257", function()
    local ok256 = nest("[", "]", 256)
    assert.are.equal(ok256, J.canonical(ok256))
    local obj256 = nest('{"a":', "}", 256, "1")
    assert.are.equal(obj256, J.canonical(obj256))
    refused("EJSON", "256", J.canonical(nest("[", "]", 257)))
    refused("EJSON", "256", J.canonical(nest('{"a":', "}", 257, "1")))
  end)

  it("keeps {} and [] apart, also nested", function()
    assert.are.equal("{}", J.canonical("{ }"))
    assert.are.equal("[]", J.canonical("[ ]"))
    assert.are.equal('[[],{}]', J.canonical('[ [ ] , { } ]'))
    assert.are.equal('{"a":[],"b":{},"c":[{},[]]}', J.canonical('{"c":[{},[]],"b":{},"a":[]}'))
  end)

  it("refuses malformed text", function()
    for _, bad in ipairs({ "", "[1,]", "01", "{} x", "{'a':1}", "[1 2]", "nul", "\xEF\xBB\xBF{}", "1e400", "NaN" }) do
      refused("EJSON", nil, J.canonical(bad))
    end
  end)
end)

describe("mw.json.decode / encode", function()
  it("round-trips {} and [] distinctly, nested [[],{}] included", function()
    for _, text in ipairs({ "{}", "[]", "[[],{}]", '{"a":[],"b":{}}', '[{"x":[[],[{}]]}]' }) do
      local v = assert(J.decode(text))
      assert.are.equal(text, J.encode(v))
    end
  end)

  it("marks decoded arrays and objects with mw.array / mw.object", function()
    local a, o = J.decode("[]"), J.decode("{}")
    assert.are.equal(getmetatable(mw.array()), getmetatable(a))
    assert.are.equal(getmetatable(mw.object()), getmetatable(o))
    assert.are_not.equal(getmetatable(a), getmetatable(o))
    assert.are.equal(getmetatable(J.array()), getmetatable(a))
    assert.are.equal(getmetatable(J.object()), getmetatable(o))
  end)

  it("encodes marked empty tables by their mark", function()
    assert.are.equal("[]", J.encode(mw.array()))
    assert.are.equal("{}", J.encode(mw.object()))
    assert.are.equal("[]", J.encode(mw.array({})))
    assert.are.equal('{"a":[],"b":{}}', J.encode({ a = mw.array(), b = mw.object() }))
    assert.are.equal("[1,2,3]", J.encode(mw.array({ 1, 2, 3 })))
    assert.are.equal("[[],{}]", J.encode({ mw.array(), mw.object() }))
  end)

  it("mw.array / mw.object return the table they mark", function()
    local t = { 1 }
    assert.are.equal(t, mw.array(t))
    local o = {}
    assert.are.equal(o, mw.object(o))
  end)

  it("refuses tables that contradict their mark", function()
    refused("EJSON", "non%-string keys", J.encode(mw.object({ [1] = 2 })))
    refused("EJSON", "holes", J.encode(mw.array({ 1, nil, 3 })))
    refused("EJSON", nil, J.encode(mw.array({ a = 1 })))
    refused("EJSON", nil, J.encode({ 1, 2, a = 3 }))
  end)

  it("sorts keys when encoding Lua tables", function()
    assert.are.equal('{"a":1,"b":{"c":3,"d":4},"z":[1,"x"]}', J.encode({ z = { 1, "x" }, b = { d = 4, c = 3 }, a = 1 }))
  end)

  it("decodes 2^63-1 and -2^63 as exact integers and encodes them back", function()
    local v = assert(J.decode("[9223372036854775807,-9223372036854775808]"))
    assert.are.equal("integer", math.type(v[1]))
    assert.are.equal(math.maxinteger, v[1])
    assert.are.equal(math.mininteger, v[2])
    assert.are.equal("[9223372036854775807,-9223372036854775808]", J.encode(v))
    assert.are.equal("9223372036854775807", J.encode(math.maxinteger))
    assert.are.equal("-9223372036854775808", J.encode(math.mininteger))
  end)

  it("writes integral floats as integers and others in ECMAScript form", function()
    assert.are.equal("3", J.encode(3.0))
    assert.are.equal("0", J.encode(-0.0))
    assert.are.equal("0.5", J.encode(0.5))
    assert.are.equal("1e+21", J.encode(1e21))
  end)

  it("maps null to mw.null and back", function()
    assert.are.equal(mw.null, J.decode("null"))
    assert.are.equal(mw.null, J.null)
    assert.are.equal(mw.null, J.decode('{"a":null}').a)
    assert.are.equal('{"a":null}', J.encode({ a = mw.null }))
  end)

  it("refuses duplicate keys, lone surrogates and invalid UTF-8 when decoding", function()
    refused("EJSON", "duplicate", J.decode('{"a":1,"a":2}'))
    refused("EJSON", "surrogate", J.decode('"\\ud800"'))
    refused("EJSON", "surrogate", J.decode('"\\udc00\\ud800"'))
    refused("EJSON", "UTF%-8", J.decode('"\xff"'))
    refused("EJSON", nil, J.decode('"\xed\xa0\x80"'))
  end)

  it("decodes nesting 256 deep and refuses 257", function()
    local v = J.decode(nest("[", "]", 256))
    assert.is_table(v)
    assert.are.equal(nest("[", "]", 256), J.encode(v))
    refused("EJSON", "256", J.decode(nest("[", "]", 257)))
    refused("EJSON", "256", J.decode(nest('{"a":', "}", 257, "1")))
  end)

  it("encodes Lua tables nested 256 deep and refuses 257", function()
    local function build(n)
      local root = mw.array()
      local cur = root
      for _ = 2, n do
        local nxt = mw.array()
        cur[1] = nxt
        cur = nxt
      end
      return root
    end
    assert.are.equal(nest("[", "]", 256), J.encode(build(256)))
    refused("EJSON", "256", J.encode(build(257)))
  end)

  it("refuses invalid UTF-8 in Lua strings and keys", function()
    refused("EJSON", "UTF%-8", J.encode({ "a\xff" }))
    refused("EJSON", "UTF%-8", J.encode({ ["k\xc0\xaf"] = 1 }))
  end)

  it("refuses functions with a message naming the value and where it is", function()
    local ok, msg, code = J.encode(function() end)
    refused("EJSON", "cannot encode function", ok, msg, code)
    ok, msg, code = J.encode({ a = { b = { 1, function() end } } })
    refused("EJSON", "function", ok, msg, code)
    assert.is_truthy(msg:find("$.a.b[1]", 1, true), "message does not name the path: " .. msg)
  end)

  it("refuses other values JSON cannot hold", function()
    refused("EJSON", "thread", J.encode(coroutine.create(print)))
    refused("EJSON", "userdata", J.encode(io.stdout))
    refused("EJSON", "NaN", J.encode(0 / 0))
    refused("EJSON", nil, J.encode(1 / 0))
    refused("EJSON", nil, J.encode({ [true] = 1 }))
  end)

  it("decode refuses trailing data and a byte order mark", function()
    refused("EJSON", "trailing", J.decode("{} x"))
    refused("EJSON", nil, J.decode("\xEF\xBB\xBF{}"))
  end)

  it("raises on misuse (no argument)", function()
    assert.has_error(function() J.encode() end)
    assert.has_error(function() J.decode() end)
    assert.has_error(function() J.canonical({}) end)
  end)
end)
