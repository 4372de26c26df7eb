-- Claims up to `max` due PENDING tasks, highest priority first, then
-- earliest due, then oldest id. ARGV: now, lease until, max, how many
-- delayed tasks that have come due to move into the ready set first, and
-- the global concurrency limit (-1: none): with one, at most the room the
-- queue's IN_FLIGHT tasks leave is claimed, decided in this atomic step.
-- Marks each task IN_FLIGHT under a new claim count and lease (the stored
-- envelope stays PENDING; rdq replays the claim on it) and answers the
-- claimed tasks' stored values.
local now, until_ms = tonumber(ARGV[1]), ARGV[2]
-- A task whose claim count is at its maximum can never be claimed again.
local MAX_COUNT = '4294967295'
local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[4]))
if #due > 0 then
  -- Moved now, not at flush: the pop below must see them.
  local moved, ready = every(due, 1, 2), {}
  prefetch(moved)
  for i = 1, #due, 2 do
    local id, at = due[i], tonumber(due[i + 1])
    local v = value(id)
    if v then
      local _, _, p = meta(v)
      ready[#ready + 1] = (255 - tonumber(p)) * SPAN + math.max(at, 0)
      ready[#ready + 1] = id
    end
  end
  call_chunked('ZREM', DELAYED, moved)
  call_chunked('ZADD', READY, ready)
end
local out = {}
local max = tonumber(ARGV[3])
local limit = tonumber(ARGV[5])
if limit >= 0 then
  max = math.min(max, limit - redis.call('ZCARD', IDS['1']))
  if max <= 0 then
    flush()
    return out
  end
end
local popped = redis.call('ZPOPMIN', READY, max)
prefetch(every(popped, 1, 2))
for i = 1, #popped, 2 do
  local id = popped[i]
  local at = tonumber(popped[i + 1]) % SPAN
  local v = value(id)
  if v then
    local s, c, p, brace = meta(v)
    if s == '0' and c ~= MAX_COUNT then
      if at > now then
        -- Written as due by a clock ahead of this claimer's: wait for it.
        zop(DELAYED, id, at)
      else
        local claimed = '1,' .. (tonumber(c) + 1) .. ',' .. p .. ',' .. ARGV[1] .. ',' .. until_ms .. string.sub(v, brace)
        write(id, claimed)
        zop(IDS['0'], id, false)
        zop(IDS['1'], id, 0)
        zop(LEASES, id, until_ms)
        out[#out + 1] = claimed
      end
    end
  end
end
flush()
return out
