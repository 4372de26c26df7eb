-- Fires a schedule: what runs before submit.lua's text in the fire script
-- (common.lua, this, submit.lua), so a fire's tasks are stored exactly as a
-- submit stores them, in the same script as the cursor's compare-and-swap.
-- KEYS[16] is the schedule's record, under the queue's hash tag. ARGV: the
-- expected cursor ('' for none), the new cursor, now (ms), the number of
-- skip counts, that many (reason, count) pairs, then submit.lua's six per
-- task. Answers {'R'} when the record is gone, moved to another queue or
-- holds another cursor (nothing changed); else submit.lua's answer.
local SCHED = KEYS[16]
if redis.call('EXISTS', SCHED) == 0 or redis.call('HEXISTS', SCHED, 'moved') == 1 then
  return { 'R' }
end
if (redis.call('HGET', SCHED, 'cursor') or '') ~= ARGV[1] then
  return { 'R' }
end
redis.call('HSET', SCHED, 'cursor', ARGV[2])
local now, nskips = ARGV[3], tonumber(ARGV[4])
for i = 5, 4 + 2 * nskips, 2 do
  redis.call('HINCRBY', SCHED, 'skip:' .. ARGV[i], ARGV[i + 1])
end
-- Shift the tasks' arguments to the front, where submit.lua reads them.
local shift, total = 4 + 2 * nskips, #ARGV
for i = 1, total - shift do ARGV[i] = ARGV[i + shift] end
for i = total, total - shift + 1, -1 do ARGV[i] = nil end
-- Which task each fire will be (submit.lua's rule: a key whose task is
-- still stored gives back that task), counted and recorded now.
local created, last = 0, nil
for i = 1, #ARGV, 6 do
  local id, key_arg = ARGV[i], ARGV[i + 1]
  local holder = nil
  if string.sub(key_arg, 1, 1) == '+' then
    local first = redis.call('HGET', BY_KEY, string.sub(key_arg, 2))
    if first and value(first) then holder = first end
  end
  if holder then last = holder else created = created + 1; last = id end
end
if last then
  redis.call('HSET', SCHED, 'task', last, 'fire_at', now)
end
redis.call('HINCRBY', SCHED, 'fires', created)
