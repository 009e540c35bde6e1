-- Keys' budget accounts in Redis, shared by every controller (see internal/core/ledger for the rule).
-- Per key, under the hash tag {key id}: an account per budget period (a hash of spent and held, in
-- nano-dollars), the holds (a sorted set of call ids by the end of their lease, on the server's clock,
-- in microseconds) and what each hold is (a hash of call id to "<period>:<amount>"). Amounts travel as
-- decimal strings and are added with HINCRBY, exact in 64 bits; only the budget check reads them as
-- Lua numbers, exact below 2^53, which budgets and holds stay under.
--
-- KEYS[1] an account, KEYS[2] the holds, KEYS[3] the amounts. ARGV[1] is the account key without its
-- period, so a lapsed hold finds its own period's account (same hash tag, same slot).

local acct, holds, amounts = KEYS[1], KEYS[2], KEYS[3]
local base = ARGV[1]
-- Holds and amounts outlive every lease; accounts live past their period's end for late settlements.
local holds_ttl = 86400000

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- charge ends a hold: its account's held less its amount, spent plus cost (both decimal strings).
local function charge(call, cost)
  local v = redis.call('HGET', amounts, call)
  if not v then
    return false
  end
  local period, amount = string.match(v, '^(%-?%d+):(%d+)$')
  local a = base .. period
  if redis.call('EXISTS', a) == 1 then
    redis.call('HINCRBY', a, 'held', '-' .. amount)
    redis.call('HINCRBY', a, 'spent', cost or amount)
  end
  redis.call('HDEL', amounts, call)
  redis.call('ZREM', holds, call)
  return true
end

-- lapse charges the holds whose lease ended at their amount: their controller died, and whoever
-- settles its journal charges those calls at their reservation too.
local function lapse(now)
  for _, call in ipairs(redis.call('ZRANGEBYSCORE', holds, '-inf', now)) do
    if not charge(call, nil) then
      redis.call('ZREM', holds, call)
    end
  end
end

-- settle_from charges the settlements ARGV holds from i on (a count, then pairs of a call and its
-- cost): a controller sends its settlements with its key's next script. Returns how many held.
local function settle_from(i)
  local n, held = tonumber(ARGV[i] or '0'), 0
  for j = 1, n do
    if charge(ARGV[i + 2 * j - 1], ARGV[i + 2 * j]) then
      held = held + 1
    end
  end
  return held
end

local function state()
  local v = redis.call('HMGET', acct, 'spent', 'held')
  return v[1] or '0', v[2] or '0'
end

-- reserve: ARGV[2] budget, ARGV[3] call, ARGV[4] amount, ARGV[5] lease (µs), ARGV[6] period, then
-- settlements from ARGV[7]. Returns {1 held | 0 refused | -1 not open, spent, held}.
local function reserve()
  settle_from(7)
  local now = now_us()
  lapse(now)
  if redis.call('EXISTS', acct) == 0 then
    return {-1, '0', '0'}
  end
  local budget, call, amount, lease, period = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
  local spent, held = state()
  if redis.call('HEXISTS', amounts, call) == 1 then
    return {1, spent, held}
  end
  if tonumber(spent) + tonumber(held) + tonumber(amount) > tonumber(budget) then
    return {0, spent, held}
  end
  held = tostring(redis.call('HINCRBY', acct, 'held', amount))
  redis.call('ZADD', holds, now + lease, call)
  redis.call('HSET', amounts, call, period .. ':' .. amount)
  redis.call('PEXPIRE', holds, holds_ttl)
  redis.call('PEXPIRE', amounts, holds_ttl)
  return {1, spent, held}
end

-- settle: settlements from ARGV[2]. Returns how many calls held (the others' holds had lapsed, or
-- were settled already).
local function settle()
  return settle_from(2)
end

-- open: ARGV[2] spent, ARGV[3] the account's time to live (ms; 0 for none). Opens it unless it is.
local function open()
  if redis.call('HSETNX', acct, 'spent', ARGV[2]) == 1 then
    redis.call('HSETNX', acct, 'held', '0')
    if tonumber(ARGV[3]) > 0 then
      redis.call('PEXPIRE', acct, ARGV[3])
    end
  end
  return 1
end

-- renew: ARGV[2] lease (µs), ARGV[3..] the calls still running. Returns how many still held.
local function renew()
  local until_us, n = now_us() + tonumber(ARGV[2]), 0
  for i = 3, #ARGV do
    n = n + redis.call('ZADD', holds, 'XX', 'CH', until_us, ARGV[i])
  end
  redis.call('PEXPIRE', holds, holds_ttl)
  redis.call('PEXPIRE', amounts, holds_ttl)
  return n
end

-- account: settlements from ARGV[2]. Returns {open, spent, held}, after charging them and lapsed holds.
local function account()
  settle_from(2)
  lapse(now_us())
  if redis.call('EXISTS', acct) == 0 then
    return {0, '0', '0'}
  end
  local spent, held = state()
  return {1, spent, held}
end

-- add: ARGV[2] an amount spent elsewhere (counted locally while Redis was lost). Returns 1 when the
-- account is open.
local function add()
  if redis.call('EXISTS', acct) == 0 then
    return 0
  end
  redis.call('HINCRBY', acct, 'spent', ARGV[2])
  return 1
end
