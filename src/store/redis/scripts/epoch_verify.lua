-- fg_epoch_verify_v1: ties the global epoch record to the Redis server that serves it. Run
-- by every fencegate process when it connects and after every reconnection, before it
-- grants or admits anything on that connection (docs/adr/0019-store-identity.md).
--
-- A server other than the one that last verified the record that took over from another
-- master (a promoted replica: replication is asynchronous) may hold older data than was
-- acknowledged: tokens already handed out could be minted again, and fences may have
-- forgotten admitted tokens. So the epoch is bumped: floor := max(floor, store clock
-- ms * 1000, atLeast), a new id. Another server that did not take over (the same data
-- restarted: with AOF appendfsync always, checked before this runs, it lost nothing
-- acknowledged) is recorded and the epoch kept. A missing record (FLUSHALL, a restart
-- without persistence) is created with such a floor.
--
-- KEYS[1] epoch   hash    id, floor (token string), server (run_id that last verified it);
--                         not hash-tagged (global)
-- ARGV[1] newId           id for a created, bumped or raised epoch
-- ARGV[2] runId           this server's run_id (INFO server)
-- ARGV[3] atLeast         '' or a token string the floor must reach: the highest token the
--                         calling process saw, passed when it saw another server before
-- ARGV[4] promoted        '1' when this server took over from another master (INFO
--                         replication: master_replid2 set), else '0'
--
-- Returns (strings): {id, floor, outcome}; outcome:
--   'same'     the record was verified by this server and no floor was asked for
--   'created'  the record was missing and is created
--   'adopted'  a record without a server (an older fencegate) now names this server
--   'restarted' another server verified it last, and this one took over from nobody:
--               recorded, the epoch kept
--   'bumped'   a promoted server: a new epoch above the clock and atLeast
--   'raised'   the floor was below atLeast: raised to it, new id
local epochKey = KEYS[1]
local newId, runId, atLeast, promoted = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if atLeast ~= '' and not fg_is_token(atLeast) then
  return redis.error_reply('fg_epoch_verify_v1: malformed atLeast')
end

local cur = redis.call('HMGET', epochKey, 'id', 'floor', 'server')
local clockFloor = fg_floor_of(fg_now())

local function above(f)
  f = fg_max(f, clockFloor)
  if atLeast ~= '' then f = fg_max(f, atLeast) end
  return f
end

if not cur[1] or not cur[2] then
  local floor = above('0')
  redis.call('HSET', epochKey, 'id', newId, 'floor', floor, 'server', runId)
  return { newId, floor, 'created' }
end
if not cur[3] then
  redis.call('HSET', epochKey, 'server', runId)
  return { cur[1], cur[2], 'adopted' }
end
if cur[3] ~= runId and promoted ~= '1' then
  redis.call('HSET', epochKey, 'server', runId)
  return { cur[1], cur[2], 'restarted' }
end
if cur[3] ~= runId then
  local floor = above(cur[2])
  redis.call('HSET', epochKey, 'id', newId, 'floor', floor, 'server', runId)
  return { newId, floor, 'bumped' }
end
if atLeast ~= '' and fg_cmp(atLeast, cur[2]) > 0 then
  redis.call('HSET', epochKey, 'id', newId, 'floor', atLeast)
  return { newId, atLeast, 'raised' }
end
return { cur[1], cur[2], 'same' }
