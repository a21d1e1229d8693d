-- fg_idem_begin_v1: begins a request under an idempotency key (Store.beginIdempotent).
-- One key per record, so the script touches one key (any Redis Cluster slot). A record
-- lives exactly as long as it counts: in flight for its hold, done for its ttl (PEXPIRE),
-- so a record Redis still has is live.
--
-- KEYS[1] record    hash    fp (fingerprint), at (attempt; '' once done), r (response, base64)
-- ARGV[1] fingerprint
-- ARGV[2] attempt
-- ARGV[3] holdMs            decimal digits, ≥ 1
--
-- Returns: {'begun'} | {'mismatch'} | {'in-flight', '<ms left of the hold>'} | {'done', '<response base64>'}
local key = KEYS[1]
local fp, attempt, hold = ARGV[1], ARGV[2], ARGV[3]
if not string.match(hold, '^[1-9][0-9]*$') then return redis.error_reply('fg_idem_begin_v1: bad hold') end
if attempt == '' then return redis.error_reply('fg_idem_begin_v1: empty attempt') end

local rec = redis.call('HMGET', key, 'fp', 'at', 'r')
if not rec[1] then
  redis.call('DEL', key)
  redis.call('HSET', key, 'fp', fp, 'at', attempt)
  redis.call('PEXPIRE', key, hold)
  return {'begun'}
end
if rec[1] ~= fp then return {'mismatch'} end
if rec[2] ~= '' then
  local left = redis.call('PTTL', key)
  if left < 1 then left = 1 end
  return {'in-flight', fg_int(left)}
end
return {'done', rec[3] or ''}
