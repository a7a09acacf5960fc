-- Shared by every script of the store (prepended by redisstore.go).
-- Each script touches exactly one key, KEYS[1], so it runs on Redis Cluster.
-- Times are milliseconds of the server clock (TIME), never the caller's.
--
-- These scripts run on every message, so they avoid what costs most in
-- Redis's Lua: converting between numbers and text (tonumber,
-- string.format, cjson's numbers), decoding and encoding JSON, and
-- redis.call replies of many fields. Values the caller computed are passed
-- to Redis as the text they arrived as.

-- The server clock as decimal text: TIME's seconds followed by the three
-- leading digits of its microseconds (written without leading zeros).
local function now_text()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6, -4)
end

local function now_ms()
  return tonumber(now_text())
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

-- Claim writes its attempt as the last entry of the history, with the
-- result as that entry's last member, so a history whose newest attempt is
-- in progress ends with OPEN_TAIL. Complete then closes that attempt by
-- rewriting the tail instead of decoding and encoding the whole history. A
-- history that ends otherwise (written by an earlier version of these
-- scripts, whose cjson put members in any order) is decoded.
local OPEN_TAIL = '"result":"in_progress"}]'
