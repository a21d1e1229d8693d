-- fg_idem_finish_v1: stores the response of the attempt that holds the key in flight
-- and keeps the record done for ttlMs (Store.finishIdempotent).
--
-- KEYS[1] record    hash    fp, at, r (see idem_begin.lua)
-- ARGV[1] attempt
-- ARGV[2] response          base64
-- ARGV[3] ttlMs             decimal digits, ≥ 1
--
-- Returns: '1' when stored, '0' when the record is not this attempt's in flight (nothing changed)
local key = KEYS[1]
local attempt, response, ttl = ARGV[1], ARGV[2], ARGV[3]
if not string.match(ttl, '^[1-9][0-9]*$') then return redis.error_reply('fg_idem_finish_v1: bad ttl') end
if attempt == '' or redis.call('HGET', key, 'at') ~= attempt then return '0' end
redis.call('HSET', key, 'at', '', 'r', response)
redis.call('PEXPIRE', key, ttl)
return '1'
