-- fg_session_open_v1: registers a gateway session with beat 0 (docs/adr/0005).
--
-- KEYS[1] sessions  hash    sessionId -> '<beat> <ttlMs>'
-- ARGV[1] session id
-- ARGV[2] ttlMs             how long observers let the beat stay unchanged
--
-- Returns: 'ok'
local key = KEYS[1]
local id, ttl = ARGV[1], ARGV[2]
if not string.match(ttl, '^[1-9][0-9]*$') then return redis.error_reply('fg_session_open_v1: bad ttl') end
redis.call('HSET', key, id, '0 ' .. ttl)
return 'ok'
