-- Get: KEYS[1] = record key (either form, see prelude.lua). Read only.
-- Returns {} when there is no record, else
-- {state, fp, token, attempts, canceled, until_ms, outcome, history, expires_at_ms,
--  reopened_by, base, nb_ms}
local key = KEYS[1]
local r
local v = redis.pcall('GET', key)
if type(v) == 'string' then
  local f = fast_fields(key, v)
  if not f then
    return redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds a string that is not a record')
  end
  r = {f.state, f.fp, f.token, f.attempts, f.canceled, f.until_ms, f.outcome, f.history, f.reopened_by, nil, nil}
else
  r = redis.call('HMGET', key, 'state', 'fp', 'token', 'attempts', 'canceled', 'until_ms', 'outcome', 'history', 'reopened_by', 'base', 'nb_ms')
end
if not r[1] then
  return {}
end
local expires = 0
local pttl = redis.call('PTTL', key)
if pttl >= 0 then
  expires = now_ms() + pttl
end
return {r[1], r[2] or '', r[3] or '', r[4] or '0', r[5] or '0', r[6] or '', r[7] or '', r[8] or '', expires, r[9] or '', r[10] or '0', r[11] or '0'}
