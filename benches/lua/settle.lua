-- Settle for reserve.lua, for comparison with RL.SETTLE: moves the TAT by (actual - estimate)
-- intervals. A debit may leave the key owing up to its capacity; a credit never makes it
-- fuller than full.
-- KEYS: as reserve.lua's. ARGV: id, actual, limit, period in µs, burst.
-- Reply as RL.SETTLE's: delta (actual - estimate, or the whole units of it applied where a
-- bound clamped it), remaining; nil for an unknown id. Settling again replies the first
-- settlement and changes nothing.
local r = redis.call('HGET', KEYS[2], ARGV[1])
if not r then return nil end
local estimate, settled = string.match(r, '^(%d+) %d+ %d+(.*)$')
if settled ~= '' then
  local delta, remaining = string.match(settled, '^ (%-?%d+) (%d+)$')
  return {tonumber(delta), tonumber(remaining)}
end
local delta = tonumber(ARGV[2]) - tonumber(estimate)
local interval = tonumber(ARGV[4]) / tonumber(ARGV[3])
local capacity = tonumber(ARGV[5]) * interval
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local target = tat + delta * interval
local new_tat = math.min(math.max(target, now), now + 2 * capacity)
if new_tat ~= target then
  local applied = (new_tat - tat) / interval
  if applied >= 0 then delta = math.floor(applied) else delta = math.ceil(applied) end
end
tat = new_tat
local remaining = math.max(0, math.floor((capacity - (tat - now)) / interval))
if tat > now then
  redis.call('SET', KEYS[1], string.format('%d', math.ceil(tat)), 'PX', math.ceil((tat - now) / 1000))
else
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[2], ARGV[1], r .. string.format(' %d %d', delta, remaining))
return {delta, remaining}
