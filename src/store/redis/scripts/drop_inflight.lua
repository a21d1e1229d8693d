-- fg_drop_inflight_v2: removes a lock's in-flight entries owned by gateway sessions that
-- have ended (an ended session never comes back, so its entries can never finish) and
-- whose delivery bound is at most ARGV[2] (a delivering entry counts on for its bound
-- after its session ended: the caller drops it once it watched the session gone that
-- long), and notifies watchers when any was removed.
--
-- KEYS[1] inf       hash    requestId -> '<token> <session> <bound ms>'
-- ARGV[1] channel           the lock's pub/sub channel (not a key)
-- ARGV[2] max bound         ms, decimal digits
-- ARGV[3…] session ids
--
-- Returns: the number of entries removed (string)
local infKey, channel, maxBound = KEYS[1], ARGV[1], tonumber(ARGV[2])

if not maxBound then return redis.error_reply('fg_drop_inflight_v2: malformed bound') end
local ended = {}
for i = 3, #ARGV do ended[ARGV[i]] = true end
local removed = 0
for _, e in ipairs(fg_inflight(infKey)) do
  -- Bounds are whole milliseconds far below 2^53: exact as Lua numbers.
  if ended[e[3]] and tonumber(e[4]) <= maxBound then
    redis.call('HDEL', infKey, e[1])
    removed = removed + 1
  end
end
if removed > 0 then redis.call('PUBLISH', channel, 'drop') end
return fg_int(removed)
