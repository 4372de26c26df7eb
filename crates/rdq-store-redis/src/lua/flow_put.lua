-- Stores a new flow ledger (ARGV[2], JSON) made from the one of version
-- ARGV[1]: a throttle. Answers 1 when stored (the version moves on), 0 when
-- the version is no longer ARGV[1] (nothing changes; read and try again).
if (redis.call('HGET', FLOW, 'v') or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', FLOW, 'ledger', ARGV[2])
redis.call('HINCRBY', FLOW, 'v', 1)
return 1
