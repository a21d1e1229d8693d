-- fg_admit_v2: the gateway's fence check and compare-and-set, in one atomic step.
-- Checks in order: nothing ever issued for the lock -> forged; at or below the epoch floor
-- (max of the key's floor and the global floor) -> stale; above the highest issued ->
-- forged; below the highest admitted -> stale; check 'lease' and not the live lease's
-- token -> lease-expired.
-- When admitted and ARGV[6] == '1': highest := max(highest, token) and this write's
-- in-flight entry is added, owned by the gateway session ARGV[5]. An entry has no
-- deadline: it counts until finished or until its session ends (docs/adr/0005).
-- ARGV[6] == '0' (shadow mode) gives the same verdict and writes nothing.
--
-- KEYS[1] ctr       hash    issued, floor (token strings)
-- KEYS[2] lease     hash    leaseId, owner, token, expiresAt (ms), ttlMs
-- KEYS[3] fence     string  highest admitted token
-- KEYS[4] inf       hash    requestId -> '<token> <session>'
-- ARGV[1] globalFloor       floor of the global epoch (token string)
-- ARGV[2] token             presented token (canonical string)
-- ARGV[3] check             'token' | 'lease'
-- ARGV[4] requestId         id of this in-flight write
-- ARGV[5] session           the gateway session that owns the entry
-- ARGV[6] record            '1' | '0'
--
-- Returns (strings; highest '' = none):
--   {'ok', highest, lowerInflight}
--   {'stale' | 'forged' | 'lease-expired', highest}
local ctrKey, leaseKey, fenceKey, infKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local globalFloor, token, check = ARGV[1], ARGV[2], ARGV[3]
local requestId, session, record = ARGV[4], ARGV[5], ARGV[6] == '1'

if not fg_is_token(token) then return redis.error_reply('fg_admit_v1: malformed token') end

local ctr = redis.call('HMGET', ctrKey, 'issued', 'floor')
local issued = ctr[1]
local highest = redis.call('GET', fenceKey)
local shownHighest = highest or ''

if not issued then return { 'forged', shownHighest } end
local floor = fg_max(ctr[2] or '0', globalFloor)
if fg_cmp(token, floor) <= 0 then return { 'stale', shownHighest } end
if fg_cmp(token, issued) > 0 then return { 'forged', shownHighest } end
if highest and fg_cmp(token, highest) < 0 then return { 'stale', shownHighest } end

if check == 'lease' then
  -- The clock is read only here: a plain token check needs no TIME (one command less per write).
  local now = fg_now()
  local lease = redis.call('HMGET', leaseKey, 'token', 'expiresAt')
  local exp = tonumber(lease[2])
  if not lease[1] or lease[1] ~= token or not exp or exp <= now then
    return { 'lease-expired', shownHighest }
  end
end

local newHighest = token
if highest then newHighest = fg_max(highest, token) end

local lower = 0
for _, e in ipairs(fg_inflight(infKey)) do
  if e[1] ~= requestId and fg_cmp(e[2], token) < 0 then lower = lower + 1 end
end

if record then
  if newHighest ~= highest then redis.call('SET', fenceKey, newHighest) end
  redis.call('HSET', infKey, requestId, token .. ' ' .. session)
end
return { 'ok', newHighest, fg_int(lower) }
