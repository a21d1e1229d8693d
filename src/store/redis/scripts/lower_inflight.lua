-- fg_lower_inflight_v1: live in-flight entries with a token lower than ARGV[1], read-only.
--
-- KEYS[1] inflight  zset    requestId -> deadline (ms)
-- KEYS[2] inftok    hash    requestId -> token
-- ARGV[1] token             canonical token string
--
-- Returns (strings): {count, nextDeadline ('' when count is 0), now}
local infKey, tokKey = KEYS[1], KEYS[2]
local token = ARGV[1]

if not fg_is_token(token) then return redis.error_reply('fg_lower_inflight_v1: malformed token') end

local now = fg_now()
local count = 0
local soonest = nil
for _, e in ipairs(fg_live_inflight(infKey, tokKey, now)) do
  if fg_cmp(e[2], token) < 0 then
    count = count + 1
    if soonest == nil or e[3] < soonest then soonest = e[3] end
  end
end
local nextStr = ''
if soonest then nextStr = fg_int(soonest) end
return { fg_int(count), nextStr, fg_int(now) }
