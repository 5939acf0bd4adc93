-- toolgate: take one unit from every limit of a call, or none (src/fleet/mod.rs).
-- KEYS[i], i < #KEYS: one hash per limit entry; KEYS[#KEYS]: the fleet's counter epoch.
-- ARGV: 5 numbers per limit key, in KEYS order: per_second, burst (0 0: no bucket),
-- per_minute, per_hour, per_day (0: no window); then the epoch this sidecar last added its
-- counts back to ("" for none).
-- Time is Redis's own (TIME), so every sidecar of a fleet reads the same clock.
-- Returns {taken (1/0/2), key index (1-based), per (0 bucket, 1 minute, 2 hour, 3 day),
--          limit, remaining, reset_secs, retry_after_secs, now_ms}:
--   taken = 1: the tightest limit after this call; taken = 0: the limit that refused (the one
--   with the longest wait, in the first entry that refuses). Nothing is written on a refusal.
--   taken = 2: the epoch (in the second place) is not the one this sidecar knows: Redis lost
--   its counters (it restarted empty) or this sidecar is new. Nothing is taken; the sidecar
--   adds its counts of the current windows back (restore.lua), then asks again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('GET', KEYS[#KEYS])
if not epoch then
  epoch = string.format('%d', now)
  redis.call('SET', KEYS[#KEYS], epoch)
end
if epoch ~= ARGV[#ARGV] then
  return {2, tonumber(epoch), 0, 0, 0, 0, 0, now}
end
local lens = {60000, 3600000, 86400000}
local entries = {}
for i = 1, #KEYS - 1 do
  local a = (i - 1) * 5
  local ps, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local h = redis.call('HMGET', KEYS[i], 'tok', 'ts', 'w1', 'c1', 'w2', 'c2', 'w3', 'c3')
  local e = {quotas = {}, tok = nil, ts = now, w = {}, c = {}, ttl = 1000}
  local refusing = nil
  if burst > 0 then
    local tok, ts = tonumber(h[1]), tonumber(h[2])
    if tok == nil or ts == nil then
      tok, ts = burst, now
    end
    if now > ts then
      tok = math.min(burst, tok + (now - ts) / 1000 * ps)
    end
    e.tok, e.ts = tok, math.max(ts, now)
    local wait = math.max(1, math.ceil((1 - tok) / ps))
    local q = {0, burst, math.floor(math.max(tok, 0)), math.max(0, math.ceil((burst - tok) / ps)), wait}
    table.insert(e.quotas, q)
    if q[3] == 0 then refusing = q end
    e.ttl = math.max(e.ttl, math.ceil(burst / ps * 1000) + 1000)
  end
  for j = 1, 3 do
    local limit = tonumber(ARGV[a + 2 + j])
    if limit > 0 then
      local len = lens[j]
      local w = math.floor(now / len)
      local sw, calls = tonumber(h[2 + 2 * j - 1]), tonumber(h[2 + 2 * j])
      -- A window before this one, or one far ahead (a clock once set wrong), starts afresh.
      if sw == nil or calls == nil or w > sw or sw - w > 1 then
        sw, calls = w, 0
      end
      e.w[j], e.c[j] = sw, calls
      local reset = math.max(1, math.ceil((len - now % len) / 1000))
      local q = {j, limit, math.max(0, limit - calls), reset, reset}
      table.insert(e.quotas, q)
      if q[3] == 0 and (refusing == nil or q[5] > refusing[5]) then refusing = q end
      e.ttl = math.max(e.ttl, 2 * len)
    end
  end
  if refusing ~= nil then
    return {0, i, refusing[1], refusing[2], 0, refusing[4], refusing[5], now}
  end
  entries[i] = e
end
local tight = nil
for i = 1, #KEYS - 1 do
  local e = entries[i]
  local a = (i - 1) * 5
  local fields = {}
  if e.tok ~= nil then
    e.tok = e.tok - 1
    local ps, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    for _, q in ipairs(e.quotas) do
      if q[1] == 0 then q[4] = math.ceil((burst - e.tok) / ps) end
    end
    table.insert(fields, 'tok'); table.insert(fields, tostring(e.tok))
    table.insert(fields, 'ts'); table.insert(fields, tostring(e.ts))
  end
  for j = 1, 3 do
    if e.w[j] ~= nil then
      table.insert(fields, 'w' .. j); table.insert(fields, tostring(e.w[j]))
      table.insert(fields, 'c' .. j); table.insert(fields, tostring(e.c[j] + 1))
    end
  end
  redis.call('HSET', KEYS[i], unpack(fields))
  -- Written as an integer (a large number would print as 1e+14, which PEXPIRE refuses);
  -- at most about 31 years.
  redis.call('PEXPIRE', KEYS[i], string.format('%d', math.min(e.ttl, 1e12)))
  for _, q in ipairs(e.quotas) do
    local left = math.max(0, q[3] - 1)
    if tight == nil or left < tight[5] then
      tight = {1, i, q[1], q[2], left, q[4], 0, now}
    end
  end
end
return tight
