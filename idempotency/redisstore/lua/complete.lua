-- Complete: KEYS[1] = record key.
-- ARGV: token, request_id, outcome_json, retention_ms
-- Returns 1 when the record is DONE with this outcome, 0 when the lease is lost.
local key = KEYS[1]
local token, req, outcome = ARGV[1], ARGV[2], ARGV[3]

-- h with its open attempt closed by members ('"result":"done",...'), or nil
-- when h does not end with OPEN_TAIL.
local function close_open_tail(h, members)
  if not h or string.sub(h, -#OPEN_TAIL) ~= OPEN_TAIL then
    return nil
  end
  return string.sub(h, 1, -#OPEN_TAIL - 1) .. members .. '}]'
end

-- The common case: the fast record of a first attempt, in progress. Its
-- DONE form keeps the header and the rest, and adds the attempt's start,
-- the retention the DONE record is kept for, and the outcome; the token
-- doubles as the request ID.
local v = redis.pcall('GET', key)
if not v then
  return 0
end
if type(v) == 'string' then
  local tok, rest = string.match(v, '^~1i (%S+) (%d+ %d+ %d+ %d+ %d+)\n')
  if not tok then
    if string.match(v, '^~1d (%S+) ') == req then
      -- A re-send of this very call, as below.
      redis.call('SET', key, v, 'KEEPTTL')
      return 1
    end
    if string.sub(v, 1, 4) == '~1d ' then
      return 0
    end
    error(redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds a string that is not a record'))
  end
  if tok ~= token then
    return 0
  end
  local lease, ret = string.match(rest, '^(%d+) (%d+)')
  local exp = redis.call('PEXPIRETIME', key)
  local started = '0'
  if exp > 0 then
    started = int(exp - tonumber(ret) - tonumber(lease))
  end
  -- The end of the attempt is not written: it is when the record's
  -- retention started, PEXPIRETIME - retention_ms, which spares a TIME.
  redis.call('SET', key, '~1d ' .. tok .. ' ' .. rest .. ' ' .. started .. ' ' .. ARGV[4] .. '\n' ..
    string.sub(v, #tok + #rest + 7) .. outcome, 'PX', ARGV[4])
  return 1
end
if string.sub(v.err or '', 1, 9) ~= 'WRONGTYPE' then
  error(v)
end

local r = redis.call('HMGET', key, 'state', 'token', 'history', 'req')
if r[4] == req then
  -- A re-send of this very call (its reply was lost). Write again so that a
  -- WAIT on this connection covers the record.
  redis.call('HSET', key, 'req', req)
  return 1
end
if r[1] ~= 'in_progress' or r[2] ~= token then
  return 0
end
local now = now_text()
local history = close_open_tail(r[3], '"result":"done","ended_ms":' .. now)
if not history then
  local h = decode_history(r[3])
  local n = #h
  if n > 0 then
    h[n].result = 'done'
    h[n].ended_ms = tonumber(now)
  end
  history = encode_history(h)
end
-- until_ms is emptied in the same HSET: a field less to delete.
redis.call('HSET', key, 'state', 'done', 'outcome', outcome, 'history', history, 'req', req, 'until_ms', '')
redis.call('PEXPIRE', key, ARGV[4])
return 1
