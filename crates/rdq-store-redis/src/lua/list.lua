-- One page of a queue's tasks by id. ARGV: the statuses to list (digits,
-- e.g. '3' or '0123'), the cursor ('' for none: start at the end), the
-- limit, and the order ('a' ascending, 'd' descending). Answers id and
-- stored value pairs, in order.
local statuses, cursor, limit, asc = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == 'a'
local ids = {}
for k = 1, #statuses do
  local key = IDS[string.sub(statuses, k, k)]
  local got
  if asc then
    got = redis.call('ZRANGEBYLEX', key, cursor == '' and '-' or '(' .. cursor, '+', 'LIMIT', 0, limit)
  else
    got = redis.call('ZREVRANGEBYLEX', key, cursor == '' and '+' or '(' .. cursor, '-', 'LIMIT', 0, limit)
  end
  for _, id in ipairs(got) do ids[#ids + 1] = id end
end
if #statuses > 1 then
  if asc then
    table.sort(ids)
  else
    table.sort(ids, function(a, b) return a > b end)
  end
end
local out = {}
for n = 1, math.min(limit, #ids) do
  local v = redis.call('HGET', TASKS, ids[n])
  if v then
    out[#out + 1] = ids[n]
    out[#out + 1] = v
  end
end
return out
