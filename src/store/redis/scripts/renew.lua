-- fg_renew_v2: extends the current live lease. A lease that expired (by the store clock)
-- or was replaced is never resurrected, nor one whose token an epoch bump put at or below
-- the global floor (its holder is fenced out: it must acquire again).
--
-- KEYS[1] lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs; its key expiry
--                         moves with the lease (see acquire.lua, LEASE_KEEP_MS)
-- ARGV[1] leaseId         the lease to renew
-- ARGV[2] ttlMs           new time to live, from now
-- ARGV[3] globalFloor     floor of the global epoch (token string)
--
-- Returns (strings):
--   {'ok', owner, token, expiresAt, ttlMs}
--   {'lost'}   no lease, another lease, this lease already expired, or superseded
local leaseKey = KEYS[1]
local leaseId, ttlMs, globalFloor = ARGV[1], ARGV[2], ARGV[3]
local LEASE_KEEP_MS = 600000

local now = fg_now()
local cur = redis.call('HMGET', leaseKey, 'leaseId', 'owner', 'token', 'expiresAt')
local exp = tonumber(cur[4])
if cur[1] ~= leaseId or not exp or exp <= now or not cur[3] or fg_cmp(cur[3], globalFloor) <= 0 then
  return { 'lost' }
end

local expiresAt = fg_int(now + tonumber(ttlMs))
redis.call('HSET', leaseKey, 'expiresAt', expiresAt, 'ttlMs', ttlMs)
redis.call('PEXPIRE', leaseKey, fg_int(tonumber(ttlMs) + LEASE_KEEP_MS))
return { 'ok', cur[2], cur[3], expiresAt, ttlMs }
