-- wrk script for loadtest/saturate: a closed loop of POST /orders, each from a new buyer,
-- spread over the hot products; counts the answers by status so the bench can match 201s
-- against the units sold. With GET=/path, a closed loop of GETs of that path instead (the
-- bench's floor: what any request costs), its 200s counted as `created`.
--
--   PRODUCTS=3,4 RUN=tag wrk -t1 -c100 -d10s -s loadtest/orders.lua http://127.0.0.1:8091
local products, run = {}, os.getenv("RUN") or tostring(os.time())
for id in string.gmatch(os.getenv("PRODUCTS") or "1", "[^,]+") do
  products[#products + 1] = id
end

local threads, counter = {}, 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  threads[#threads + 1] = thread
end

n, created, refused, other = 0, 0, 0, 0  -- globals: done() reads them through thread:get
local headers = { ["Content-Type"] = "application/json" }
local get = os.getenv("GET")
-- PAY=false: reservations without payment (the bench's lapse row).
local pay = os.getenv("PAY") == "false" and ',"pay":false' or ""
function request()
  if get then
    return wrk.format("GET", get)
  end
  n = n + 1
  local product = products[(n % #products) + 1]
  local body = '{"product_id":' .. product .. ',"user_id":"w-' .. run .. '-' .. tid .. '-' .. n .. '"' .. pay .. '}'
  return wrk.format("POST", "/orders", headers, body)
end

function response(status, _, _)
  if status == 201 or (get and status == 200) then
    created = created + 1
  elseif status == 429 or status == 503 then
    refused = refused + 1
  else
    other = other + 1
  end
end

-- One JSON line on stdout for the bench to read (latencies in microseconds).
function done(summary, latency, _)
  local c, r, o = 0, 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("created")
    r = r + t:get("refused")
    o = o + t:get("other")
  end
  io.write(string.format(
    '{"created":%d,"refused":%d,"other":%d,"requests":%d,"errors":%d,"seconds":%.3f,"p50_us":%d,"p99_us":%d}\n',
    c, r, o, summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.duration / 1e6, latency:percentile(50), latency:percentile(99)))
end
