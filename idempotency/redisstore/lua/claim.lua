-- Claim: KEYS[1] = record key.
-- ARGV: fingerprint, lease_ms, max_attempts, token, retention_ms,
--       lease_ms + retention_ms, max_history (at least 1),
--       ids (the trace and span IDs and the owner of the new attempt as
--       JSON members, ',"trace_id":"…"', ',"span_id":"…"' and
--       ',"owner":"…"', each only when set),
--       reopen (replay ID or ''), the fast record of a new key (see
--       prelude.lua; '' under WithHashRecords: a new key is a hash)
-- Returns one of:
--   until_ms                  acquired, first attempt of a new key
--   outcome_json              completed (a duplicate)
--   {'conflict', stored_fingerprint}
--   {'in_progress', until_ms, wait_ms}   (a live lease, or a failed
--                             record's retry-after time nb_ms not passed)
--   {'exhausted', attempts, history_json}
--   {'acquired', attempt, until_ms, previous_result, previous_error}
-- The two common answers are bare values, which Redis returns at a fraction
-- of the cost of a table.
local key = KEYS[1]
local fp, token, reopen = ARGV[1], ARGV[4], ARGV[9]

-- The history older (a JSON array) with the new attempt appended, in
-- progress: the array ends with OPEN_TAIL.
local function with_attempt(older, attempt, now)
  local entry = '{"attempt":' .. attempt .. ',"started_ms":' .. now .. ARGV[8] .. ',' .. OPEN_TAIL
  if older == '[]' then
    return '[' .. entry
  end
  return string.sub(older, 1, -2) .. ',' .. entry
end

-- Most claims are of a new key: the fast record the client built is
-- written as it is, exactly as the client's own SET NX would (see
-- Store.Claim); GET returns what the key held instead, when it held
-- something. Under WithHashRecords (fast record '') a new key is a hash.
local held
if ARGV[10] ~= '' then
  held = redis.pcall('SET', key, ARGV[10], 'NX', 'PX', ARGV[6], 'GET')
  if not held then
    return redis.call('PEXPIRETIME', key) - tonumber(ARGV[5])
  end
  if type(held) == 'table' and string.sub(held.err or '', 1, 9) ~= 'WRONGTYPE' then
    -- A refused write (OOM, ...): a record is still answered from.
    local t = redis.call('TYPE', key)['ok']
    if t == 'none' then
      error(held)
    elseif t == 'string' then
      held = redis.call('GET', key)
    end
  end
else
  held = redis.pcall('GET', key)
  if not held then
    local now = now_text()
    local until_ms = tonumber(now) + tonumber(ARGV[2])
    -- reopened_by is written only by a replay of a record already
    -- forgotten; base stays absent (read as 0).
    redis.call('HSET', key,
      'state', 'in_progress', 'fp', fp, 'token', token, 'attempts', '1', 'canceled', '0',
      'until_ms', int(until_ms), 'history', with_attempt('[]', '1', now))
    if reopen ~= '' then
      redis.call('HSET', key, 'reopened_by', reopen)
    end
    -- Never forgotten while leased; an owner that dies leaves a failure of
    -- unknown outcome, forgotten a retention after its lease expires.
    redis.call('PEXPIRE', key, ARGV[6])
    return until_ms
  end
end
local state
if type(held) == 'table' then
  -- The key holds no string: a hash is a record (HGET raises WRONGTYPE
  -- on anything else).
  state = redis.call('HGET', key, 'state')
  if not state then
    error(redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds no record'))
  end
else
  local f = fast_fields(key, held)
  if not f then
    error(redis.error_reply('WRONGTYPE surely: ' .. key .. ' holds a string that is not a record'))
  end
  if f.state == 'done' then
    if f.fp ~= fp then
      return {'conflict', f.fp}
    end
    return f.outcome
  end
  -- The answers that change nothing are read from the fast record.
  if f.fp ~= fp then
    return {'conflict', f.fp}
  end
  local until_ms = tonumber(f.until_ms)
  if f.token == token then
    return {'acquired', 1, until_ms, '', ''}
  end
  local now = tonumber(now_text())
  if now < until_ms then
    return {'in_progress', until_ms, until_ms - now}
  end
  -- A takeover: the rare paths read and write the hash form.
  open_record(key)
  state = 'in_progress'
end
if state == 'done' then
  local r = redis.call('HMGET', key, 'fp', 'outcome')
  -- A different payload under the same key is a conflict whatever the state.
  if r[1] ~= fp then
    return {'conflict', r[1] or ''}
  end
  return r[2] or ''
end

local r = redis.call('HMGET', key, 'fp', 'attempts', 'canceled', 'until_ms', 'history', 'token', 'reopened_by', 'base', 'nb_ms')
if r[1] ~= fp then
  return {'conflict', r[1] or ''}
end
local attempts = tonumber(r[2]) or 0
local canceled = tonumber(r[3]) or 0
-- A replay run (reopen) gives a FAILED or EXHAUSTED record a fresh budget
-- once: base is attempts - canceled at that moment.
local reopened_by = r[7] or ''
local base = tonumber(r[8]) or 0
local reopens = reopen ~= '' and reopen ~= reopened_by
if state == 'exhausted' and not reopens then
  return {'exhausted', attempts, r[5] or '[]'}
end
local now = now_text()
-- The last attempt asked for a delay (retry-after): not charged. A record
-- of an earlier release has no nb_ms.
local nb = tonumber(r[9])
if state == 'failed' and nb and tonumber(now) < nb then
  return {'in_progress', nb, nb - tonumber(now)}
end
local history = decode_history(r[5])
local n = #history
local prev, prev_err = '', ''
if state == 'in_progress' then
  local until_ms = tonumber(r[4]) or 0
  if r[6] == token then
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
  if tonumber(now) < until_ms then
    return {'in_progress', until_ms, until_ms - tonumber(now)}
  end
  -- The owner's lease expired without Complete or Release: it died or hung,
  -- so its effect may or may not have happened.
  if n > 0 and history[n].result == 'in_progress' then
    history[n].result = 'unknown'
    history[n].ended_ms = until_ms
  end
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
if attempts - canceled - base >= tonumber(ARGV[3]) then
  local h = encode_history(history)
  redis.call('HSET', key, 'state', 'exhausted', 'history', h)
  redis.call('HDEL', key, 'until_ms', 'nb_ms')
  redis.call('PEXPIRE', key, ARGV[5])
  return {'exhausted', attempts, h}
end
-- Keep the newest max_history attempts, this one included.
local keep = math.max(tonumber(ARGV[7]) - 1, 0)
while #history > keep do
  table.remove(history, 1)
end
attempts = attempts + 1
local until_ms = tonumber(now) + tonumber(ARGV[2])
redis.call('HSET', key,
  'state', 'in_progress', 'fp', fp, 'token', token,
  'attempts', int(attempts), 'canceled', int(canceled),
  'until_ms', int(until_ms), 'history', with_attempt(encode_history(history), int(attempts), now),
  'reopened_by', reopened_by, 'base', int(base))
if r[9] then
  redis.call('HDEL', key, 'nb_ms')
end
redis.call('PEXPIRE', key, ARGV[6])
return {'acquired', attempts, until_ms, prev, prev_err}
