-- fg_acquire_v4: grants the lock when it is free and this attempt may take it (FIFO
-- queue), or replays the grant an earlier attempt with the same (requestId, owner) got,
-- as long as that grant is still the current, live lease. A lease whose token is at or
-- below the global floor was superseded by an epoch bump: it is neither live nor replayed. A grant publishes on the
-- lock's channel, so the waiters behind re-read the new lease's expiry at once.
--
-- KEYS[1] ctr     hash    issued (token string), floor (key floor, token string),
--                         owners: "<token> <owner>" lines of the key's last ARGV[8]
--                         grants, newest first (only to name owners in events)
-- KEYS[2] lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs; expires
--                         LEASE_KEEP_MS after the lease would lapse (a dead holder's
--                         lease does not stay forever)
-- KEYS[3] waitq   zset    waiterId -> queue position (FIFO order)
-- KEYS[4] waitdl  hash    waiterId -> deadline (ms)
-- KEYS[5] req     string  idempotency record of (requestId, owner): "<leaseId> <token>";
--                         used only when ARGV[6] ~= ''
-- ARGV[1] globalFloor     floor of the global epoch (token string)
-- ARGV[2] leaseId         id for a new lease (random, made by the caller)
-- ARGV[3] owner
-- ARGV[4] ttlMs
-- ARGV[5] waiterId        '' when the attempt does not come from a queued waiter
-- ARGV[6] reqTtlMs        '' without requestId; else how long the idempotency record lives
-- ARGV[7] channel         the lock's pub/sub channel (not a key)
-- ARGV[8] history         how many grants the owners field remembers (a count)
-- ARGV[9] ownerLine       the owner as written in the owners field ('%' and newline escaped)
--
-- Returns (every element a string):
--   {'ok', leaseId, owner, token, expiresAt, ttlMs, replayed '0'|'1', tookOverExpired '0'|'1',
--    lapsedOwner, lapsedToken}   the lapsed lease taken over ('' '' when none)
--   {'held', retryAfterMs, blockedBy 'lease'|'queue'}    retryAfterMs >= 1
--   {'ended', leaseId, token}  the replayed grant's lease is no longer current; nothing changed
--   {'exhausted'}              the next token would exceed 2^63-1; nothing changed
local ctrKey, leaseKey, qKey, dlKey, reqKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local globalFloor, leaseId, owner = ARGV[1], ARGV[2], ARGV[3]
local ttlMs, waiterId, reqTtlMs, channel = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local history, ownerLine = tonumber(ARGV[8]), ARGV[9]
local LEASE_KEEP_MS = 600000

local now = fg_now()

-- A lease whose token an epoch bump put at or below the floor: its holder is fenced out.
local function superseded(token)
  return token and fg_cmp(token, globalFloor) <= 0
end

-- 1. Idempotent replay: the lease first granted for this (requestId, owner), only while
-- it is still the current live lease (reported as renewed since). A lease that ended is
-- never handed out again as if it were live.
if reqTtlMs ~= '' then
  local rec = redis.call('GET', reqKey)
  if rec then
    local recLease, recToken = string.match(rec, '^(%S+) (%S+)$')
    if not recLease then return redis.error_reply('fg_acquire_v4: malformed idempotency record') end
    local cur = redis.call('HMGET', leaseKey, 'leaseId', 'owner', 'token', 'expiresAt', 'ttlMs')
    local curExp = tonumber(cur[4])
    if cur[1] == recLease and curExp and curExp > now and not superseded(cur[3]) then
      return { 'ok', cur[1], cur[2], cur[3], cur[4], cur[5], '1', '0', '', '' }
    end
    return { 'ended', recLease, recToken }
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

local lease = redis.call('HMGET', leaseKey, 'leaseId', 'expiresAt', 'owner', 'token')
local leaseExp = tonumber(lease[2])
local live = lease[1] and leaseExp and leaseExp > now and not superseded(lease[4])

if live or (#waiters > 0 and not isHead) then
  local wake = nil
  if live then wake = leaseExp end
  if aheadMin and (wake == nil or aheadMin < wake) then wake = aheadMin end
  local retry = wake - now
  if retry < 1 then retry = 1 end
  local blockedBy = 'queue'
  if live then blockedBy = 'lease' end
  return { 'held', fg_int(retry), blockedBy }
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

local tookOver, lapsedOwner, lapsedToken = '0', '', ''
if lease[1] then -- a lapsed lease that was never released
  tookOver, lapsedOwner, lapsedToken = '1', lease[3] or '', lease[4] or ''
end
local expiresAt = fg_int(now + tonumber(ttlMs))

-- The owners field: this grant first, then the newest history - 1 lines kept before.
local owners = token .. ' ' .. ownerLine
local before = redis.call('HGET', ctrKey, 'owners')
if before then
  local n = 1
  for line in string.gmatch(before, '[^\n]+') do
    if n >= history then break end
    owners = owners .. '\n' .. line
    n = n + 1
  end
end
redis.call('HSET', ctrKey, 'issued', token, 'floor', keyFloor, 'owners', owners)
redis.call('HSET', leaseKey, 'leaseId', leaseId, 'owner', owner, 'token', token,
  'expiresAt', expiresAt, 'ttlMs', ttlMs)
redis.call('PEXPIRE', leaseKey, fg_int(tonumber(ttlMs) + LEASE_KEEP_MS))
if waiterId ~= '' then
  redis.call('ZREM', qKey, waiterId)
  redis.call('HDEL', dlKey, waiterId)
end
if reqTtlMs ~= '' then
  redis.call('SET', reqKey, leaseId .. ' ' .. token, 'PX', reqTtlMs)
end
-- Waiters behind the winner were told to retry at the lock's free moment or at the
-- winner's queue deadline; tell them the lock is taken, so they re-read its expiry.
redis.call('PUBLISH', channel, 'grant')
return { 'ok', leaseId, owner, token, expiresAt, ttlMs, '0', tookOver, lapsedOwner, lapsedToken }
