-- fg_release_v1: deletes the key's lease if it is this lease (live, or lapsed but not yet
-- replaced), and notifies watchers. Anything else changes nothing.
--
-- KEYS[1] lease   hash    leaseId, owner, token, expiresAt (ms), ttlMs
-- ARGV[1] leaseId         the lease to release
-- ARGV[2] channel         the lock's pub/sub channel (not a key)
--
-- Returns: 'ok' | 'not-owner'
local leaseKey = KEYS[1]
local leaseId, channel = ARGV[1], ARGV[2]

if redis.call('HGET', leaseKey, 'leaseId') ~= leaseId then
  return 'not-owner'
end
redis.call('DEL', leaseKey)
redis.call('PUBLISH', channel, 'release')
return 'ok'
