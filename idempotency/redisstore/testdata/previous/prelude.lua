-- Shared by every script of the store (prepended by redisstore.go).
-- Each script touches exactly one key, KEYS[1], so it runs on Redis Cluster.
-- Times are milliseconds of the server clock (TIME), never the caller's.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as decimal strings for redis.call: Redis versions differ in how
-- they turn a Lua number (a double) into an argument.
local function int(n)
  return string.format('%d', n)
end

-- The attempt history is a JSON array of objects (see histEntry in Go).
-- cjson writes numbers with 14 significant digits: Unix milliseconds need 13
-- until the year 5138.
local function decode_history(s)
  if not s or s == '' then
    return {}
  end
  local ok, h = pcall(cjson.decode, s)
  if not ok or type(h) ~= 'table' then
    return {}
  end
  return h
end

-- cjson encodes an empty table as {}; the history is always an array.
local function encode_history(h)
  if #h == 0 then
    return '[]'
  end
  return cjson.encode(h)
end
