-- fg_session_beat_v1: a gateway session's heartbeat: increments its beat if the session
-- still exists. A session that an observer ended stays ended (the beat finds nothing).
--
-- KEYS[1] sessions  hash    sessionId -> '<beat> <ttlMs>'
-- ARGV[1] session id
--
-- Returns (strings): {'1' | '0' (alive), store clock ms}
local key, id = KEYS[1], ARGV[1]
local now = fg_int(fg_now())
local v = redis.call('HGET', key, id)
if not v then return { '0', now } end
local beat, ttl = string.match(v, '^(%d+) (%d+)$')
if not beat then return { '0', now } end
redis.call('HSET', key, id, fg_int(tonumber(beat) + 1) .. ' ' .. ttl)
return { '1', now }
