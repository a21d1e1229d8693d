-- fg_inflight_forget_v1: after a promoted replica answered (fg_epoch_verify_v1 'bumped'),
-- forgets a lock's in-flight entries at or below the new epoch floor: they are the
-- replica's copy, which replication may have left behind (an entry whose write finished
-- on the old primary after the replica's last sync would never be finished again, and its
-- gateway session goes on: it would hold the drain barrier for the life of that session).
-- Every token admitted after the bump is above the floor, so entries of writes admitted
-- since are kept. The gateways' reset hold (the lock-delay) stands in for the barrier of
-- writes delivered before the failover (docs/adr/0019-store-identity.md).
--
-- KEYS[1] inf       hash    requestId -> '<token> <session> <bound ms>'
-- ARGV[1] channel           the lock's pub/sub channel (not a key)
-- ARGV[2] floor             the epoch floor (token string)
--
-- Returns: the number of entries removed (string)
local infKey, channel, floor = KEYS[1], ARGV[1], ARGV[2]

if not fg_is_token(floor) then return redis.error_reply('fg_inflight_forget_v1: malformed floor') end
local removed = 0
for _, e in ipairs(fg_inflight(infKey)) do
  if fg_cmp(e[2], floor) <= 0 then
    redis.call('HDEL', infKey, e[1])
    removed = removed + 1
  end
end
if removed > 0 then redis.call('PUBLISH', channel, 'drop') end
return fg_int(removed)
