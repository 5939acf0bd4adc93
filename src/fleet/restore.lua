-- toolgate: add one sidecar's counts of the current windows back to the fleet's counters,
-- after Redis lost them (src/fleet/mod.rs). KEYS[i], i < #KEYS: limit hashes (as take.lua);
-- KEYS[#KEYS]: the epoch. ARGV: 6 numbers per limit key (w1 c1 w2 c2 w3 c3: window number
-- and this sidecar's calls in it, per minute, hour and day; 0 0 for none), then the epoch the
-- counts go to. Counts of a window the hash has moved past are dropped; into the same window
-- they are added, into none (or an older one) they start it. Returns 1, or 0 when the epoch
-- moved meanwhile (nothing written: the sidecar asks again).
if redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return 0
end
local lens = {60000, 3600000, 86400000}
for i = 1, #KEYS - 1 do
  local a = (i - 1) * 6
  local ttl = 0
  for j = 1, 3 do
    local w, c = tonumber(ARGV[a + 2 * j - 1]), tonumber(ARGV[a + 2 * j])
    if c > 0 then
      local sw = tonumber(redis.call('HGET', KEYS[i], 'w' .. j))
      if sw == nil or sw < w then
        redis.call('HSET', KEYS[i], 'w' .. j, tostring(w), 'c' .. j, tostring(c))
      elseif sw == w then
        redis.call('HINCRBY', KEYS[i], 'c' .. j, c)
      end
      ttl = math.max(ttl, 2 * lens[j])
    end
  end
  if ttl > 0 and redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], string.format('%d', ttl))
  end
end
return 1
