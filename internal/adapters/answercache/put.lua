-- Keeps an answer for its time to live, then lets the least recently read answers go until the bytes
-- kept are within the bound. KEYS: the sorted set of last reads, the hash of sizes, the counter of
-- bytes. ARGV: the key, the answer, its time to live in milliseconds, the bound in bytes, the prefix
-- of the answers' own keys.
local key, value, max, prefix = ARGV[1], ARGV[2], tonumber(ARGV[4]), ARGV[5]
local size = string.len(value)
if size > max then
  return 0
end
local old = redis.call('HGET', KEYS[2], key)
if old then
  redis.call('DECRBY', KEYS[3], old)
end
redis.call('SET', prefix .. key, value, 'PX', ARGV[3])
redis.call('HSET', KEYS[2], key, size)
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), key)
local used = redis.call('INCRBY', KEYS[3], size)
while used > max do
  local oldest = redis.call('ZPOPMIN', KEYS[1])
  if #oldest == 0 then
    break
  end
  local gone = oldest[1]
  local gsize = redis.call('HGET', KEYS[2], gone)
  redis.call('HDEL', KEYS[2], gone)
  redis.call('DEL', prefix .. gone)
  if gsize then
    used = redis.call('DECRBY', KEYS[3], gsize)
  end
end
return 1
