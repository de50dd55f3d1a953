-- wrk script for loadtest/lib/saturate.py: a closed loop of orders spread over the hot products;
-- counts the answers by status so the bench can match 201s against the units sold.
-- With GET=/path, a closed loop of GETs of that path instead (the bench's floor: what any
-- request costs), its 200s counted as `created`.
--
-- Which route (ROUTE):
--   unset             POST /orders, the product named in the body ({"product_id":3,...})
--   ROUTE=product     POST /api/products/3/orders, the body without product_id: the route
--                     nginx sends to the product's instance (the bench gives each instance's
--                     wrk only the products the consistent hash sends it: loadtest/lib/common/route.py)
--
-- Who buys (loadtest/lib/fleet.py's `load_env` sets it):
--   TOKENS_FILE=path  the buyers sign in: a file of their tokens, one JWT a line (fetched
--                     before wrk starts: wrk's Lua cannot make requests of its own before the
--                     loop); each order carries `Authorization: Bearer` of the next one,
--                     round-robin, its body no user_id (the buyer is the token's sub)
--   BUYERS=N          no sign-in (a server in `open` mode): N buyers named in the body,
--                     BUYER_PREFIX0 … BUYER_PREFIX(N-1), round-robin
--   neither           no sign-in, every order a new buyer (w-RUN-thread-n)
--   SHARE=0.33        where in the pool this wrk starts (a fraction of it: one wrk per
--                     instance, each at its own point)
--
--   PRODUCTS=3,4 RUN=tag TOKENS_FILE=tokens wrk -t1 -c100 -d10s -s loadtest/wrk/orders.lua http://127.0.0.1:8091
--   PRODUCTS=3 ROUTE=product … wrk … http://127.0.0.1:8092
local products, run = {}, os.getenv("RUN") or tostring(os.time())
for id in string.gmatch(os.getenv("PRODUCTS") or "1", "[^,]+") do
  products[#products + 1] = id
end
local route = os.getenv("ROUTE") or ""
assert(route == "" or route == "product", "ROUTE is product or unset, not " .. route)
local by_product = route == "product"
-- Each product's path and its body's first field (none on the product's route: the path
-- names it), made once, not per request.
local paths, heads = {}, {}
for i, id in ipairs(products) do
  paths[i] = by_product and ("/api/products/" .. id .. "/orders") or "/orders"
  heads[i] = by_product and "" or ('"product_id":' .. id)
end

local tokens = {}
local tokens_file = os.getenv("TOKENS_FILE")
if tokens_file and tokens_file ~= "" then
  local file = assert(io.open(tokens_file, "r"), "cannot read TOKENS_FILE " .. tokens_file)
  for line in file:lines() do
    local token = line:match("^%s*(%S+)%s*$")
    if token then
      -- The header's value, made once: a pool of thousands rebuilt per request would cost
      -- the generator a string and its garbage each time.
      tokens[#tokens + 1] = "Bearer " .. token
    end
  end
  file:close()
  assert(#tokens > 0, "no token in TOKENS_FILE " .. tokens_file)
end
local buyers = tonumber(os.getenv("BUYERS") or "") or 0
local prefix = os.getenv("BUYER_PREFIX") or ("w-" .. run .. "-")
local pool = #tokens > 0 and #tokens or buyers
local offset = pool > 0 and math.floor((tonumber(os.getenv("SHARE") or "0") or 0) * pool) or 0

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
local pay = os.getenv("PAY") == "false" and '"pay":false' or ""
function request()
  if get then
    return wrk.format("GET", get)
  end
  n = n + 1
  local i = (n % #products) + 1
  local who
  if #tokens > 0 then
    headers["Authorization"] = tokens[((offset + n) % pool) + 1]
    who = ""
  elseif buyers > 0 then
    who = '"user_id":"' .. prefix .. ((offset + n) % buyers) .. '"'
  else
    who = '"user_id":"w-' .. run .. '-' .. tid .. '-' .. n .. '"'
  end
  -- The body's fields, comma-separated: the product's (not on its own route), the buyer's
  -- name (not with a token), `pay` (PAY=false only); `{}` with none.
  local body = heads[i]
  if who ~= "" then
    body = body ~= "" and (body .. "," .. who) or who
  end
  if pay ~= "" then
    body = body ~= "" and (body .. "," .. pay) or pay
  end
  return wrk.format("POST", paths[i], headers, "{" .. body .. "}")
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
