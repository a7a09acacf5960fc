-- Claim: KEYS[1] = record key.
-- ARGV: fingerprint, lease_ms, max_attempts, token, retention_ms, max_history, trace_id, span_id,
--       reopen (replay ID or '')
-- Returns one of:
--   {'conflict', stored_fingerprint}
--   {'completed', outcome_json}
--   {'in_progress', until_ms}
--   {'exhausted', attempts, history_json}
--   {'acquired', attempt, until_ms, previous_result, previous_error}
local key = KEYS[1]
local fp = ARGV[1]
local lease = tonumber(ARGV[2])
local max_attempts = tonumber(ARGV[3])
local token = ARGV[4]
local retention = tonumber(ARGV[5])
local max_history = tonumber(ARGV[6])
local trace_id = ARGV[7]
local span_id = ARGV[8]
local reopen = ARGV[9] or ''
local now = now_ms()

local r = redis.call('HMGET', key, 'state', 'fp', 'attempts', 'canceled', 'until_ms', 'outcome', 'history', 'token',
  'reopened_by', 'base')
local state = r[1]
local attempts, canceled = 0, 0
-- A replay run (reopen) gives a FAILED or EXHAUSTED record a fresh budget
-- once: base is attempts - canceled at that moment.
local reopened_by, base = reopen, 0
local history = {}
local prev, prev_err = '', ''

if state then
  -- A different payload under the same key is a conflict whatever the state.
  if r[2] ~= fp then
    return {'conflict', r[2] or ''}
  end
  if state == 'done' then
    return {'completed', r[6] or ''}
  end
  attempts = tonumber(r[3]) or 0
  canceled = tonumber(r[4]) or 0
  reopened_by = r[9] or ''
  base = tonumber(r[10]) or 0
  local reopens = reopen ~= '' and reopen ~= reopened_by
  if state == 'exhausted' and not reopens then
    return {'exhausted', attempts, r[7] or '[]'}
  end
  history = decode_history(r[7])
  local n = #history
  if state == 'in_progress' then
    local until_ms = tonumber(r[5]) or 0
    if r[8] == token then
      -- The client re-sent this very claim (its reply was lost): answer it
      -- again instead of reporting our own lease as another owner's.
      local p = history[n - 1]
      if p then
        if p.result == 'unknown' or p.result == 'canceled' then
          prev = p.result
        else
          prev, prev_err = 'failed', p.error or ''
        end
      end
      return {'acquired', attempts, until_ms, prev, prev_err}
    end
    if now < until_ms then
      return {'in_progress', until_ms}
    end
    -- The owner's lease expired without Complete or Release: it died or hung,
    -- so its effect may or may not have happened.
    if n > 0 and history[n].result == 'in_progress' then
      history[n].result = 'unknown'
      history[n].ended_ms = until_ms
    end
    state = 'failed'
    prev = 'unknown'
  elseif n > 0 then
    -- failed, or exhausted and reopened
    if history[n].result == 'canceled' or history[n].result == 'unknown' then
      prev = history[n].result
    else
      prev, prev_err = 'failed', history[n].error or ''
    end
  end
  if reopens then
    reopened_by, base = reopen, attempts - canceled
  end
  if attempts - canceled - base >= max_attempts then
    local h = encode_history(history)
    redis.call('HSET', key, 'state', 'exhausted', 'history', h)
    redis.call('HDEL', key, 'until_ms')
    redis.call('PEXPIRE', key, int(retention))
    return {'exhausted', attempts, h}
  end
end

attempts = attempts + 1
local until_ms = now + lease
local entry = {attempt = attempts, started_ms = now, result = 'in_progress'}
if trace_id ~= '' then entry.trace_id = trace_id end
if span_id ~= '' then entry.span_id = span_id end
history[#history + 1] = entry
while #history > max_history do
  table.remove(history, 1)
end
redis.call('HSET', key,
  'state', 'in_progress', 'fp', fp, 'token', token,
  'attempts', int(attempts), 'canceled', int(canceled),
  'until_ms', int(until_ms), 'history', encode_history(history),
  'reopened_by', reopened_by, 'base', int(base))
-- Never forgotten while leased; an owner that dies leaves a failure of
-- unknown outcome, forgotten a retention after its lease expires.
redis.call('PEXPIRE', key, int(lease + retention))
return {'acquired', attempts, until_ms, prev, prev_err}
