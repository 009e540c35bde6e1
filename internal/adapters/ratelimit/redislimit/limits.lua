-- One provider's rate limits, shared by every controller on this Redis. Times are the server's, in
-- microseconds. KEYS: the window (a sorted set of call ids by time), the tokens of each member of the
-- window (a hash), the concurrency slots (a sorted set of call ids by the end of their lease), the
-- block until which the provider said no call goes, and the sum of the window's tokens. ARGV:
-- requests per window, tokens per window, concurrency (0 for no limit), window and lease in
-- microseconds, then the operation's own.
local window_key, tokens_key, slots_key, block_key, sum_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local span, lease = tonumber(ARGV[4]), tonumber(ARGV[5])

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Drop what left the window, and the slots whose lease ended (their controller died).
local function prune(now)
  local old = redis.call('ZRANGEBYSCORE', window_key, '-inf', now - span)
  if #old > 0 then
    redis.call('ZREMRANGEBYSCORE', window_key, '-inf', now - span)
    local gone = 0
    for i = 1, #old, 1000 do
      local chunk = {unpack(old, i, math.min(i + 999, #old))}
      for _, v in ipairs(redis.call('HMGET', tokens_key, unpack(chunk))) do
        gone = gone + (tonumber(v) or 0)
      end
      redis.call('HDEL', tokens_key, unpack(chunk))
    end
    redis.call('DECRBY', sum_key, gone)
  end
  redis.call('ZREMRANGEBYSCORE', slots_key, '-inf', now)
end

local function spent()
  return math.max(tonumber(redis.call('GET', sum_key) or '0'), 0)
end

-- Whether a call of est tokens fits now: '' and 0, or the spent limit and when to ask again.
local function room(now, est, n, tok, inflight)
  local blocked = tonumber(redis.call('GET', block_key) or '0')
  if blocked > now then
    return 'upstream', blocked - now
  end
  if conc > 0 and inflight >= conc then
    local first = redis.call('ZRANGE', slots_key, 0, 0, 'WITHSCORES')
    return 'concurrency', tonumber(first[2]) - now
  end
  if rpm > 0 and n >= rpm then
    local e = redis.call('ZRANGE', window_key, n - rpm, n - rpm, 'WITHSCORES')
    return 'requests', tonumber(e[2]) + span - now
  end
  if tpm > 0 and tok + est > tpm then
    local need = tok + est - tpm
    local members = redis.call('ZRANGE', window_key, 0, -1, 'WITHSCORES')
    for i = 1, #members, 2 do
      need = need - tonumber(redis.call('HGET', tokens_key, members[i]) or '0')
      if need <= 0 then
        return 'tokens', tonumber(members[i + 1]) + span - now
      end
    end
    return 'tokens', span
  end
  return '', 0
end

-- The usage every operation answers with: requests, tokens, calls in flight, the block, and when
-- there is room for one more call.
local function state(now)
  local n, tok, inflight = redis.call('ZCARD', window_key), spent(), redis.call('ZCARD', slots_key)
  local blocked = math.max(tonumber(redis.call('GET', block_key) or '0') - now, 0)
  local reason, wait = room(now, 0, n, tok, inflight)
  if reason == 'concurrency' then
    wait = 0
  end
  return n, tok, inflight, blocked, math.max(wait, 0)
end

local function keep()
  local ttl = math.ceil((span + lease) / 1000)
  for _, k in ipairs({window_key, tokens_key, slots_key, sum_key}) do
    redis.call('PEXPIRE', k, ttl)
  end
end

-- ARGV[6] the call's id, ARGV[7] its estimated tokens.
local function reserve()
  local id, est = ARGV[6], tonumber(ARGV[7])
  local now = clock()
  prune(now)
  local n, tok, inflight = redis.call('ZCARD', window_key), spent(), redis.call('ZCARD', slots_key)
  if redis.call('ZSCORE', slots_key, id) then -- asked twice: the first reservation stands
    return {1, '', 0, now, state(now)}
  end
  local reason, wait = room(now, est, n, tok, inflight)
  if reason ~= '' then
    return {0, reason, math.max(wait, 1), now, state(now)}
  end
  redis.call('ZADD', window_key, now, id)
  redis.call('HSET', tokens_key, id, est)
  redis.call('INCRBY', sum_key, est)
  redis.call('ZADD', slots_key, now + lease, id)
  keep()
  return {1, '', 0, now, state(now)}
end

-- ARGV[6] the call's id, ARGV[7] the tokens it used (negative: unknown, the estimate stands).
local function release()
  local id, actual = ARGV[6], tonumber(ARGV[7])
  local now = clock()
  redis.call('ZREM', slots_key, id)
  local before = redis.call('HGET', tokens_key, id)
  if actual >= 0 and before then
    redis.call('HSET', tokens_key, id, actual)
    redis.call('INCRBY', sum_key, actual - tonumber(before))
  end
  prune(now)
  return {state(now)}
end

-- ARGV[6..7] the requests and tokens the provider says remain (negative: unknown), ARGV[8..9] their
-- resets within the window, ARGV[10] how long it says no call goes, in microseconds.
local function observe()
  local remaining_requests, remaining_tokens = tonumber(ARGV[6]), tonumber(ARGV[7])
  local requests_for, tokens_for, exhausted = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
  local now = clock()
  prune(now)
  if exhausted > 0 then
    local until_ = now + exhausted
    if until_ > tonumber(redis.call('GET', block_key) or '0') then
      redis.call('SET', block_key, until_, 'PX', math.ceil(exhausted / 1000) + 1)
    end
  end
  -- When the provider has fewer left than the window counts free, its figure wins until its reset:
  -- the difference enters the window as spent, leaving it when the provider's window resets. (The
  -- tokens' entry counts as a request too: one request too few, never one too many.)
  local n, tok = redis.call('ZCARD', window_key), spent()
  if rpm > 0 and remaining_requests >= 0 and rpm - n > remaining_requests then
    for i = 1, rpm - n - remaining_requests do
      local member = '~' .. now .. ':r' .. i
      redis.call('ZADD', window_key, now - span + requests_for, member)
      redis.call('HSET', tokens_key, member, 0)
    end
  end
  if tpm > 0 and remaining_tokens >= 0 and tpm - tok > remaining_tokens then
    local member = '~' .. now .. ':t'
    redis.call('ZADD', window_key, now - span + tokens_for, member)
    redis.call('HSET', tokens_key, member, tpm - tok - remaining_tokens)
    redis.call('INCRBY', sum_key, tpm - tok - remaining_tokens)
  end
  keep()
  return {state(now)}
end

local function usage()
  local now = clock()
  prune(now)
  return {state(now)}
end

-- ARGV[6..] the calls this controller still runs: their slots' leases start again from now, so that
-- only a dead controller's slots lapse. Returns how many were still held.
local function renew()
  local now, n = clock(), 0
  for i = 6, #ARGV do
    n = n + redis.call('ZADD', slots_key, 'XX', 'CH', now + lease, ARGV[i])
  end
  keep()
  return n
end
