-- fg_finish_v2: removes an in-flight entry (the upstream answered, or the request was
-- aborted) and notifies watchers waiting on the drain barrier.
--
-- KEYS[1] inf       hash    requestId -> '<token> <session>'
-- ARGV[1] requestId
-- ARGV[2] channel           the lock's pub/sub channel (not a key)
--
-- Returns: '1' when the entry existed, '0' otherwise (watchers are notified either way)
local infKey = KEYS[1]
local requestId, channel = ARGV[1], ARGV[2]

local removed = redis.call('HDEL', infKey, requestId)
redis.call('PUBLISH', channel, 'finish')
if removed == 1 then return '1' end
return '0'
