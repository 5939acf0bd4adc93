-- toolgate: one shared change, unless a newer one is already there (src/fleet/mod.rs).
-- KEYS[1]: the key (a string, or a hash with ARGV[2] as field); KEYS[2]: the change token.
-- ARGV: op (set | hsetnx | hset | hdel), field ('' for set), value (JSON; '' for hdel),
--   at_ms (when the change was made, by the sidecar that made it; 0: no order), token (a
--   fresh random value: every sidecar reads the state again when the token moves).
-- Returns 1 when written, 0 when a newer value was there (or nothing to do).
local op, field, value, at = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local current
if op == 'set' then
  current = redis.call('GET', KEYS[1])
else
  current = redis.call('HGET', KEYS[1], field)
end
if at > 0 and current then
  local ok, stored = pcall(cjson.decode, current)
  if ok and type(stored) == 'table' and tonumber(stored.at_ms) and tonumber(stored.at_ms) > at then
    return 0
  end
end
if op == 'set' then
  redis.call('SET', KEYS[1], value)
elseif op == 'hset' then
  redis.call('HSET', KEYS[1], field, value)
elseif op == 'hsetnx' then
  if current then return 0 end
  redis.call('HSET', KEYS[1], field, value)
elseif op == 'hdel' then
  if not current then return 0 end
  redis.call('HDEL', KEYS[1], field)
else
  return redis.error_reply('unknown op ' .. op)
end
redis.call('SET', KEYS[2], ARGV[5])
return 1
