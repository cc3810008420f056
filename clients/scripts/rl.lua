-- redis-rl's commands as one script, for servers that cannot load the module.
--
--   EVALSHA <sha1 of this file> M k1 .. kM NAME arg1 .. argN
--
-- NAME is the module's command (RL.ADMIT, RL.MULTI, ...) and arg1..argN its own arguments, keys
-- in their places (clients/SPEC.md section 5). The replies and error texts are the module's
-- (commands.md); the differences are listed in clients/scripts/README.md.
--
-- Lua numbers are doubles: integers are exact below 2^53 only. Every argument is bounded below
-- 2^50 (10^15 units, 3650 days in microseconds), the clock is about 2^51 microseconds, and the
-- module's products (units times microseconds, up to 2^100) are never formed: a rate level is
-- kept as whole tokens plus ticks of a token (1/period of one), and a product whose quotient
-- is bounded is divided exactly by muldiv below.

local MAX_COUNT = 1000000000000000
local MS, S = 1000, 1000000
local M, H = 60 * S, 3600 * S
local D = 24 * H
local MAX_PERIOD_US = 3650 * D
local MAX_KEEP_US = 7 * D
local DEFAULT_KEEP_US = H
local MAX_TTL_US = D
local MAX_LOG_LIMIT = 10000
local MAX_SEMAPHORE = 100000
local MAX_ID_LEN = 256
local MAX_RESERVATIONS = 10000
local BIG = 4503599627370496 -- 2^52: quotients at or above it are "too large" (saturate)

local floor = math.floor
-- The functions are fields of one table: the script makes its closures on every call, and one
-- upvalue each keeps that cheap (each upvalue of a closure is looked up among all the locals
-- captured so far).
local R = {}
local format = string.format

function R.int(n)
  return format('%.0f', n)
end

-- Refusals travel as a table through error() to the one pcall in the entry point.
function R.fail(msg)
  error({ msg }, 0)
end

-- q, r with a = q * c + r, 0 <= r < c, for 0 <= a < 2^53 and c > 0.
function R.divmod(a, c)
  local q = floor(a / c)
  local r = a - q * c
  if r < 0 then
    q, r = q - 1, r + c
  elseif r >= c then
    q, r = q + 1, r - c
  end
  return q, r
end

-- q, r with a * b = q * c + r, 0 <= r < c, for 0 <= a, b < 2^53 and 0 < c < 2^51, by doubling
-- over a's bits so no intermediate exceeds 2^53. A quotient of 2^52 or more is returned as BIG
-- (r 0): callers only compare it or saturate with it.
function R.muldiv(a, b, c)
  local p = a * b
  if p < BIG then
    return R.divmod(p, c)
  end
  local qb, rb = R.divmod(b, c)
  local bits, n = {}, 0
  while a > 0 do
    local h = floor(a / 2)
    n = n + 1
    bits[n] = a - 2 * h
    a = h
  end
  local q, r = 0, 0
  for i = n, 1, -1 do
    q, r = 2 * q, 2 * r
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      q, r = q + qb, r + rb
      if r >= c then
        q, r = q + 1, r - c
      end
    end
    if q >= BIG then
      return BIG, 0
    end
  end
  return q, r
end

function R.ceil_muldiv(a, b, c)
  local q, r = R.muldiv(a, b, c)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- a * b compared with c * d (all below 2^53), exactly: -1, 0 or 1.
function R.cmp_products(a, b, c, d)
  if a == 0 or b == 0 then
    return (c == 0 or d == 0) and 0 or -1
  end
  -- a * b <= c * d  <=>  floor(a * b / d) < c, or == c with no remainder.
  local q, r = R.muldiv(a, b, d)
  if q < c then
    return -1
  elseif q > c then
    return 1
  end
  return r > 0 and 1 or 0
end

---------------------------------------------------------------------------------------------
-- Argument parsing, with the module's error texts (core/src/parse.rs, core/src/error.rs).

