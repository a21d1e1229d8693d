-- fg_enqueue_waiter_v1: appends a waiter to the key's FIFO queue with deadline now + waitMs.
-- A waiter already queued keeps its place and gets the new deadline.
--
-- KEYS[1] waitq   zset    waiterId -> queue position (µs-based, strictly increasing)
-- KEYS[2] waitdl  hash    waiterId -> deadline (ms)
-- ARGV[1] waiterId
-- ARGV[2] waitMs
--
-- Returns: the deadline (ms, string)
local qKey, dlKey = KEYS[1], KEYS[2]
local waiterId, waitMs = ARGV[1], tonumber(ARGV[2])

local now = fg_now()
local deadline = now + waitMs

if not redis.call('ZSCORE', qKey, waiterId) then
  -- Position: the clock in µs, or just behind the current tail if that is later, so
  -- the order is the order of arrival even within one millisecond (< 2^53: exact).
  local pos = now * 1000
  local tail = redis.call('ZRANGE', qKey, -1, -1, 'WITHSCORES')
  if tail[2] and tonumber(tail[2]) >= pos then pos = tonumber(tail[2]) + 1 end
  redis.call('ZADD', qKey, fg_int(pos), waiterId)
end
redis.call('HSET', dlKey, waiterId, fg_int(deadline))

-- Entries stop counting at their deadline; let an abandoned queue vanish a minute later.
fg_keep(qKey, waitMs + 60000)
fg_keep(dlKey, waitMs + 60000)
return fg_int(deadline)
