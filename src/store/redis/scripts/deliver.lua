-- fg_deliver_v1: marks an in-flight entry as delivering with the write's delivery bound,
-- right before the gateway sends a write that had to wait (at the drain barrier, or for
-- its body) after its admission recorded bound '0'. Once its session ends, a delivering
-- entry keeps counting for that bound (docs/adr/0018-lock-delay.md).
--
-- KEYS[1] inf       hash    requestId -> '<token> <session> <bound ms>'
-- ARGV[1] requestId
-- ARGV[2] bound             ms, decimal digits
--
-- Returns: '1' when the entry exists (now delivering), '0' when it is gone (finished or
-- dropped with its ended session): the write must not be sent.
local infKey, requestId, bound = KEYS[1], ARGV[1], ARGV[2]

if not string.match(bound, '^%d+$') then return redis.error_reply('fg_deliver_v1: malformed bound') end
local v = redis.call('HGET', infKey, requestId)
if not v then return '0' end
local tok, session = string.match(v, '^(%d+) (%S+)')
if not tok then return redis.error_reply('fg_deliver_v1: malformed entry') end
redis.call('HSET', infKey, requestId, tok .. ' ' .. session .. ' ' .. bound)
return '1'
