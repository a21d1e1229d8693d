-- fg_idem_abandon_v1: removes the record if the attempt holds it in flight
-- (Store.abandonIdempotent); anything else is left as it is.
--
-- KEYS[1] record    hash    fp, at, r (see idem_begin.lua)
-- ARGV[1] attempt
--
-- Returns: '1' when removed, '0' otherwise
local key, attempt = KEYS[1], ARGV[1]
if attempt == '' or redis.call('HGET', key, 'at') ~= attempt then return '0' end
redis.call('DEL', key)
return '1'
