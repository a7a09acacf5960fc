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

-- A record is one of two forms (see doc.go, "Record formats"):
--   - a hash, written by earlier releases and by every path of this one
--     but the two common ones;
--   - a string, the fast form: the first attempt of a key, in progress
--     (written by a plain SET NX, no script) or DONE (written by
--     Complete). Its header line is
--       ~1i <token> <lease_ms> <retention_ms> <#fp> <#ids> <#reopen>
--     or, once DONE,
--       ~1d <token> <lease_ms> <retention_ms> <#fp> <#ids> <#reopen> <started_ms> <kept_ms>
--     and the rest is the fingerprint, the history IDs (JSON members, see
--     claim.lua) and the replay ID, of the given lengths in bytes, then
--     the outcome JSON of a DONE record. An in-progress fast record has no
--     clock reading of its own: it expires lease_ms + retention_ms after
--     its claim, so its lease ends at PEXPIRETIME - retention_ms and it
--     started lease_ms before that. A DONE one expires kept_ms (the
--     completing store's retention) after its Complete, which is when the
--     attempt ended: PEXPIRETIME - kept_ms.
local FAST_OPEN = '^~1i (%S+) (%d+) (%d+) (%d+) (%d+) (%d+)\n'
local FAST_DONE = '^~1d (%S+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)\n'

-- The fields of fast record v at key, as its hash would hold them, or nil
-- when v is no fast record.
local function fast_fields(key, v)
  local token, lease, ret, nfp, nids, nre = string.match(v, FAST_OPEN)
  local state, started, ended, until_ms = 'in_progress', nil, nil, ''
  if token then
    local exp = redis.call('PEXPIRETIME', key)
    if exp > 0 then
      until_ms = exp - tonumber(ret)
      started = int(until_ms - tonumber(lease))
      until_ms = int(until_ms)
    else
      until_ms, started = '0', '0' -- no expiry (PERSIST): long over
    end
  else
    local kept
    token, lease, ret, nfp, nids, nre, started, kept = string.match(v, FAST_DONE)
    if not token then
      return nil
    end
    state = 'done'
    local exp = redis.call('PEXPIRETIME', key)
    ended = started
    if exp > 0 then
      ended = int(exp - tonumber(kept))
    end
  end
  local p = string.find(v, '\n', 1, true) + 1
  local fp = string.sub(v, p, p + nfp - 1)
  p = p + nfp
  local ids = string.sub(v, p, p + nids - 1)
  p = p + nids
  local f = {
    state = state, fp = fp, token = token, attempts = '1', canceled = '0', until_ms = until_ms,
    reopened_by = string.sub(v, p, p + nre - 1),
  }
  local entry = '[{"attempt":1,"started_ms":' .. started .. ids .. ',"result":'
  if state == 'done' then
    f.outcome = string.sub(v, p + nre)
    f.req = token
    f.history = entry .. '"done","ended_ms":' .. ended .. '}]'
  else
    f.history = entry .. '"in_progress"}]'
  end
  return f
end

-- Makes the record at key a hash when it is an in-progress fast record,
-- keeping its expiry, so that the code written for hashes goes on.
-- Returns the record's form: 'hash', 'none', or 'done' for a fast DONE
-- record, left as it is. Raises an error when key holds anything else.
local function open_record(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'string' then
    if t == 'hash' or t == 'none' then
      return t
    end
    error(redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds a ' .. t .. ', not a record'))
  end
  local f = fast_fields(key, redis.call('GET', key))
  if not f then
    error(redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds a string that is not a record'))
  end
  if f.state == 'done' then
    return 'done'
  end
  local exp = redis.call('PEXPIRETIME', key)
  redis.call('DEL', key)
  redis.call('HSET', key, 'state', f.state, 'fp', f.fp, 'token', f.token, 'attempts', f.attempts,
    'canceled', f.canceled, 'until_ms', f.until_ms, 'history', f.history)
  if f.reopened_by ~= '' then
    redis.call('HSET', key, 'reopened_by', f.reopened_by)
  end
  if exp > 0 then
    redis.call('PEXPIREAT', key, exp)
  end
  return 'hash'
end
