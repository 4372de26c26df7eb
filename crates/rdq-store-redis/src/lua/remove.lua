-- Removes tasks with their indexes and keys; answers the removed ids.
-- ARGV: 'ids' and the ids (delete); 'status', a status and a limit (purge,
-- one batch); 'finished', a cutoff (exclusive, unix ms) and a limit
-- (pruning SUCCEEDED tasks, earliest finished first).
local mode = ARGV[1]
local ids
if mode == 'ids' then
  ids = every(ARGV, 2, 1)
elseif mode == 'status' then
  ids = redis.call('ZRANGE', IDS[ARGV[2]], 0, tonumber(ARGV[3]) - 1)
else
  ids = redis.call('ZRANGEBYSCORE', DONE, '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
end
prefetch(ids)
local out = {}
for _, id in ipairs(ids) do
  if remove(id) then out[#out + 1] = id end
end
flush()
return out
