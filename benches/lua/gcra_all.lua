-- The multi-key, all-or-nothing GCRA script teams write today, for comparison with RL.MULTI.
-- KEYS[i]: a string key holding rule i's theoretical arrival time (TAT) in µs.
-- ARGV: five per key: name, limit, period in µs, burst, cost.
-- Reads every TAT, decides every rule, and writes every key only if every rule admits.
-- Reply as RL.MULTI's: allowed, denied_by (the first refusing rule, nil when allowed),
-- retry_after_ms (the longest wait among refusing rules), and per rule
-- {name, remaining, reset_after_ms}: for a rule that admits, after spending its cost (spent for
-- real only when every rule admits); for a refusing rule, what it holds now.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS
local tat, new_tat, interval, capacity = {}, {}, {}, {}
local allowed, denied_by, retry = 1, false, 0
for i = 1, n do
  local a = (i - 1) * 5
  interval[i] = tonumber(ARGV[a + 3]) / tonumber(ARGV[a + 2])
  capacity[i] = tonumber(ARGV[a + 4]) * interval[i]
  local current = tonumber(redis.call('GET', KEYS[i])) or now
  if current < now then current = now end
  tat[i] = current
  new_tat[i] = current + tonumber(ARGV[a + 5]) * interval[i]
  local allow_at = new_tat[i] - capacity[i]
  if allow_at > now then
    if allowed == 1 then denied_by = ARGV[a + 1] end
    allowed = 0
    local wait = math.ceil((allow_at - now) / 1000)
    if wait > retry then retry = wait end
  end
end
local rules = {}
for i = 1, n do
  local after = tat[i]
  if new_tat[i] - capacity[i] <= now then after = new_tat[i] end
  if allowed == 1 then
    redis.call('SET', KEYS[i], string.format('%d', math.ceil(after)), 'PX',
      math.ceil((after - now) / 1000))
  end
  rules[i] = {ARGV[(i - 1) * 5 + 1], math.floor((capacity[i] - (after - now)) / interval[i]),
    math.ceil((after - now) / 1000)}
end
return {allowed, denied_by, retry, rules}
