-- Batch: the claims and completes of concurrent callers in one script run
-- (WithBatching on a single node). KEYS[i] is call i's record key. ARGV
-- holds the calls one after the other, each as its name ('claim' or
-- 'complete'), its number of arguments n, then its n arguments exactly as
-- the call's own script takes them.
-- Returns an array with call i's reply at i: what its own script returns,
-- or, when that call raised an error (the others still ran),
-- {'surely-batch-error', message}. Not an error reply inside the array:
-- clients stop reading an array at some error replies (OOM, READONLY, ...)
-- and would fail every call of the batch.
--
-- A run of a script is atomic, and Redis reads its clock once for it (keys
-- expire as of the script's start): the calls share one TIME reading too.
local read_clock, clock = now_text, nil
now_text = function()
  if not clock then
    clock = read_clock()
  end
  return clock
end

local calls = { claim = claim, complete = complete }
local out = {}
local a = 1
for i = 1, #KEYS do
  local name, n = ARGV[a], tonumber(ARGV[a + 1])
  local fn, args = calls[name], { unpack(ARGV, a + 2, a + 1 + n) }
  a = a + 2 + n
  if not fn then
    out[i] = { 'surely-batch-error', 'ERR surely batch: unknown call ' .. tostring(name) }
  else
    local ok, r = pcall(fn, { KEYS[i] }, args)
    if ok then
      out[i] = r
    elseif type(r) == 'table' and r.err then
      out[i] = { 'surely-batch-error', r.err }
    else
      out[i] = { 'surely-batch-error', tostring(r) }
    end
  end
end
return out
