-- The single-key GCRA script teams write today, for comparison with RL.ADMIT.
-- KEYS[1]: a string key holding the theoretical arrival time (TAT) in µs.
-- ARGV: limit, period in µs, burst, cost.
-- Reply as RL.ADMIT's: allowed, remaining, retry_after_ms, reset_after_ms, limit.
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
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
  local remaining = math.floor((capacity - (tat - now)) / interval)
  return {0, remaining, math.ceil((allow_at - now) / 1000), math.ceil((tat - now) / 1000), burst}
end
local reset_ms = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%d', math.ceil(new_tat)), 'PX', reset_ms)
return {1, math.floor((now - allow_at) / interval), 0, reset_ms, burst}
