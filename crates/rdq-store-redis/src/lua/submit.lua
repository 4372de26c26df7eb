-- Stores new tasks. ARGV, six per task: id, idempotency key ('-' for none,
-- '+' and the key otherwise), stored value, status, place kind, score.
-- Answers two per task: 'C' and '' (created), 'E' and the original's value
-- (the key was taken), or 'D' and the stored value (the id was taken).
prefetch(every(ARGV, 1, 6))
local out = {}
for i = 1, #ARGV, 6 do
  local id, key_arg = ARGV[i], ARGV[i + 1]
  local keyed = string.sub(key_arg, 1, 1) == '+'
  local key = string.sub(key_arg, 2)
  local answered = false
  if keyed then
    local first = redis.call('HGET', BY_KEY, key)
    if first then
      local original = value(first)
      if original then
        out[#out + 1] = 'E'
        out[#out + 1] = original
        answered = true
      end
    end
  end
  if not answered then
    local current = value(id)
    if current then
      out[#out + 1] = 'D'
      out[#out + 1] = current
    else
      write(id, ARGV[i + 2])
      place(id, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], key_of(ARGV[i + 2]))
      if keyed then
        redis.call('HSET', BY_KEY, key, id)
        redis.call('HSET', KEY_OF, id, key)
      end
      out[#out + 1] = 'C'
      out[#out + 1] = ''
    end
  end
end
flush()
return out
