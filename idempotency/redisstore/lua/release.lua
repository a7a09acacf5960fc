-- Release: KEYS[1] = record key.
-- ARGV: token, request_id, retention_ms, canceled (0|1), final (0|1),
--       error, error_type, reason, stack (already truncated by the client),
--       retry_after_ms (0 for none; absent from earlier releases' clients)
-- Returns 1 when released, 0 when the lease is lost.
local key = KEYS[1]
local token, req, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local canceled_flag, final_flag = ARGV[4] == '1', ARGV[5] == '1'
-- A fast record in progress becomes a hash; a fast DONE record has no
-- lease left to release or extend.
if open_record(key) == 'done' then
  return 0
end
local r = redis.call('HMGET', key, 'state', 'token', 'history', 'req', 'canceled')
if r[4] == req then
  redis.call('HSET', key, 'req', req)
  return 1
end
if r[1] ~= 'in_progress' or r[2] ~= token then
  return 0
end
local now = now_ms()
local state, result = 'failed', 'failed'
local canceled = tonumber(r[5]) or 0
if canceled_flag then
  -- Interrupted by shutdown: not charged to the budget, Final ignored.
  canceled = canceled + 1
  result = 'canceled'
elseif final_flag then
  state = 'exhausted'
end
local history = decode_history(r[3])
local n = #history
if n > 0 then
  local h = history[n]
  h.result = result
  h.ended_ms = now
  h.error, h.type, h.reason, h.stack = nil, nil, nil, nil
  if ARGV[6] ~= '' then h.error = ARGV[6] end
  if ARGV[7] ~= '' then h.type = ARGV[7] end
  if ARGV[8] ~= '' then h.reason = ARGV[8] end
  if ARGV[9] ~= '' then h.stack = ARGV[9] end
end
redis.call('HSET', key, 'state', state, 'canceled', int(canceled), 'history', encode_history(history), 'req', req)
-- A failure that asked for a delay keeps the record from claims until
-- nb_ms (server clock), and keeps it a retention after that.
local delay = tonumber(ARGV[10]) or 0
if state == 'failed' and not canceled_flag and delay > 0 then
  redis.call('HSET', key, 'nb_ms', int(now + delay))
  redis.call('HDEL', key, 'until_ms')
  redis.call('PEXPIRE', key, int(retention + delay))
  return 1
end
redis.call('HDEL', key, 'until_ms', 'nb_ms')
redis.call('PEXPIRE', key, int(retention))
return 1
