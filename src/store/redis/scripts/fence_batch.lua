-- fg_fence_batch_v2: the gateway's admissions and finishes of one turn of its event loop,
-- applied in call order in one atomic step. Each operation gives the answer it would give
-- run alone at that point: a batch is a pipeline of single calls that Redis runs as one
-- command, so it costs one command, one reply and one AOF write instead of one per call.
--
-- KEYS, four per lock named in the batch (each lock once):
--   ctr     hash    issued, floor, shadow (token strings; shadow: the shadow record)
--   lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs
--   fence   string  highest admitted token
--   inf     hash    requestId -> '<token> <session> <bound ms>'
-- ARGV[1]  globalFloor   floor of the global epoch (token string) for every admission
-- ARGV[2]  n             number of locks; ARGV[3 .. 2+n]: each lock's pub/sub channel
-- then the operations, in call order; `lock` is the lock's position (1-based) above:
--   'a', lock, token, check, requestId, session, record, bound   an admission; record is
--        '1' (fence + entry), 's' (shadow record only) or '0' (verdict only); bound is the
--        write's delivery bound in ms, recorded on the entry only when lowerInflight is 0
--   'f', lock, requestId                                          a finish
--
-- Returns, flattened in operation order:
--   admission: 'ok', highest, lowerInflight | 'stale' | 'forged' | 'lease-expired', highest, ''
--              | 'malformed', '', '' (a token that is not canonical; nothing changed)
--              | 'error', message, '' (a command failed, e.g. a key of the wrong type)
--   finish:    '1' when the entry existed, else '0' | 'error: ' .. message
-- Every lock that had a finish gets one PUBLISH 'finish' on its channel, after all
-- operations (subscribers only receive it once the script has ended in any case).

-- The fence check and compare-and-set. Checks in order: nothing ever issued for the lock
-- -> forged; at or below the epoch floor (max of the key's floor and the global floor)
-- -> stale; above the highest issued -> forged; below the highest admitted -> stale;
-- check 'lease' and not the live lease's token -> lease-expired.
-- Every admission is judged against the higher of the enforced fence and the shadow
-- record: both name tokens whose writes reached the upstream (a route switched from
-- shadow mode to enforcement starts from what the shadow period admitted; a shadow route
-- sees a write of an enforced route on the same lock).
-- When admitted and record == '1': highest := max(that, token) and the write's in-flight
-- entry is added, owned by the gateway session, with its delivery bound when nothing lower
-- is in flight (it leaves at once), else '0' (it waits; deliver.lua marks it before it is
-- sent). An entry has no deadline: it counts until finished or until its session ends,
-- and a delivering one for its bound after that (docs/adr/0005, 0018).
-- record == 's' (shadow mode): the same checks; an admission raises the shadow record
-- alone, nothing else is written. record == '0': the verdict only.
local function admit(ctrKey, leaseKey, fenceKey, infKey, globalFloor, token, check, requestId, session, record, bound)
  if not fg_is_token(token) then return 'malformed', '', '' end

  local ctr = redis.call('HMGET', ctrKey, 'issued', 'floor', 'shadow')
  local issued = ctr[1]
  local highest = redis.call('GET', fenceKey)
  if ctr[3] and (not highest or fg_cmp(ctr[3], highest) > 0) then highest = ctr[3] end
  local shownHighest = highest or ''

  if not issued then return 'forged', shownHighest, '' end
  local floor = fg_max(ctr[2] or '0', globalFloor)
  if fg_cmp(token, floor) <= 0 then return 'stale', shownHighest, '' end
  if fg_cmp(token, issued) > 0 then return 'forged', shownHighest, '' end
  if highest and fg_cmp(token, highest) < 0 then return 'stale', shownHighest, '' end

  if check == 'lease' then
    -- The clock is read only here: a plain token check needs no TIME.
    local now = fg_now()
    local lease = redis.call('HMGET', leaseKey, 'token', 'expiresAt')
    local exp = tonumber(lease[2])
    if not lease[1] or lease[1] ~= token or not exp or exp <= now then
      return 'lease-expired', shownHighest, ''
    end
  end

  local newHighest = token
  if highest then newHighest = fg_max(highest, token) end

  if record == 's' then
    if newHighest ~= highest then redis.call('HSET', ctrKey, 'shadow', newHighest) end
    return 'ok', newHighest, '0'
  end

  local lower = 0
  for _, e in ipairs(fg_inflight(infKey)) do
    if e[1] ~= requestId and fg_cmp(e[2], token) < 0 then lower = lower + 1 end
  end

  if record == '1' then
    if newHighest ~= highest then redis.call('SET', fenceKey, newHighest) end
    if lower > 0 then bound = '0' end
    redis.call('HSET', infKey, requestId, token .. ' ' .. session .. ' ' .. bound)
  end
  return 'ok', newHighest, fg_int(lower)
end

-- The text of an error caught by pcall (Redis 7 raises command errors as {err = text}).
local function errtext(e)
  if type(e) == 'table' then return tostring(e.err) end
  return tostring(e)
end

local globalFloor = ARGV[1]
local locks = tonumber(ARGV[2])
if not locks or #KEYS ~= locks * 4 then
  return redis.error_reply('fg_fence_batch_v2: KEYS do not match the lock count')
end
-- The shape is checked before anything is written: a script's writes are not rolled back.
local j = 3 + locks
while j <= #ARGV do
  local op, lock = ARGV[j], tonumber(ARGV[j + 1])
  if not lock or lock < 1 or lock > locks then
    return redis.error_reply('fg_fence_batch_v2: bad lock position at argument ' .. j)
  end
  if op == 'a' then
    if not string.match(ARGV[j + 7] or '', '^%d+$') then
      return redis.error_reply('fg_fence_batch_v2: malformed bound at argument ' .. (j + 7))
    end
    j = j + 8
  elseif op == 'f' then j = j + 3
  else return redis.error_reply('fg_fence_batch_v2: unknown operation at argument ' .. j) end
end
if j ~= #ARGV + 1 then return redis.error_reply('fg_fence_batch_v2: truncated operation') end

local out = {}
local finished = {}
local i = 3 + locks
while i <= #ARGV do
  local op, lock = ARGV[i], tonumber(ARGV[i + 1])
  local base = (lock - 1) * 4
  if op == 'a' then
    -- pcall: an operation that fails (a key of the wrong type) fails alone, as its own
    -- call would have; the rest of the batch still runs.
    local ok, status, highest, lower = pcall(admit,
      KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4],
      globalFloor, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7])
    if ok then
      out[#out + 1] = status
      out[#out + 1] = highest
      out[#out + 1] = lower
    else
      out[#out + 1] = 'error'
      out[#out + 1] = errtext(status)
      out[#out + 1] = ''
    end
    i = i + 8
  else -- 'f'
    local ok, removed = pcall(redis.call, 'HDEL', KEYS[base + 4], ARGV[i + 2])
    if ok then out[#out + 1] = fg_int(removed) else out[#out + 1] = 'error: ' .. errtext(removed) end
    finished[lock] = true
    i = i + 3
  end
end
for lock in pairs(finished) do
  redis.call('PUBLISH', ARGV[2 + lock], 'finish')
end
return out
