-- fg_epoch_verify_cluster_v1: fg_epoch_verify_v1 for a Redis Cluster: ties the global epoch
-- record to every primary that serves fencegate's keys (docs/adr/0021-redis-cluster.md).
-- Run by every fencegate process before it sends any data command to a primary whose
-- connection it has not verified (cluster.ts), with every primary of the slot map.
--
-- Each primary is named by its cluster node id (CLUSTER MYID, kept in nodes.conf across
-- restarts) and recorded with its run_id in field 'srv:<node id>'. A primary that took
-- over from another master (a promoted replica: replication is asynchronous, so it may
-- lack grants and fence moves its master acknowledged) and whose run_id the record does
-- not hold starts a new epoch: floor := max(floor, store clock ms * 1000, atLeast), new
-- id, as fg_epoch_verify_v1 does for one server. A primary that did not take over (new, or
-- the same node restarted from its AOF, appendfsync always checked before this runs) is
-- recorded and the epoch kept.
--
-- A primary the record knows whose marker is missing lost its data (its AOF removed, its
-- slots handed to an empty node): the same as a promoted replica, a new epoch. Each primary
-- holds a marker key in the lowest slot it serves (<prefix>:node:{tag}), set by the caller
-- after this script (so a crash in between costs a spare new epoch, never a missed one).
-- A primary the record does not know, when the record knows others, is a new epoch too
-- unless it has its marker: its slots may have come from a node that lost them.
--
-- The record is one key in one slot: a failover of the primary that holds it is itself a
-- promoted primary, seen here, and bumps the epoch before anything reads the floor there.
--
-- KEYS[1] epoch   hash    id, floor, srv:<node id> -> run_id; not hash-tagged (global)
-- ARGV[1] newId           id for a created, bumped or raised epoch
-- ARGV[2] atLeast         '' or a token string the floor must reach
-- ARGV[3..] quadruples    node id, run_id, promoted ('1' or '0'), marker ('1' present,
--                         '0' missing), per primary
--
-- Returns (strings): {id, floor, outcome}; outcome 'same', 'created', 'restarted'
-- (a primary recorded with another run_id or not at all, none promoted), 'bumped', 'raised'
local epochKey = KEYS[1]
local newId, atLeast = ARGV[1], ARGV[2]

if atLeast ~= '' and not fg_is_token(atLeast) then
  return redis.error_reply('fg_epoch_verify_cluster_v1: malformed atLeast')
end

local cur = redis.call('HMGET', epochKey, 'id', 'floor')
local clockFloor = fg_floor_of(fg_now())

local function above(f)
  f = fg_max(f, clockFloor)
  if atLeast ~= '' then f = fg_max(f, atLeast) end
  return f
end

local known = false
for _, f in ipairs(redis.call('HKEYS', epochKey)) do
  if string.sub(f, 1, 4) == 'srv:' then known = true; break end
end

local promotedNew, recorded = false, false
for i = 3, #ARGV, 4 do
  local nodeId, runId, promoted, marker = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local field = 'srv:' .. nodeId
  local was = redis.call('HGET', epochKey, field)
  if marker ~= '1' and (was or known) then promotedNew = true end
  if was ~= runId then
    if promoted == '1' then promotedNew = true end
    redis.call('HSET', epochKey, field, runId)
    recorded = true
  end
end

if not cur[1] or not cur[2] then
  local floor = above('0')
  redis.call('HSET', epochKey, 'id', newId, 'floor', floor)
  return { newId, floor, 'created' }
end
if promotedNew then
  local floor = above(cur[2])
  redis.call('HSET', epochKey, 'id', newId, 'floor', floor)
  return { newId, floor, 'bumped' }
end
if atLeast ~= '' and fg_cmp(atLeast, cur[2]) > 0 then
  redis.call('HSET', epochKey, 'id', newId, 'floor', atLeast)
  return { newId, atLeast, 'raised' }
end
return { cur[1], cur[2], recorded and 'restarted' or 'same' }
