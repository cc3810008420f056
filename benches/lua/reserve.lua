-- GCRA with reservations as teams write it, for comparison with RL.ADMIT .. RESERVE id:
-- gcra.lua's decision, plus the reservation remembered in a hash.
-- KEYS[1]: the TAT (µs) string key, as gcra.lua's. KEYS[2]: a hash, reservation id ->
-- "estimate remaining reset_after_ms" (RL.SETTLE's reply is appended once settled).
-- ARGV: limit, period in µs, burst, cost (the estimate), id, keep in ms.
-- Reply as RL.ADMIT's: allowed, remaining, retry_after_ms, reset_after_ms, limit. A retried id
-- replies the original decision and spends nothing. The hash lives until `keep` after the
-- latest reservation (Redis 7.0 cannot expire hash fields one by one).
local burst = tonumber(ARGV[3])
local id = ARGV[5]
local seen = redis.call('HGET', KEYS[2], id)
if seen then
  local remaining, reset = string.match(seen, '^%d+ (%d+) (%d+)')
  return {1, tonumber(remaining), 0, tonumber(reset), burst}
end
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cost = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = period / limit
local capacity = burst * interval
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + cost * interval
local allow_at = new_tat - capacity
if allow_at > now then
  local remaining = math.max(0, math.floor((capacity - (tat - now)) / interval))
  return {0, remaining, math.ceil((allow_at - now) / 1000), math.ceil((tat - now) / 1000), burst}
end
local reset_ms = math.ceil((new_tat - now) / 1000)
local remaining = math.floor((now - allow_at) / interval)
redis.call('SET', KEYS[1], string.format('%d', math.ceil(new_tat)), 'PX', reset_ms)
redis.call('HSET', KEYS[2], id, string.format('%d %d %d', cost, remaining, reset_ms))
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return {1, remaining, 0, reset_ms, burst}
