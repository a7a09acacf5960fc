-- Extend: KEYS[1] = record key.
-- ARGV: token, lease_ms, retention_ms
-- Returns the new lease expiry (ms), or 0 when the lease is lost.
local key = KEYS[1]
local token, lease, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
-- A fast record in progress becomes a hash; a fast DONE record has no
-- lease left to release or extend.
if open_record(key) == 'done' then
  return 0
end
local r = redis.call('HMGET', key, 'state', 'token')
if r[1] ~= 'in_progress' or r[2] ~= token then
  return 0
end
local until_ms = now_ms() + lease
redis.call('HSET', key, 'until_ms', int(until_ms))
redis.call('PEXPIRE', key, int(lease + retention))
return until_ms
