-- fg_lower_inflight_v3: the in-flight entries with a token lower than ARGV[1], the
-- gateway sessions that own them and, per session, the largest delivery bound among
-- them, read-only. Whether those sessions still live is for the caller to judge (the
-- session records are not in this lock's hash slot).
--
-- KEYS[1] inf       hash    requestId -> '<token> <session> <bound ms>'
-- ARGV[1] token             canonical token string
--
-- Returns (strings): {count, session, bound, session, bound, …} (sessions distinct)
local infKey = KEYS[1]
local token = ARGV[1]

if not fg_is_token(token) then return redis.error_reply('fg_lower_inflight_v3: malformed token') end

local count = 0
local out = { '0' }
local at = {}
for _, e in ipairs(fg_inflight(infKey)) do
  if fg_cmp(e[2], token) < 0 then
    count = count + 1
    local i = at[e[3]]
    if not i then
      out[#out + 1] = e[3]
      out[#out + 1] = e[4]
      at[e[3]] = #out
    elseif fg_cmp(e[4], out[i]) > 0 then
      out[i] = e[4]
    end
  end
end
out[1] = fg_int(count)
return out
