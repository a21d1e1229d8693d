-- wrk script for the benchmarks (bench/wrk.mjs runs it): PUT /{WRK_BASE}/{i} with a 90-byte
-- JSON body, i rotating over WRK_LOCKS ids, each with its lock's Fencing-Token (and
-- Fencing-Sequencer) when WRK_TOKENS (and WRK_SEQUENCERS) list them, comma-separated, in
-- lock order. Every answer's status is checked: one equal to WRK_EXPECT (or any 2xx when it
-- is unset) counts as ok, anything else as bad. done() prints one line of JSON, prefixed
-- "wrk-json ", with wrk's counts and latency percentiles (µs).

local function list(name)
  local out = {}
  for v in string.gmatch(os.getenv(name) or "", "[^,]+") do
    out[#out + 1] = v
  end
  return out
end

local base = os.getenv("WRK_BASE") or "orders"
local locks = tonumber(os.getenv("WRK_LOCKS") or "16")
local tokens = list("WRK_TOKENS")
local sequencers = list("WRK_SEQUENCERS")
local expect = tonumber(os.getenv("WRK_EXPECT") or "0")
local body = '{"status":"shipped","note":"' .. string.rep("x", 64) .. '"}'

local requests = {}
local n = 0
ok = 0
bad = 0
last_bad = 0

function init(args)
  for i = 0, locks - 1 do
    local headers = { ["Content-Type"] = "application/json" }
    if tokens[i + 1] then headers["Fencing-Token"] = tokens[i + 1] end
    if sequencers[i + 1] then headers["Fencing-Sequencer"] = sequencers[i + 1] end
    requests[i] = wrk.format("PUT", "/" .. base .. "/" .. i, headers, body)
  end
end

function request()
  local r = requests[n % locks]
  n = n + 1
  return r
end

function response(status, headers, body)
  if (expect == 0 and status >= 200 and status < 300) or status == expect then
    ok = ok + 1
  else
    bad = bad + 1
    last_bad = status
  end
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests)
  local okAll, badAll, lastBad = 0, 0, 0
  for _, t in ipairs(threads) do
    okAll = okAll + t:get("ok")
    badAll = badAll + t:get("bad")
    if t:get("last_bad") ~= 0 then lastBad = t:get("last_bad") end
  end
  local e = summary.errors
  io.write(string.format(
    'wrk-json {"requests":%d,"durationUs":%d,"ok":%d,"bad":%d,"lastBadStatus":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"p50Us":%d,"p99Us":%d,"maxUs":%d}\n',
    summary.requests, summary.duration, okAll, badAll, lastBad,
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
