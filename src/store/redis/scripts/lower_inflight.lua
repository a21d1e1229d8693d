-- fg_lower_inflight_v2: the in-flight entries with a token lower than ARGV[1] and the
-- gateway sessions that own them, read-only. Whether those sessions still live is for
-- the caller to judge (the session records are not in this lock's hash slot).
--
-- KEYS[1] inf       hash    requestId -> '<token> <session>'
-- ARGV[1] token             canonical token string
--
-- Returns (strings): {count, session, session, …} (sessions distinct)
local infKey = KEYS[1]
local token = ARGV[1]

if not fg_is_token(token) then return redis.error_reply('fg_lower_inflight_v2: malformed token') end

local count = 0
local out = { '0' }
local seen = {}
for _, e in ipairs(fg_inflight(infKey)) do
  if fg_cmp(e[2], token) < 0 then
    count = count + 1
    if not seen[e[3]] then
      seen[e[3]] = true
      out[#out + 1] = e[3]
    end
  end
end
out[1] = fg_int(count)
return out
