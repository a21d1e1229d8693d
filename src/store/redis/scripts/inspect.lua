-- fg_inspect_v3: the state of one lock, read-only.
--
-- KEYS[1] ctr     hash    issued, floor, shadow (token strings)
-- KEYS[2] lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs
-- KEYS[3] waitq   zset    waiterId -> queue position
-- KEYS[4] waitdl  hash    waiterId -> deadline (ms)
-- KEYS[5] fence   string  highest admitted token
-- ARGV[1] globalFloor     floor of the global epoch: a lease whose token is at or below it
--                         was superseded by an epoch bump and is not held
--
-- Returns: nil when no token was ever issued for the key, else (strings, '' = none)
--   {issued, held '0'|'1', owner, leaseId, leaseToken, expiresAt, liveWaiters, highest,
--    shadowHighest}
local ctrKey, leaseKey, qKey, dlKey, fenceKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local ctr = redis.call('HMGET', ctrKey, 'issued', 'shadow')
local issued, shadow = ctr[1], ctr[2] or ''
if not issued then return false end

local now = fg_now()
local lease = redis.call('HMGET', leaseKey, 'leaseId', 'owner', 'token', 'expiresAt')
local exp = tonumber(lease[4])
local waiters = fg_live_waiters(qKey, dlKey, now, false)
local highest = redis.call('GET', fenceKey) or ''

if lease[1] and exp and exp > now and lease[3] and fg_cmp(lease[3], ARGV[1]) > 0 then
  return { issued, '1', lease[2], lease[1], lease[3], lease[4], fg_int(#waiters), highest, shadow }
end
return { issued, '0', '', '', '', '', fg_int(#waiters), highest, shadow }
