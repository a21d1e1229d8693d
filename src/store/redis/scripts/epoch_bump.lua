-- fg_epoch_bump_v1: starts a new global epoch: floor := max(current floor, store clock
-- ms * 1000), with a new id. Never lowers the floor.
--
-- KEYS[1] epoch   hash    id, floor (token string); not hash-tagged (global)
-- ARGV[1] newId
--
-- Returns (strings): {id, floor}
local epochKey = KEYS[1]
local newId = ARGV[1]

local current = redis.call('HGET', epochKey, 'floor') or '0'
local floor = fg_max(current, fg_floor_of(fg_now()))
redis.call('HSET', epochKey, 'id', newId, 'floor', floor)
return { newId, floor }
