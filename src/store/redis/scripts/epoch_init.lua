-- fg_epoch_init_v1: returns the global epoch record, creating it when it is missing (a
-- new store, or one that lost its data) with floor = store clock ms * 1000.
--
-- KEYS[1] epoch   hash    id, floor (token string); not hash-tagged (global)
-- ARGV[1] newId           id to use if the record has to be created
--
-- Returns (strings): {id, floor, created '0'|'1'}
local epochKey = KEYS[1]
local newId = ARGV[1]

local cur = redis.call('HMGET', epochKey, 'id', 'floor')
if cur[1] and cur[2] then return { cur[1], cur[2], '0' } end

local floor = fg_floor_of(fg_now())
redis.call('HSET', epochKey, 'id', newId, 'floor', floor)
return { newId, floor, '1' }
