-- fg_remove_waiter_v1: removes a waiter (gave up or timed out) and notifies watchers, so
-- the waiter behind it can try.
--
-- KEYS[1] waitq   zset    waiterId -> queue position
-- KEYS[2] waitdl  hash    waiterId -> deadline (ms)
-- ARGV[1] waiterId
-- ARGV[2] channel         the lock's pub/sub channel (not a key)
--
-- Returns: '1' when the waiter was queued, '0' otherwise (watchers are notified either way)
local qKey, dlKey = KEYS[1], KEYS[2]
local waiterId, channel = ARGV[1], ARGV[2]

local removed = redis.call('ZREM', qKey, waiterId)
redis.call('HDEL', dlKey, waiterId)
redis.call('PUBLISH', channel, 'waiter')
if removed == 1 then return '1' end
return '0'
