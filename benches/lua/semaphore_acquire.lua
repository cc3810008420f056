-- The concurrency semaphore teams write today, for comparison with RL.ACQUIRE.
-- KEYS[1]: a sorted set, holder -> lease expiry (µs since the epoch).
-- ARGV: capacity, lease in µs, holder.
-- Reply as RL.ACQUIRE's: acquired, holder, in_flight, retry_after_ms. Acquiring again with a
-- holder that holds a slot renews it. The key lives as long as its latest lease.
local capacity = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local holder = ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZSCORE', KEYS[1], holder)
local n = redis.call('ZCARD', KEYS[1])
if not held and n >= capacity then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, holder, n, math.ceil((tonumber(first[2]) - now) / 1000)}
end
redis.call('ZADD', KEYS[1], now + lease, holder)
if not held then n = n + 1 end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.ceil(tonumber(last[2]) / 1000))
return {1, holder, n, 0}
