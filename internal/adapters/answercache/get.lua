-- Reads an answer and marks it read now (the server's clock); an answer that expired is forgotten.
-- KEYS: the sorted set of last reads, the hash of sizes, the counter of bytes. ARGV: the key, the
-- prefix of the answers' own keys.
local key = ARGV[1]
local value = redis.call('GET', ARGV[2] .. key)
if not value then
  local size = redis.call('HGET', KEYS[2], key)
  if size then
    redis.call('HDEL', KEYS[2], key)
    redis.call('ZREM', KEYS[1], key)
    redis.call('DECRBY', KEYS[3], size)
  end
  return false
end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), key)
return value
