-- Tasks per status (PENDING, IN_FLIGHT, SUCCEEDED, DEAD), then 1 when the
-- queue has a stored policy (KEYS[12]).
return {
  redis.call('ZCARD', IDS['0']), redis.call('ZCARD', IDS['1']),
  redis.call('ZCARD', IDS['2']), redis.call('ZCARD', IDS['3']),
  redis.call('EXISTS', KEYS[12]),
}
