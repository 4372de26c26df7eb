-- Claims up to `max` due PENDING tasks, highest priority first, then
-- earliest due, then oldest id. ARGV: now, lease until, max, how many
-- delayed tasks that have come due to move into the ready set first, and
-- the global concurrency limit (-1: none): with one, at most the room the
-- queue's IN_FLIGHT tasks leave is claimed, decided in this atomic step.
-- Marks each task IN_FLIGHT under a new claim count and lease (the stored
-- envelope stays PENDING; rdq replays the claim on it) and answers the
-- claimed tasks' stored values. Flow limits are `flow.lua`'s; this claim
-- only keeps the per-key indexes up to date for tasks with a flow key.
local now = tonumber(ARGV[1])
promote(ARGV[1], tonumber(ARGV[4]))
local out = {}
local max = tonumber(ARGV[3])
local limit = tonumber(ARGV[5])
if limit >= 0 then
  max = math.min(max, limit - redis.call('ZCARD', IDS['1']))
  if max <= 0 then
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
    local key = key_of(v)
    -- Popped from the ready set: out of its key's ready set too.
    frop(key, id, false)
    local claimed = claim_value(v, id, at, now, ARGV[1], ARGV[2])
    if claimed then out[#out + 1] = claimed end
  end
end
flush()
return out
