-- fg_session_end_v1: ends a gateway session if its beat is still ARGV[2] (an observer
-- that saw it unchanged for the session's TTL), or unconditionally when ARGV[2] is ''
-- (the owner's clean shutdown). Compare-and-delete in one step: a beat that lands
-- after this finds nothing, so the owner learns it was ended.
--
-- KEYS[1] sessions  hash    sessionId -> '<beat> <ttlMs>'
-- ARGV[1] session id
-- ARGV[2] expected beat, or ''
--
-- Returns: '1' when this call ended the session, '0' otherwise
local key, id, expected = KEYS[1], ARGV[1], ARGV[2]
local v = redis.call('HGET', key, id)
if not v then return '0' end
if expected ~= '' then
  local beat = string.match(v, '^(%d+) ')
  if beat ~= expected then return '0' end
end
redis.call('HDEL', key, id)
return '1'
