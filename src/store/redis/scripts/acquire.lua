-- fg_acquire_v1: grants the lock when it is free and this attempt may take it (FIFO
-- queue), or replays the grant an earlier attempt with the same (requestId, owner) got.
--
-- KEYS[1] ctr     hash    issued (token string), floor (key floor, token string)
-- KEYS[2] lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs
-- KEYS[3] waitq   zset    waiterId -> queue position (FIFO order)
-- KEYS[4] waitdl  hash    waiterId -> deadline (ms)
-- KEYS[5] req     hash    idempotency record of (requestId, owner); used only when ARGV[6] ~= ''
-- ARGV[1] globalFloor     floor of the global epoch (token string)
-- ARGV[2] leaseId         id for a new lease (random, made by the caller)
-- ARGV[3] owner
-- ARGV[4] ttlMs
-- ARGV[5] waiterId        '' when the attempt does not come from a queued waiter
-- ARGV[6] reqTtlMs        '' without requestId; else how long the idempotency record lives
--
-- Returns (every element a string):
--   {'ok', leaseId, owner, token, expiresAt, ttlMs, replayed '0'|'1', tookOverExpired '0'|'1'}
--   {'held', retryAfterMs}    retryAfterMs >= 1
--   {'exhausted'}             the next token would exceed 2^63-1; nothing changed
local ctrKey, leaseKey, qKey, dlKey, reqKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local globalFloor, leaseId, owner = ARGV[1], ARGV[2], ARGV[3]
local ttlMs, waiterId, reqTtlMs = ARGV[4], ARGV[5], ARGV[6]

local now = fg_now()

-- 1. Idempotent replay: the lease first granted for this (requestId, owner).
if reqTtlMs ~= '' then
  local r = redis.call('HMGET', reqKey, 'leaseId', 'owner', 'token', 'expiresAt', 'ttlMs', 'tookOver')
  if r[1] then
    local expiresAt, ttl = r[4], r[5]
    local cur = redis.call('HMGET', leaseKey, 'leaseId', 'expiresAt', 'ttlMs')
    if cur[1] == r[1] then expiresAt, ttl = cur[2], cur[3] end -- renewed since
    return { 'ok', r[1], r[2], r[3], expiresAt, ttl, '1', r[6] }
  end
end

-- 2. May this attempt take the lock? Free lease, and no live waiter ahead of it.
local waiters = fg_live_waiters(qKey, dlKey, now, true)
local aheadMin = nil
local isHead = false
for i, w in ipairs(waiters) do
  if waiterId ~= '' and w[1] == waiterId then
    isHead = (i == 1)
    break
  end
  if aheadMin == nil or w[2] < aheadMin then aheadMin = w[2] end
end

local lease = redis.call('HMGET', leaseKey, 'leaseId', 'expiresAt')
local leaseExp = tonumber(lease[2])
local live = lease[1] and leaseExp and leaseExp > now

if live or (#waiters > 0 and not isHead) then
  local wake = nil
  if live then wake = leaseExp end
  if aheadMin and (wake == nil or aheadMin < wake) then wake = aheadMin end
  local retry = wake - now
  if retry < 1 then retry = 1 end
  return { 'held', fg_int(retry) }
end

-- 3. Grant: mint token = max(issued or key floor, global floor) + 1.
local ctr = redis.call('HMGET', ctrKey, 'issued', 'floor')
local keyFloor = ctr[2]
local base = ctr[1]
if not base then
  -- No state for this key (new, or the store lost it): start above the clock floor.
  keyFloor = fg_floor_of(now)
  base = keyFloor
end
if not keyFloor then keyFloor = '0' end
local token = fg_incr(fg_max(base, globalFloor))
if not token then return { 'exhausted' } end

local tookOver = '0'
if lease[1] then tookOver = '1' end -- a lapsed lease that was never released
local expiresAt = fg_int(now + tonumber(ttlMs))

redis.call('HSET', ctrKey, 'issued', token, 'floor', keyFloor)
redis.call('HSET', leaseKey, 'leaseId', leaseId, 'owner', owner, 'token', token,
  'expiresAt', expiresAt, 'ttlMs', ttlMs)
if waiterId ~= '' then
  redis.call('ZREM', qKey, waiterId)
  redis.call('HDEL', dlKey, waiterId)
end
if reqTtlMs ~= '' then
  redis.call('HSET', reqKey, 'leaseId', leaseId, 'owner', owner, 'token', token,
    'expiresAt', expiresAt, 'ttlMs', ttlMs, 'tookOver', tookOver)
  redis.call('PEXPIRE', reqKey, reqTtlMs)
end
return { 'ok', leaseId, owner, token, expiresAt, ttlMs, '0', tookOver }
