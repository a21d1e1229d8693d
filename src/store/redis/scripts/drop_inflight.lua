-- fg_drop_inflight_v1: removes a lock's in-flight entries owned by gateway sessions that
-- have ended (an ended session never comes back, so its entries can never finish), and
-- notifies watchers when any was removed.
--
-- KEYS[1] inf       hash    requestId -> '<token> <session>'
-- ARGV[1] channel           the lock's pub/sub channel (not a key)
-- ARGV[2…] session ids
--
-- Returns: the number of entries removed (string)
local infKey, channel = KEYS[1], ARGV[1]

local ended = {}
for i = 2, #ARGV do ended[ARGV[i]] = true end
local removed = 0
for _, e in ipairs(fg_inflight(infKey)) do
  if ended[e[3]] then
    redis.call('HDEL', infKey, e[1])
    removed = removed + 1
  end
end
if removed > 0 then redis.call('PUBLISH', channel, 'drop') end
return fg_int(removed)