function R.printable(s)
  local out = {}
  for i = 1, math.min(#s, 64) do
    local b = s:byte(i)
    if b >= 32 and b <= 126 then
      out[#out + 1] = string.char(b)
    else
      out[#out + 1] = format('\\x%02x', b)
    end
  end
  if #s > 64 then
    out[#out + 1] = '...'
  end
  return table.concat(out)
end

function R.range_error(arg, min, max)
  R.fail('ERR ' .. arg .. ' must be in the range [' .. R.int(min) .. ', ' .. R.int(max) .. ']')
end

-- A non-negative decimal integer; nil and the kind of failure ('integer' or 'range') if not.
function R.parse_u64(s)
  if #s == 0 then
    return nil, 'integer'
  end
  if #s > 19 then
    return nil, s:find('[^0-9]') and 'integer' or 'range'
  end
  local bad = s:find('[^0-9]')
  if bad then
    if s:sub(bad, bad) == '-' and #s > 1 then
      return nil, 'range'
    end
    return nil, 'integer'
  end
  local v = tonumber(s)
  -- Above 9223372036854775807 (i64::MAX): only the size matters, so the double is enough.
  if v > 9223372036854775000 and (#s == 19 and s > '9223372036854775807') then
    return nil, 'range'
  end
  return v
end

function R.parse_count(s, arg, min, max)
  local v, why = R.parse_u64(s)
  if v == nil then
    if why == 'range' then
      R.range_error(arg, min, max)
    end
    R.fail('ERR ' .. arg .. ' must be an integer')
  end
  if v < min or v > max then
    R.range_error(arg, min, max)
  end
  return v
end

local UNITS = { ms = MS, s = S, m = M, h = H, d = D }

function R.parse_duration(s, arg, max_us, max_text)
  local digits = s:match('^[0-9]*')
  local unit = s:sub(#digits + 1)
  if unit == '' then
    if #digits > 0 then
      R.fail('ERR ' .. arg .. ' needs a unit: add ms, s, m, h or d (for example 10s)')
    end
    R.fail('ERR ' .. arg .. ' must be a positive integer followed by ms, s, m, h or d (for example 10s)')
  end
  local scale = UNITS[unit:lower()]
  if scale == nil or #digits == 0 then
    R.fail('ERR ' .. arg .. ' must be a positive integer followed by ms, s, m, h or d (for example 10s)')
  end
  local n = R.parse_u64(digits)
  if n == nil or n * scale < MS or n * scale > max_us then
    R.fail('ERR ' .. arg .. ' must be between 1ms and ' .. max_text)
  end
  return n * scale
end

function R.parse_id(s, what)
  if #s == 0 or #s > MAX_ID_LEN then
    R.fail('ERR ' .. what .. ' must be 1 to 256 bytes')
  end
  return s
end

function R.is(token, name)
  return token:upper() == name
end

-- DEADLINE unix-ms at args[i]: the value, after checking that none was given before.
function R.take_deadline(args, i, given)
  local v = args[i + 1]
  if v == nil then
    R.fail('ERR DEADLINE needs a value')
  end
  local ms = R.parse_u64(v)
  if ms == nil then
    R.fail('ERR DEADLINE must be a Unix time in milliseconds (an integer)')
  end
  if given ~= nil then
    R.fail('ERR DEADLINE given more than once')
  end
  return ms
end

-- Past its DEADLINE by the server's clock (now, the TIME the command decides with), a call
-- changes nothing: it fails before any key is read (core/src/deadline.rs). A deadline further
-- ahead than the tolerated clock skew (1h) is refused too.
function R.check_deadline(deadline_ms, now)
  if deadline_ms == nil then
    return
  end
  local deadline_us = deadline_ms * MS
  if now > deadline_us then
    R.fail('DEADLINE the call reached the server ' .. R.int(R.ms_up(now - deadline_us))
      .. 'ms after its deadline; it changed nothing')
  end
  if deadline_us - now > H then
    R.fail('ERR DEADLINE is more than 1h after the server\'s clock: it is a Unix time in milliseconds')
  end
end

local ALGOS = { 'gcra', 'bucket', 'window', 'sliding', 'log' }
local FAMILY = { gcra = 'rate', bucket = 'rate', window = 'window', sliding = 'window',
  log = 'log', semaphore = 'semaphore' }

function R.parse_algo(s)
  local lower = s:lower()
  for _, a in ipairs(ALGOS) do
    if lower == a then
      return a
    end
  end
  R.fail('ERR ALGO must be one of gcra, bucket, window, sliding, log (got \'' .. R.printable(s) .. '\')')
end

-- Takes BURST, COST or ALGO at args[i] into opts; returns the arguments it took (0: not one).
function R.take_rule_option(opts, args, i)
  local token = args[i]
  local field
  if R.is(token, 'BURST') then
    field = 'burst'
  elseif R.is(token, 'COST') then
    field = 'cost'
  elseif R.is(token, 'ALGO') then
    field = 'algo'
  else
    return 0
  end
  local name = token:upper()
  local value = args[i + 1]
  if value == nil then
    R.fail('ERR ' .. name .. ' needs a value')
  end
  local v
  if field == 'algo' then
    v = R.parse_algo(value)
  else
    v = R.parse_count(value, name, 1, MAX_COUNT)
  end
  if opts[field] ~= nil then
    R.fail('ERR ' .. name .. ' given more than once')
  end
  opts[field] = v
  return 2
end

-- The validated rule { algo, limit, period, burst } and the cost (core/src/rule.rs Rule::new).
function R.build_rule(opts, limit_s, period_s)
  local algo = opts.algo or 'gcra'
  local limit = R.parse_count(limit_s, 'limit', 1, MAX_COUNT)
  local period = R.parse_duration(period_s, 'period', MAX_PERIOD_US, '3650d')
  if algo == 'log' and limit > MAX_LOG_LIMIT then
    R.range_error('limit', 1, MAX_LOG_LIMIT)
  end
  local burst = limit
  if opts.burst ~= nil then
    if FAMILY[algo] ~= 'rate' then
      R.fail('ERR BURST is not allowed with ALGO ' .. algo)
    end
    burst = opts.burst
  end
  if R.cmp_products(burst, period, MAX_PERIOD_US, limit) > 0 then
    R.fail('ERR capacity / limit * period (the time to refill the capacity) must be at most 3650d')
  end
  local cost = opts.cost or 1
  if cost > burst then
    R.fail('ERR COST ' .. R.int(cost) .. ' exceeds the capacity ' .. R.int(burst)
      .. ': such a request could never be admitted')
  end
  return { algo = algo, limit = limit, period = period, burst = burst }, cost
end

function R.arity(name)
  R.fail('ERR wrong number of arguments for \'' .. name .. '\' command')
end

---------------------------------------------------------------------------------------------
-- Rate levels (gcra and bucket): whole tokens w plus t ticks, 0 <= t < period, where a token is
-- `period` ticks and the steady rate adds `limit` ticks a microsecond (core/src/rate.rs).

function R.lnorm(w, t, p)
  if t >= p then
    return w + 1, t - p
  elseif t < 0 then
    return w - 1, t + p
  end
  return w, t
end

-- Microseconds for the rate to produce w tokens and t ticks (rounded up; 0 when not positive).
function R.ticks_to_us(rule, w, t)
  if w < 0 or (w == 0 and t == 0) then
    return 0
  end
  local q, r = R.muldiv(w, rule.period, rule.limit)
  local q2, r2 = R.divmod(t, rule.limit)
  q, r = q + q2, r + r2
  if r >= rule.limit then
    q, r = q + 1, r - rule.limit
  end
  if r > 0 then
    q = q + 1
  end
  return q
end

-- The tokens and ticks the rate adds in `us` microseconds, capped at twice the capacity.
function R.refill(rule, us)
  local w, t = R.muldiv(us, rule.limit, rule.period)
  if w >= 2 * rule.burst then
    return 2 * rule.burst, 0
  end
  return w, t
end

-- A level under rule `from` in rule `to`'s units: whole tokens kept, the fraction rescaled
-- (rounded down), clamped to the new capacity and debt floor (rate::convert).
function R.convert(w, t, from, to)
  if from.period ~= to.period then
    t = R.muldiv(t, to.period, from.period)
  end
  if w >= to.burst then
    return to.burst, 0
  elseif w < -to.burst then
    return -to.burst, 0
  end
  return w, t
end

-- A gcra TAT is kept as q microseconds plus f ticks of the rate (TAT = q * limit + f ticks in
-- the module's terms, 0 <= f < limit).
function R.gcra_level(rule, tq, tf, now)
  local dq = tq - now
  if dq < 0 or (dq == 0 and tf == 0) then
    return rule.burst, 0
  end
  -- dq * limit + tf ticks, in tokens and ticks of a token.
  local w, t = R.muldiv(dq, rule.limit, rule.period)
  local w2, t2 = R.divmod(tf, rule.period)
  w, t = R.lnorm(w + w2, t + t2, rule.period)
  return R.lnorm(rule.burst - w, -t, rule.period)
end

-- The TAT holding level (w, t) at `now`: now * limit + capacity - level, as (q, f).
function R.gcra_tat(rule, w, t, now)
  local mw, mt = R.lnorm(rule.burst - w, -t, rule.period)
  local q, f = R.muldiv(mw, rule.period, rule.limit)
  local q2, f2 = R.divmod(mt, rule.limit)
  q, f = q + q2, f + f2
  if f >= rule.limit then
    q, f = q + 1, f - rule.limit
  end
  return now + q, f
end

function R.gcra_full_at(tq, tf)
  return tf > 0 and tq + 1 or tq
end

-- The earliest instant this TAT can have been written: TAT - 2 * capacity, in microseconds.
function R.gcra_time_floor(rule, tq, tf)
  local q, f = R.muldiv(2 * rule.burst, rule.period, rule.limit)
  local wq, wf = tq - q, tf - f
  if wf < 0 then
    wq, wf = wq - 1, wf + rule.limit
  end
  if wq < 0 then
    return 0
  end
  return wf > 0 and wq + 1 or wq
end

---------------------------------------------------------------------------------------------
-- Keys: one hash per limiter (fields a: algo, l: limit, p: period in us, b: capacity, x y z:
-- the algorithm's state), and r:<id> fields for reservations, h:<holder> for leases.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

function R.now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * S + tonumber(t[2])
end

-- The stored limiter: nil for an absent key; a WRONGTYPE refusal for another type.
function R.load(key)
  -- HMGET answers an absent key with nils and another type with WRONGTYPE: one call for both.
  local v = redis.pcall('HMGET', key, 'a', 'l', 'p', 'b', 'x', 'y', 'z', 'ru')
  if v.err then
    R.fail(WRONGTYPE)
  end
  if not v[1] then
    if redis.call('EXISTS', key) == 1 then
      R.fail(WRONGTYPE)
    end
    return nil
  end
  if not FAMILY[v[1]] then
    R.fail(WRONGTYPE)
  end
  local l = {
    stored = v[1] .. ' ' .. v[2] .. ' ' .. v[3] .. ' ' .. v[4],
    algo = v[1],
    rule = { algo = v[1], limit = tonumber(v[2]), period = tonumber(v[3]), burst = tonumber(v[4]) },
    ru = tonumber(v[8]) or 0,
  }
  local a = v[1]
  if a == 'gcra' then
    l.tq, l.tf = tonumber(v[5]), tonumber(v[6])
  elseif a == 'bucket' then
    l.u, l.w, l.t = tonumber(v[5]), tonumber(v[6]), tonumber(v[7])
  elseif a == 'window' then
    l.start, l.count = tonumber(v[5]), tonumber(v[6])
  elseif a == 'sliding' then
    l.start, l.prev, l.cur = tonumber(v[5]), tonumber(v[6]), tonumber(v[7])
  elseif a == 'log' then
    l.entries = {}
    for at, cost in string.gmatch(v[5] or '', '(%d+):(%d+)') do
      l.entries[#l.entries + 1] = { tonumber(at), tonumber(cost) }
    end
  elseif a == 'semaphore' then
    l.seq = tonumber(v[5]) or 0
  end
  return l
end

-- An absent key under `rule` (Limiter::new).
function R.fresh(rule)
  local a = rule.algo
  local l = { algo = a, rule = rule, ru = 0, fresh = true }
  if a == 'gcra' then
    l.tq, l.tf = 0, 0
  elseif a == 'bucket' then
    l.u, l.w, l.t = 0, rule.burst, 0
  elseif a == 'window' then
    l.start, l.count = 0, 0
  elseif a == 'sliding' then
    l.start, l.prev, l.cur = 0, 0, 0
  elseif a == 'log' then
    l.entries = {}
  elseif a == 'semaphore' then
    l.seq = 0
  end
  return l
end

function R.time_floor(l)
  local a = l.algo
  if a == 'gcra' then
    return R.gcra_time_floor(l.rule, l.tq, l.tf)
  elseif a == 'bucket' then
    return l.u
  elseif a == 'window' or a == 'sliding' then
    return l.start
  elseif a == 'log' then
    local e = l.entries[#l.entries]
    return e and e[1] or 0
  end
  return 0
end

-- A rate key's level at `now` under its own rule.
function R.level_at(l, now)
  if l.algo == 'gcra' then
    return R.gcra_level(l.rule, l.tq, l.tf, now)
  end
  local elapsed = now - l.u
  if elapsed < 0 then
    elapsed = 0
  end
  local rw, rt = R.refill(l.rule, elapsed)
  local w, t = R.lnorm(l.w + rw, l.t + rt, l.rule.period)
  if w >= l.rule.burst then
    return l.rule.burst, 0
  end
  return w, t
end

-- Sets a rate key (of algo) to level (w, t) at `now` under `rule` (Limiter::store).
function R.set_level(l, algo, rule, w, t, now)
  if algo == 'bucket' then
    local u = now
    if l.algo == 'bucket' and l.u > now then
      u = l.u
    end
    l.u, l.w, l.t = u, w, t
    l.tq, l.tf = nil, nil
  else
    l.tq, l.tf = R.gcra_tat(rule, w, t, now)
    l.u, l.w, l.t = nil, nil, nil
  end
  l.algo, l.rule = algo, rule
end

function R.window_start(now, period)
  local _, r = R.divmod(now, period)
  return now - r
end

function R.log_full_at(l, rule)
  local e = l.entries[#l.entries]
  return e and e[1] + rule.period or 0
end

function R.sliding_full_at(l, rule)
  if l.cur > 0 then
    return l.start + 2 * rule.period
  elseif l.prev > 0 then
    return l.start + rule.period
  end
  return l.start
end

function R.full_at_us(l)
  local a, rule = l.algo, l.rule
  local at
  if a == 'gcra' then
    at = R.gcra_full_at(l.tq, l.tf)
  elseif a == 'bucket' then
    local mw, mt = R.lnorm(rule.burst - l.w, -l.t, rule.period)
    at = l.u + R.ticks_to_us(rule, mw, mt)
  elseif a == 'window' then
    at = l.start + rule.period
  elseif a == 'sliding' then
    at = R.sliding_full_at(l, rule)
  elseif a == 'log' then
    at = R.log_full_at(l, rule)
  else
    at = l.until_us or 0
  end
  return math.max(at, l.ru)
end

-- Writes the limiter's state and its expiry (when it is full again, or its last reservation
-- is forgotten).
function R.save(key, l)
  local a, rule = l.algo, l.rule
  local x, y, z = '', '', ''
  if a == 'gcra' then
    x, y = R.int(l.tq), R.int(l.tf)
  elseif a == 'bucket' then
    x, y, z = R.int(l.u), R.int(l.w), R.int(l.t)
  elseif a == 'window' then
    x, y = R.int(l.start), R.int(l.count)
  elseif a == 'sliding' then
    x, y, z = R.int(l.start), R.int(l.prev), R.int(l.cur)
  elseif a == 'log' then
    local parts = {}
    for i, e in ipairs(l.entries) do
      parts[i] = R.int(e[1]) .. ':' .. R.int(e[2])
    end
    x = table.concat(parts, ' ')
  elseif a == 'semaphore' then
    x = R.int(l.seq)
  end
  local l_, p_, b_ = R.int(rule.limit), R.int(rule.period), R.int(rule.burst)
  if l.stored == a .. ' ' .. l_ .. ' ' .. p_ .. ' ' .. b_ then
    redis.call('HSET', key, 'x', x, 'y', y, 'z', z)
  else
    redis.call('HSET', key, 'a', a, 'l', l_, 'p', p_, 'b', b_, 'x', x, 'y', y, 'z', z)
  end
  local ms, r = R.divmod(R.full_at_us(l), MS)
  if r > 0 then
    ms = ms + 1
  end
  redis.call('PEXPIREAT', key, R.int(ms))
end

function R.mismatch(stored, asked)
  R.fail('ERR key holds an ALGO ' .. stored .. ' limiter, not ' .. asked
    .. ': use another key, or DEL this one to change the algorithm')
end

---------------------------------------------------------------------------------------------
-- Decisions (core/src/limiter.rs decide_at). Each returns the decision
-- { allowed, remaining, retry (us), reset (us), capacity } and a function that spends it.

function R.decide_rate(l, rule, cost, now)
  local w, t = R.level_at(l, now)
  w, t = R.convert(w, t, l.rule, rule)
  local p = rule.period
  local allowed = w >= cost
  local aw = allowed and w - cost or w
  local d = { allowed = allowed, capacity = rule.burst, retry = 0 }
  d.remaining = aw > 0 and aw or 0
  if not allowed then
    local nw, nt = R.lnorm(cost - w, -t, p)
    d.retry = R.ticks_to_us(rule, nw, nt)
  end
  local mw, mt = R.lnorm(rule.burst - aw, -t, p)
  d.reset = R.ticks_to_us(rule, mw, mt)
  return d, function()
    R.set_level(l, rule.algo, rule, aw, t, now)
  end
end

function R.decide_window(l, rule, cost, now)
  local algo = rule.algo
  -- The counts that still count under the stored rule, rolled into rule's window of now.
  local start = R.window_start(math.max(now, l.start), rule.period)
  local prev, cur
  if l.algo == 'window' then
    local live = now < l.start + l.rule.period
    prev, cur = 0, live and l.count or 0
  else
    local s = R.window_start(math.max(now, l.start), l.rule.period)
    if l.start == s then
      prev, cur = l.prev, l.cur
    elseif l.start + l.rule.period == s then
      prev, cur = l.cur, 0
    else
      prev, cur = 0, 0
    end
  end
  local state_start = start
  now = math.max(now, state_start)
  if algo == 'window' then
    -- Fixed::decide: a stored window that is not now's counts nothing.
    local ws = R.window_start(now, rule.period)
    local count = (state_start == ws) and cur or 0
    local allowed = count + cost <= rule.limit
    local after = allowed and count + cost or count
    local to_end = ws + rule.period - now
    local d = {
      allowed = allowed, remaining = math.max(rule.limit - after, 0), capacity = rule.limit,
      retry = allowed and 0 or to_end, reset = after == 0 and 0 or to_end,
    }
    return d, function()
      l.algo, l.rule, l.start, l.count = algo, rule, ws, after
      l.prev, l.cur = nil, nil
    end
  end
  -- Sliding::decide, on the rolled counts.
  local period = rule.period
  local s = R.window_start(now, period)
  if state_start ~= s then
    if state_start + period == s then
      prev, cur = cur, 0
    else
      prev, cur = 0, 0
    end
  end
  local elapsed = now - s
  -- The weight of previous, previous * (period - elapsed) / period, rounded up.
  local weight = R.ceil_muldiv(prev, period - elapsed, period)
  local allowed = cur + cost + weight <= rule.limit
  local after = allowed and cur + cost or cur
  local spare = rule.limit - after - weight
  local d = { allowed = allowed, remaining = spare > 0 and spare or 0, capacity = rule.limit }
  local full = after > 0 and s + 2 * period or (prev > 0 and s + period or s)
  d.reset = math.max(full - now, 0)
  d.retry = 0
  if not allowed then
    -- Sliding::admit_at: the first instant the estimate has room for cost.
    local function earliest(p, room)
      if p == 0 then
        return 0
      end
      local keep = R.muldiv(room, period, p)
      return keep >= period and 0 or period - keep
    end
    local at
    local room = rule.limit - (cur + cost)
    if room >= 0 then
      at = s + earliest(prev, room)
    else
      at = s + period + earliest(cur, rule.limit - math.min(cost, rule.limit))
    end
    d.retry = math.max(at - now, 0)
  end
  return d, function()
    l.algo, l.rule, l.start, l.prev, l.cur = algo, rule, s, prev, after
    l.count = nil
  end
end

function R.decide_log(l, rule, cost, now)
  local entries = l.entries
  local newest = entries[#entries]
  now = math.max(now, newest and newest[1] or 0)
  local gone, total = 0, 0
  for _, e in ipairs(entries) do
    total = total + e[2]
  end
  for _, e in ipairs(entries) do
    if e[1] + rule.period > now then
      break
    end
    gone = gone + 1
    total = total - e[2]
  end
  local limit = rule.limit
  local allowed = total + cost <= limit
  local after = allowed and total + cost or total
  local full = R.log_full_at(l, rule)
  local d = { allowed = allowed, remaining = math.max(limit - after, 0), capacity = limit, retry = 0 }
  if allowed and cost > 0 then
    full = now + rule.period
  elseif not allowed then
    local excess = math.max(total + cost - limit, 0)
    local at = full
    for i = gone + 1, #entries do
      excess = math.max(excess - entries[i][2], 0)
      if excess == 0 then
        at = entries[i][1] + rule.period
        break
      end
    end
    d.retry = math.max(at - now, 0)
  end
  d.reset = math.max(full - now, 0)
  return d, function()
    local kept = {}
    for i = gone + 1, #entries do
      kept[#kept + 1] = entries[i]
    end
    kept[#kept + 1] = { now, cost }
    l.entries, l.rule = kept, rule
  end
end

-- Limiter::decide: at the key's own time line when the clock stepped back, with the waits
-- counted from the clock as read.
function R.decide(l, rule, cost, now)
  local sf, af = FAMILY[l.algo], FAMILY[rule.algo]
  if sf ~= af then
    R.mismatch(l.algo, rule.algo)
  end
  local at = math.max(now, R.time_floor(l))
  local d, spend
  if af == 'rate' then
    d, spend = R.decide_rate(l, rule, cost, at)
  elseif af == 'window' then
    d, spend = R.decide_window(l, rule, cost, at)
  else
    d, spend = R.decide_log(l, rule, cost, at)
  end
  local behind = at - now
  if behind > 0 then
    if d.retry > 0 then
      d.retry = d.retry + behind
    end
    if d.reset > 0 then
      d.reset = d.reset + behind
    end
  end
  return d, spend
end

function R.ms_up(us)
  local q, r = R.divmod(us, MS)
  return r > 0 and q + 1 or q
end

function R.decision_reply(d)
  return { d.allowed and 1 or 0, d.remaining, R.ms_up(d.retry), R.ms_up(d.reset), d.capacity }
end

---------------------------------------------------------------------------------------------
-- Reservations: r:<id> = "expires estimate remaining reset_us [delta settled]".

function R.get_reservation(key, id, now)
  local v = redis.call('HGET', key, 'r:' .. id)
  if not v then
    return nil
  end
  local f = {}
  for n in string.gmatch(v, '%-?%d+') do
    f[#f + 1] = tonumber(n)
  end
  if f[1] <= now then
    return nil
  end
  return { expires = f[1], estimate = f[2], remaining = f[3], reset = f[4], delta = f[5],
    settled = f[6] }
end

function R.put_reservation(key, id, r)
  local v = R.int(r.expires) .. ' ' .. R.int(r.estimate) .. ' ' .. R.int(r.remaining) .. ' ' .. R.int(r.reset)
  if r.delta then
    v = v .. ' ' .. R.int(r.delta) .. ' ' .. R.int(r.settled)
  end
  redis.call('HSET', key, 'r:' .. id, v)
end

-- Drops the forgotten reservations; returns how many are left.
function R.prune_reservations(key, now)
  local all = redis.call('HGETALL', key)
  local left = 0
  for i = 1, #all, 2 do
    local field = all[i]
    if field:sub(1, 2) == 'r:' then
      local expires = tonumber(all[i + 1]:match('^%d+'))
      if expires <= now then
        redis.call('HDEL', key, field)
      else
        left = left + 1
      end
    end
  end
  return left
end

-- RL.SETTLE ... FORGET: reservation r is forgotten a microsecond after now (kept until the next
-- prune, as the module keeps it), and the key lives on for its other reservations only: ru
-- becomes their latest forget time.
function R.forget_reservation(key, l, id, r, now)
  r.expires = math.min(r.expires, now + 1)
  R.put_reservation(key, id, r)
  local all = redis.call('HGETALL', key)
  local ru = 0
  for i = 1, #all, 2 do
    if all[i]:sub(1, 2) == 'r:' then
      ru = math.max(ru, tonumber(all[i + 1]:match('^%d+')))
    end
  end
  l.ru = ru
  redis.call('HSET', key, 'ru', R.int(ru))
end

function R.live_reservations(key, now)
  local all = redis.call('HGETALL', key)
  local live = 0
  for i = 1, #all, 2 do
    if all[i]:sub(1, 2) == 'r:' and tonumber(all[i + 1]:match('^%d+')) > now then
      live = live + 1
    end
  end
  return live
end

---------------------------------------------------------------------------------------------
-- Commands.

function R.check_key(arg, index)
  if arg ~= KEYS[index] then
    R.fail('ERR key argument ' .. R.int(index) .. ' is not KEYS[' .. R.int(index)
      .. ']: send every key of the command in KEYS, in order')
  end
end

local commands = {}

function R.parse_admit(args)
  if #args < 3 then
    R.arity('RL.ADMIT')
  end
  local opts = {}
  local dry, id, keep, deadline = false, nil, nil, nil
  local i = 4
  while i <= #args do
    local token = args[i]
    local taken = R.take_rule_option(opts, args, i)
    if taken > 0 then
      i = i + taken
    elseif R.is(token, 'RESERVE') then
      local v = args[i + 1]
      if v == nil then
        R.fail('ERR RESERVE needs a value')
      end
      R.parse_id(v, 'RESERVE id')
      if id ~= nil then
        R.fail('ERR RESERVE given more than once')
      end
      id = v
      i = i + 2
    elseif R.is(token, 'KEEP') then
      local v = args[i + 1]
      if v == nil then
        R.fail('ERR KEEP needs a value')
      end
      local k = R.parse_duration(v, 'KEEP', MAX_KEEP_US, '7d')
      if keep ~= nil then
        R.fail('ERR KEEP given more than once')
      end
      keep = k
      i = i + 2
    elseif R.is(token, 'DEADLINE') then
      deadline = R.take_deadline(args, i, deadline)
      i = i + 2
    elseif R.is(token, 'DRYRUN') then
      if dry then
        R.fail('ERR DRYRUN given more than once')
      end
      dry = true
      i = i + 1
    else
      R.fail('ERR syntax error near \'' .. R.printable(token) .. '\'')
    end
  end
  local rule, cost = R.build_rule(opts, args[2], args[3])
  if keep ~= nil and id == nil then
    R.fail('ERR RESERVE (for KEEP) is required')
  end
  if id ~= nil and FAMILY[rule.algo] ~= 'rate' then
    R.fail('ERR reservations are only for ALGO gcra and bucket keys')
  end
  return rule, cost, dry, id, keep or DEFAULT_KEEP_US, deadline
end

commands['RL.ADMIT'] = function(args)
  local rule, cost, dry, id, keep, deadline = R.parse_admit(args)
  local key = args[1]
  R.check_key(key, 1)
  local now = R.now_us()
  R.check_deadline(deadline, now)
  local l = R.load(key) or R.fresh(rule)
  if id == nil then
    local d, spend = R.decide(l, rule, cost, now)
    if d.allowed and not dry then
      spend()
      R.save(key, l)
    end
    return R.decision_reply(d)
  end
  if FAMILY[l.algo] ~= 'rate' then
    R.fail('ERR reservations are only for ALGO gcra and bucket keys')
  end
  local r = (not l.fresh) and R.get_reservation(key, id, now)
  if r then
    local cap = l.rule.burst
    return { 1, math.min(r.remaining, cap), 0, R.ms_up(r.reset), cap }
  end
  if not l.fresh and R.live_reservations(key, now) >= MAX_RESERVATIONS then
    R.fail('ERR the key keeps 10000 reservations already: settle them or let them expire')
  end
  local d, spend = R.decide(l, rule, cost, now)
  if d.allowed and not dry then
    spend()
    if not l.fresh then
      R.prune_reservations(key, now)
    end
    local expires = now + keep
    R.put_reservation(key, id, { expires = expires, estimate = cost, remaining = d.remaining,
      reset = d.reset })
    l.ru = math.max(l.ru, expires)
    redis.call('HSET', key, 'ru', R.int(l.ru))
    R.save(key, l)
  end
  return R.decision_reply(d)
end

function R.parse_grant(args)
  if #args < 5 then
    R.arity('RL.GRANT')
  end
  local opts = {}
  local want, ttl, deadline
  local i = 4
  while i <= #args do
    local token = args[i]
    local taken = R.take_rule_option(opts, args, i)
    if taken > 0 then
      i = i + taken
    else
      local v = args[i + 1]
      if R.is(token, 'WANT') then
        if v == nil then
          R.fail('ERR WANT needs a value')
        end
        local n = R.parse_count(v, 'WANT', 1, MAX_COUNT)
        if want ~= nil then
          R.fail('ERR WANT given more than once')
        end
        want = n
      elseif R.is(token, 'TTL') then
        if v == nil then
          R.fail('ERR TTL needs a value')
        end
        local n = R.parse_duration(v, 'TTL', MAX_TTL_US, '1d')
        if ttl ~= nil then
          R.fail('ERR TTL given more than once')
        end
        ttl = n
      elseif R.is(token, 'DEADLINE') then
        deadline = R.take_deadline(args, i, deadline)
      else
        R.fail('ERR syntax error near \'' .. R.printable(token) .. '\'')
      end
      i = i + 2
    end
  end
  if opts.cost ~= nil then
    R.fail('ERR syntax error near \'COST\'')
  end
  if want == nil then
    R.fail('ERR WANT is required')
  end
  local rule = R.build_rule(opts, args[2], args[3])
  return rule, want, ttl or S, deadline
end

commands['RL.GRANT'] = function(args)
  local rule, want, ttl, deadline = R.parse_grant(args)
  local key = args[1]
  R.check_key(key, 1)
  local now = R.now_us()
  R.check_deadline(deadline, now)
  local l = R.load(key) or R.fresh(rule)
  local available = R.decide(l, rule, 0, now).remaining
  local granted = math.min(available, want)
  local remaining, retry = available, 0
  if granted > 0 then
    local d, spend = R.decide(l, rule, granted, now)
    remaining = d.remaining
    spend()
    R.save(key, l)
  else
    retry = R.decide(l, rule, 1, now).retry
  end
  local valid = ttl
  if rule.algo == 'window' then
    local at = math.max(now, R.time_floor(l))
    local to_end = R.window_start(at, rule.period) + rule.period - now
    if to_end < 0 then
      to_end = 0
    end
    valid = math.min(ttl, to_end)
  end
  return { granted, remaining, floor(valid / MS), R.ms_up(retry) }
end

commands['RL.SETTLE'] = function(args)
  if #args < 3 or #args > 4 then
    R.arity('RL.SETTLE')
  end
  -- The token is checked before the id and the actual, as the module parses them.
  local forget = args[4] ~= nil
  if forget and not R.is(args[4], 'FORGET') then
    R.fail('ERR syntax error near \'' .. R.printable(args[4]) .. '\'')
  end
  local key = args[1]
  local id = R.parse_id(args[2], 'id')
  local actual = R.parse_count(args[3], 'actual', 0, MAX_COUNT)
  R.check_key(key, 1)
  local l = R.load(key)
  if l == nil or FAMILY[l.algo] ~= 'rate' then
    return false
  end
  local now = R.now_us()
  local r = R.get_reservation(key, id, now)
  if r == nil then
    return false
  end
  if r.delta then
    if forget then
      -- The forgotten ones go first, as the module drops them on this write too.
      R.prune_reservations(key, now)
      R.forget_reservation(key, l, id, r, now)
      R.save(key, l)
    end
    return { r.delta, r.settled }
  end
  local delta = actual - r.estimate
  local rule = l.rule
  local at = math.max(now, R.time_floor(l))
  local w, t = R.level_at(l, at)
  -- level - delta tokens, clamped to [-capacity, capacity].
  local aw, at_ = w - delta, t
  local clamped = false
  if aw > rule.burst or (aw == rule.burst and at_ > 0) then
    aw, at_, clamped = rule.burst, 0, true
  elseif aw < -rule.burst then
    aw, at_, clamped = -rule.burst, 0, true
  end
  local applied = delta
  if clamped then
    -- (level - after) / token, rounded toward zero.
    local dw, dt = R.lnorm(w - aw, t - at_, rule.period)
    applied = (dw < 0 and dt > 0) and dw + 1 or dw
  end
  R.set_level(l, l.algo, rule, aw, at_, at)
  local s = { delta = applied, remaining = aw > 0 and aw or 0 }
  R.prune_reservations(key, now)
  r.delta, r.settled = s.delta, s.remaining
  if forget then
    R.forget_reservation(key, l, id, r, now)
  else
    R.put_reservation(key, id, r)
  end
  R.save(key, l)
  return { s.delta, s.remaining }
end

---------------------------------------------------------------------------------------------
-- Semaphores: h:<holder> = lease expiry (us); x = holders handed out (for generated ids).

function R.leases(key)
  local all = redis.call('HGETALL', key)
  local out = {}
  for i = 1, #all, 2 do
    if all[i]:sub(1, 2) == 'h:' then
      out[#out + 1] = { all[i]:sub(3), tonumber(all[i + 1]) }
    end
  end
  return out
end

function R.load_semaphore(key, rule)
  local l = R.load(key)
  if l == nil then
    if rule == nil then
      return nil
    end
    l = R.fresh(rule)
  elseif l.algo ~= 'semaphore' then
    R.mismatch(l.algo, 'semaphore')
  end
  l.leases = l.fresh and {} or R.leases(key)
  return l
end

-- Drops the expired leases and writes the key, or deletes it when no lease is left.
function R.save_semaphore(key, l, now)
  local latest = 0
  for _, lease in ipairs(l.leases) do
    if lease[2] <= now then
      redis.call('HDEL', key, 'h:' .. lease[1])
    elseif lease[2] > latest then
      latest = lease[2]
    end
  end
  if latest == 0 then
    redis.call('DEL', key)
    return
  end
  l.until_us = latest
  R.save(key, l)
end

function R.parse_lease(s)
  return R.parse_duration(s, 'lease', MAX_PERIOD_US, '3650d')
end

commands['RL.ACQUIRE'] = function(args)
  if #args < 3 then
    R.arity('RL.ACQUIRE')
  end
  local key = args[1]
  local capacity = R.parse_count(args[2], 'capacity', 1, MAX_SEMAPHORE)
  local lease = R.parse_lease(args[3])
  local holder, deadline
  local i = 4
  while i <= #args do
    local token = args[i]
    if R.is(token, 'ID') then
      if args[i + 1] == nil then
        R.fail('ERR ID needs a value')
      end
      local h = R.parse_id(args[i + 1], 'holder')
      if holder ~= nil then
        R.fail('ERR ID given more than once')
      end
      holder = h
    elseif R.is(token, 'DEADLINE') then
      deadline = R.take_deadline(args, i, deadline)
    else
      R.fail('ERR syntax error near \'' .. R.printable(token) .. '\'')
    end
    i = i + 2
  end
  R.check_key(key, 1)
  local rule = { algo = 'semaphore', limit = capacity, period = lease, burst = capacity }
  local now = R.now_us()
  R.check_deadline(deadline, now)
  local l = R.load_semaphore(key, rule)
  local live, earliest, held = 0, nil, nil
  for i, ls in ipairs(l.leases) do
    if ls[2] > now then
      live = live + 1
      if earliest == nil or ls[2] < earliest then
        earliest = ls[2]
      end
      if ls[1] == holder then
        held = i
      end
    end
  end
  if not held and live >= capacity then
    return { 0, holder or false, live, R.ms_up(earliest and earliest - now or 0) }
  end
  if holder == nil then
    holder = format('%x-%x', now, l.seq)
  end
  local expiry = now + lease
  redis.call('HSET', key, 'h:' .. holder, R.int(expiry))
  if held then
    l.leases[held][2] = expiry
  else
    l.leases[#l.leases + 1] = { holder, expiry }
    l.seq = l.seq + 1
    live = live + 1
  end
  l.rule = rule
  R.save_semaphore(key, l, now)
  return { 1, holder, live, 0 }
end

-- RL.RELEASE (lease nil) and RL.RENEW: 1 when the holder held a live lease.
function R.change_lease(key, holder, lease)
  local l = R.load_semaphore(key, nil)
  if l == nil then
    return 0
  end
  local now = R.now_us()
  local held
  for i, ls in ipairs(l.leases) do
    if ls[1] == holder and ls[2] > now then
      held = i
    end
  end
  if not held then
    return 0
  end
  if lease == nil then
    redis.call('HDEL', key, 'h:' .. holder)
    table.remove(l.leases, held)
  else
    l.leases[held][2] = now + lease
    redis.call('HSET', key, 'h:' .. holder, R.int(now + lease))
  end
  R.save_semaphore(key, l, now)
  return 1
end

commands['RL.RELEASE'] = function(args)
  if #args ~= 2 then
    R.arity('RL.RELEASE')
  end
  local holder = R.parse_id(args[2], 'holder')
  R.check_key(args[1], 1)
  return R.change_lease(args[1], holder, nil)
end

commands['RL.RENEW'] = function(args)
  if #args ~= 3 then
    R.arity('RL.RENEW')
  end
  local holder = R.parse_id(args[2], 'holder')
  local lease = R.parse_lease(args[3])
  R.check_key(args[1], 1)
  return R.change_lease(args[1], holder, lease)
end

---------------------------------------------------------------------------------------------
-- RL.MULTI: every rule decided at one instant, all spent or none.

commands['RL.MULTI'] = function(args)
  if #args < 6 then
    R.arity('RL.MULTI')
  end
  local n = R.parse_count(args[1], 'numkeys', 1, 32)
  if #args < 1 + n then
    R.arity('RL.MULTI')
  end
  local keys = {}
  for i = 1, n do
    keys[i] = args[1 + i]
  end
  for i = 1, n do
    for j = i + 1, n do
      if keys[i] == keys[j] then
        R.fail('ERR key \'' .. R.printable(keys[i]) .. '\' given more than once')
      end
    end
  end
  local rules, dry, deadline = {}, false, nil
  local i = n + 2
  while i <= #args do
    local token = args[i]
    if R.is(token, 'DRYRUN') then
      if dry then
        R.fail('ERR DRYRUN given more than once')
      end
      dry = true
      i = i + 1
    elseif R.is(token, 'DEADLINE') then
      deadline = R.take_deadline(args, i, deadline)
      i = i + 2
    elseif not R.is(token, 'RULE') then
      R.fail('ERR syntax error near \'' .. R.printable(token) .. '\'')
    else
      local rname, limit, period = args[i + 1], args[i + 2], args[i + 3]
      if period == nil then
        R.fail('ERR RULE needs a name, a limit and a period')
      end
      i = i + 4
      local opts = {}
      while i <= #args do
        local taken = R.take_rule_option(opts, args, i)
        if taken == 0 then
          break
        end
        i = i + taken
      end
      local rule, cost = R.build_rule(opts, limit, period)
      rules[#rules + 1] = { name = rname, rule = rule, cost = cost }
    end
  end
  if #rules ~= n then
    R.fail('ERR numkeys is ' .. R.int(n) .. ' but ' .. R.int(#rules) .. ' RULE clauses were given')
  end
  for k = 1, n do
    R.check_key(keys[k], k)
  end
  local now = R.now_us()
  R.check_deadline(deadline, now)
  local limiters = {}
  for k = 1, n do
    limiters[k] = R.load(keys[k]) or R.fresh(rules[k].rule)
  end
  local decisions, spends, allowed = {}, {}, true
  for k = 1, n do
    decisions[k], spends[k] = R.decide(limiters[k], rules[k].rule, rules[k].cost, now)
    allowed = allowed and decisions[k].allowed
  end
  if allowed and not dry then
    for k = 1, n do
      spends[k]()
      R.save(keys[k], limiters[k])
    end
  end
  local denied_by, retry, records = false, 0, {}
  for k = 1, n do
    local d = decisions[k]
    if not d.allowed then
      denied_by = denied_by or rules[k].name
      retry = math.max(retry, R.ms_up(d.retry))
    end
    records[k] = { rules[k].name, d.remaining, R.ms_up(d.reset) }
  end
  return { allowed and 1 or 0, denied_by, retry, records }
end

---------------------------------------------------------------------------------------------
-- RL.ALLOCATE: the home store's allocation of a global rule's limit across regions
-- (core/src/allocate.rs). The key is a plain hash in the module's very layout: field
-- '<region> <reporter>', value '<demand> <seen_ms> <granted> <held>'. Every quantity is exact:
-- demands are at most 10^12 and a key keeps at most 256 reporters, so every sum of demands is
-- below 2^51; limits, grants and holds are at most 10^15; the sum of the other regions' worst is
-- capped at the limit (past it the allocation is 0 either way); the proportional share is
-- divided by muldiv.

local MAX_DEMAND = 1000000000000
local MAX_SEEN_MS = 9007199254740991
local MAX_REGIONS = 64
local MAX_REPORTERS = 256
local FORGET_LEASES = 10
local FLOOR_DIVISOR = 20

function R.valid_name(s)
  return #s >= 1 and #s <= 64 and not s:find('[^A-Za-z0-9_.:%-]')
end

-- A record's number: decimal digits only, at most max (as Reporter::decode reads it).
function R.record_number(s, max)
  if s == '' or s:find('[^0-9]') then
    return nil
  end
  local v = tonumber(s)
  if v > max then
    return nil
  end
  return v
end

function R.decode_reporter(f, v)
  local space = f:find(' ', 1, true)
  if space == nil then
    return nil
  end
  local region, id = f:sub(1, space - 1), f:sub(space + 1)
  if not R.valid_name(region) or not R.valid_name(id) then
    return nil
  end
  local d, s, g, h = v:match('^([^ ]*) ([^ ]*) ([^ ]*) ([^ ]*)$')
  if d == nil then
    return nil
  end
  local r = { field = f, region = region, demand = R.record_number(d, MAX_DEMAND),
    seen = R.record_number(s, MAX_SEEN_MS), granted = R.record_number(g, MAX_COUNT),
    held = R.record_number(h, MAX_COUNT) }
  if r.demand == nil or r.seen == nil or r.granted == nil or r.held == nil then
    return nil
  end
  return r
end

function R.parse_allocate(args)
  if #args < 6 then
    R.arity('RL.ALLOCATE')
  end
  local limit = R.parse_count(args[2], 'limit', 1, MAX_COUNT)
  local region, reporter = args[3], args[4]
  local name_error = ' must be 1 to 64 bytes of letters, digits, \'-\', \'_\', \'.\' and \':\''
  if not R.valid_name(region) then
    R.fail('ERR region' .. name_error)
  end
  if not R.valid_name(reporter) then
    R.fail('ERR reporter' .. name_error)
  end
  local t = { limit = limit, region = region, reporter = reporter,
    demand = R.parse_count(args[5], 'demand', 0, MAX_DEMAND),
    held = R.parse_count(args[6], 'held', 0, MAX_COUNT) }
  local i = 7
  while i <= #args do
    local token, v = args[i], args[i + 1]
    local name, n
    if R.is(token, 'RESERVE') then
      name = 'RESERVE'
    elseif R.is(token, 'REGIONS') then
      name = 'REGIONS'
    elseif R.is(token, 'LEASE') then
      name = 'LEASE'
    else
      R.fail('ERR syntax error near \'' .. R.printable(token) .. '\'')
    end
    if v == nil then
      R.fail('ERR ' .. name .. ' needs a value')
    end
    if name == 'RESERVE' then
      n = R.parse_count(v, name, 0, limit - 1)
    elseif name == 'REGIONS' then
      n = R.parse_count(v, name, 1, MAX_REGIONS)
    else
      n = R.parse_duration(v, name, D, '1d') / MS
    end
    if t[name] ~= nil then
      R.fail('ERR ' .. name .. ' given more than once')
    end
    t[name] = n
    i = i + 2
  end
  t.reserve, t.regions, t.lease = t.RESERVE or 0, t.REGIONS or 1, t.LEASE or 10000
  return t
end

commands['RL.ALLOCATE'] = function(args)
  local t = R.parse_allocate(args)
  local key = args[1]
  R.check_key(key, 1)
  local all = redis.pcall('HGETALL', key)
  if all.err then
    R.fail(WRONGTYPE)
  end
  local records = {}
  for i = 1, #all, 2 do
    local r = R.decode_reporter(all[i], all[i + 1])
    if r == nil then
      R.fail('ERR key holds a hash that is not an allocation record: use another key, or DEL this one')
    end
    records[#records + 1] = r
  end
  local now = R.divmod(R.now_us(), MS)
  local pool = t.limit - t.reserve
  local safe = R.divmod(pool, t.regions)
  local forget = t.lease * FORGET_LEASES
  local own = t.region .. ' ' .. t.reporter
  -- The reporter's own record is replaced, never counted; the forgotten are deleted.
  local forgotten, kept = {}, {}
  for _, r in ipairs(records) do
    if r.field ~= own then
      if math.max(now - r.seen, 0) >= forget then
        forgotten[#forgotten + 1] = r.field
      else
        kept[#kept + 1] = r
      end
    end
  end
  if #kept >= MAX_REPORTERS then
    R.fail('ERR the key keeps 256 reporters already: a new one is refused until one is forgotten')
  end
  -- Per region (the reporter's own first): its live demand and its worst.
  local regions, index = { { demand = t.demand, worst = 0 } }, { [t.region] = 1 }
  local last_seen = now
  for _, r in ipairs(kept) do
    local age = math.max(now - r.seen, 0)
    -- While the lease runs, what it held too: its answer may have been lost.
    local demand, worst = 0, math.max(r.granted, r.held)
    if age < t.lease then
      demand = r.demand
    else
      worst = math.min(math.max(r.granted, r.held), safe)
    end
    local at = index[r.region]
    if at == nil then
      regions[#regions + 1] = { demand = demand, worst = worst }
      index[r.region] = #regions
    else
      local e = regions[at]
      e.demand, e.worst = e.demand + demand, math.max(e.worst, worst)
    end
    last_seen = math.max(last_seen, r.seen)
  end
  local declared = math.max(t.regions, #regions)
  local fl = R.divmod(pool, FLOOR_DIVISOR * declared)
  local others = math.min((declared - #regions) * fl, t.limit)
  local total = 0
  for i, e in ipairs(regions) do
    if i > 1 then
      others = math.min(others + math.max(e.worst, fl), t.limit)
    end
    total = total + e.demand
  end
  local region_demand = regions[1].demand
  local target
  if total == 0 then
    target = R.divmod(pool, declared)
  else
    target = fl + R.muldiv(pool - fl * declared, region_demand, total)
  end
  local allocation = math.min(target, t.limit - others)
  redis.call('HSET', key, own, R.int(t.demand) .. ' ' .. R.int(now) .. ' ' .. R.int(allocation)
    .. ' ' .. R.int(t.held))
  if #forgotten > 0 then
    redis.call('HDEL', key, unpack(forgotten))
  end
  redis.call('PEXPIREAT', key, R.int(last_seen + forget))
  return { allocation, t.lease, region_demand, total }
end

---------------------------------------------------------------------------------------------
-- RL.INFO: a flat name/value array, as the module replies in RESP2.

commands['RL.INFO'] = function(args)
  if #args ~= 1 then
    R.arity('RL.INFO')
  end
  local key = args[1]
  R.check_key(key, 1)
  local l = R.load(key)
  if l == nil then
    return false
  end
  local now = R.now_us()
  local rule, a = l.rule, l.algo
  local all = redis.call('HGETALL', key)
  local stored, live, leases_live, next_expiry = false, 0, 0, nil
  l.leases = {}
  for i = 1, #all, 2 do
    local f, v = all[i]:sub(1, 2), all[i + 1]
    if f == 'r:' then
      stored = true
      if tonumber(v:match('^%d+')) > now then
        live = live + 1
      end
    elseif f == 'h:' then
      local e = tonumber(v)
      l.leases[#l.leases + 1] = { all[i]:sub(3), e }
      if e > now then
        leases_live = leases_live + 1
        if next_expiry == nil or e < next_expiry then
          next_expiry = e
        end
      end
    end
  end
  local remaining, reset
  if a == 'semaphore' then
    local latest = 0
    for _, ls in ipairs(l.leases) do
      latest = math.max(latest, ls[2])
    end
    remaining = math.max(rule.limit - leases_live, 0)
    reset = math.max(latest - now, 0)
  else
    local d = R.decide(l, rule, 0, now)
    remaining, reset = d.remaining, d.reset
  end
  local out = { 'algo', a, 'limit', rule.limit, 'period_ms', floor(rule.period / MS),
    'capacity', rule.burst, 'remaining', remaining, 'reset_after_ms', R.ms_up(reset) }
  local function add(name, v)
    out[#out + 1] = name
    out[#out + 1] = v
  end
  if a == 'gcra' then
    add('tat_us', R.gcra_full_at(l.tq, l.tf))
  elseif a == 'bucket' then
    add('tokens', l.w)
    add('updated_us', l.u)
  elseif a == 'window' then
    add('window_start_ms', floor(l.start / MS))
    add('count', l.count)
  elseif a == 'sliding' then
    local at = math.max(now, l.start)
    local s = R.window_start(at, rule.period)
    local prev, cur = 0, 0
    if l.start == s then
      prev, cur = l.prev, l.cur
    elseif l.start + rule.period == s then
      prev = l.cur
    end
    add('window_start_ms', floor(s / MS))
    add('previous', prev)
    add('current', cur)
  elseif a == 'log' then
    local newest = l.entries[#l.entries]
    local at = math.max(now, newest and newest[1] or 0)
    local n, units = 0, 0
    for _, e in ipairs(l.entries) do
      if e[1] + rule.period > at then
        n, units = n + 1, units + e[2]
      end
    end
    add('entries', n)
    add('logged_units', units)
  else
    add('in_flight', leases_live)
    add('next_expiry_ms', next_expiry and R.ms_up(next_expiry - now) or 0)
  end
  if stored then
    add('reservations', live)
  end
  if FAMILY[a] == 'rate' then
    local w = R.level_at(l, math.max(now, R.time_floor(l)))
    add('debt', w < 0 and -w or 0)
  end
  add('ttl_ms', redis.call('PTTL', key))
  return out
end

---------------------------------------------------------------------------------------------
-- Entry point.

local name = ARGV[1]
local args = {}
for i = 2, #ARGV do
  args[i - 1] = ARGV[i]
end
local command = name and commands[name:upper()]
if command == nil then
  return redis.error_reply('ERR unknown command \'' .. R.printable(name or '') .. '\' for rl.lua')
end
local ok, result = pcall(command, args)
if ok then
  return result
end
if type(result) == 'table' then
  return redis.error_reply(result[1])
end
error(result, 0)
