-- lib.lua: helpers prepended to every fencegate script (scripts.ts concatenates this file
-- and the script's own file before defineCommand). It defines locals only; it touches no key.
--
-- Tokens are canonical decimal strings ("1" … "9223372036854775807"). They are NEVER
-- converted to Lua numbers: Lua numbers are doubles and lose precision above 2^53.
-- See docs/adr/0001-tokens-as-strings-in-lua.md.
--
-- Times are integral milliseconds held as Lua numbers (~1.7e12, far below 2^53, exact)
-- and always formatted with fg_int (never tostring, which may print an exponent).

local FG_WIDTH = 19
local FG_MAX = '9223372036854775807'

-- Store clock in ms, from Redis TIME (allowed in scripts: Redis 7 replicates effects).
local function fg_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integral number -> decimal string without exponent.
local function fg_int(n)
  return string.format('%.0f', n)
end

-- Epoch floor derived from a store-clock ms value: ms * 1000, built as a string.
local function fg_floor_of(ms)
  return fg_int(ms) .. '000'
end

-- Without leading zeros ('007' -> '7', '000' -> '0'). Tokens, floors and counters are
-- stored canonical; this only guards fg_cmp against any that is not.
local function fg_canon(s)
  if #s > 1 and string.byte(s, 1) == 48 then -- '0'
    return (string.gsub(s, '^0+(%d)', '%1'))
  end
  return s
end

-- Compares two decimal strings: -1, 0 or 1. The longer is the larger (no leading zeros);
-- of equal length, byte by byte, not with `<`: Lua's string `<` uses strcoll and Redis
-- sets LC_COLLATE from its environment. (Not padding both to 19 digits first, as before,
-- saves two new strings per comparison: docs/adr/0001-tokens-as-strings-in-lua.md.)
local function fg_cmp(a, b)
  a, b = fg_canon(a), fg_canon(b)
  local la = #a
  if la ~= #b then
    if la < #b then return -1 end
    return 1
  end
  if a == b then return 0 end
  for i = 1, la do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end

local function fg_max(a, b)
  if fg_cmp(a, b) >= 0 then return a end
  return b
end

-- True when s is a canonical token: digits, no leading zero, 1 … 2^63-1.
local function fg_is_token(s)
  if type(s) ~= 'string' or #s == 0 or #s > FG_WIDTH then return false end
  if not string.match(s, '^[1-9][0-9]*$') then return false end
  return fg_cmp(s, FG_MAX) <= 0
end

-- Decimal string + 1 (with carries), or nil when the result would exceed 2^63-1.
local function fg_incr(s)
  local i = #s
  while i >= 1 and string.byte(s, i) == 57 do -- '9'
    i = i - 1
  end
  local r
  if i == 0 then
    r = '1' .. string.rep('0', #s)
  else
    r = string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
  end
  -- strip leading zeros a padded input may carry (canonical output)
  r = string.gsub(r, '^0+(%d)', '%1')
  if #r > FG_WIDTH or fg_cmp(r, FG_MAX) > 0 then return nil end
  return r
end

-- Live waiters of a FIFO queue, in order: { {id, deadlineMs}, … }.
-- qkey: zset waiterId -> position; dkey: hash waiterId -> deadline ms.
-- With prune, expired entries (deadline <= now) are removed from both.
local function fg_live_waiters(qkey, dkey, now, prune)
  local live = {}
  local ids = redis.call('ZRANGE', qkey, 0, -1)
  if #ids == 0 then return live end
  local flat = redis.call('HGETALL', dkey)
  local dl = {}
  for i = 1, #flat, 2 do dl[flat[i]] = tonumber(flat[i + 1]) end
  for _, id in ipairs(ids) do
    local d = dl[id]
    if d and d > now then
      live[#live + 1] = { id, d }
    elseif prune then
      redis.call('ZREM', qkey, id)
      redis.call('HDEL', dkey, id)
    end
  end
  return live
end

-- In-flight entries of a lock: { {requestId, token, session, bound}, … }.
-- key: hash requestId -> '<token> <session> <bound ms>' (fence_batch.lua); bound '0' while
-- the write is not delivering (deliver.lua). An entry of an older version without the
-- bound reads as bound '0'.
local function fg_inflight(key)
  local out = {}
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local tok, session, bound = string.match(flat[i + 1], '^(%d+) (%S+) ?(%d*)$')
    if tok then
      if bound == '' then bound = '0' end
      out[#out + 1] = { flat[i], tok, session, bound }
    end
  end
  return out
end

-- Sets a key's expiry to at least ms from now (never shortens it). For bookkeeping keys
-- whose entries all carry their own deadline, so an abandoned key disappears by itself.
local function fg_keep(key, ms)
  local pttl = redis.call('PTTL', key)
  if pttl ~= -2 and pttl < ms then redis.call('PEXPIRE', key, fg_int(ms)) end
end

-- ---------------------------------------------------------------------------------------
