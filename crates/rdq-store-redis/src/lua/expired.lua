-- Up to ARGV[2] IN_FLIGHT tasks whose lease ended at or before ARGV[1]
-- (unix ms), earliest first: their stored values.
local ids = redis.call('ZRANGEBYSCORE', LEASES, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
prefetch(ids)
local out = {}
for _, id in ipairs(ids) do
  local v = value(id)
  if v then out[#out + 1] = v end
end
return out
