-- Release for semaphore_acquire.lua, for comparison with RL.RELEASE.
-- KEYS[1]: the sorted set; ARGV[1]: the holder.
-- Reply as RL.RELEASE's: 1 released, 0 not held (never acquired, released, or expired).
-- The last member's removal deletes the key.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZREM', KEYS[1], ARGV[1])
