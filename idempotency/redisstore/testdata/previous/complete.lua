-- Complete: KEYS[1] = record key.
-- ARGV: token, request_id, outcome_json, retention_ms
-- Returns 1 when the record is DONE with this outcome, 0 when the lease is lost.
local key = KEYS[1]
local token, req, outcome, retention = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
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
local now = now_ms()
local history = decode_history(r[3])
local n = #history
if n > 0 then
  history[n].result = 'done'
  history[n].ended_ms = now
end
redis.call('HSET', key, 'state', 'done', 'outcome', outcome, 'history', encode_history(history), 'req', req)
redis.call('HDEL', key, 'until_ms')
redis.call('PEXPIRE', key, int(retention))
return 1
