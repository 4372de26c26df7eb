-- What every rdq script shares: the keys of one queue, the stored value's
-- layout and the index bookkeeping (see docs/stores/redis.md).
--
-- A task is one field of the queue's task hash: "S,C,P,CA,L" followed by
-- its canonical envelope JSON (which starts with '{'). S is the status
-- (0 PENDING, 1 IN_FLIGHT, 2 SUCCEEDED, 3 DEAD), C the claim count (the
-- lease token), P the priority; CA and L are set only by a claim made here
-- (claimed at, lease until, unix ms), which leaves the PENDING envelope as
-- it was: rdq replays the claim on it when it reads the task.
local TASKS, READY, DELAYED, LEASES, DONE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local IDS = { ['0'] = KEYS[6], ['1'] = KEYS[7], ['2'] = KEYS[8], ['3'] = KEYS[9] }
local BY_KEY, KEY_OF = KEYS[10], KEYS[11]
local PLACES = { r = READY, d = DELAYED, l = LEASES, f = DONE }
-- Ready scores are (255 - priority) * 2^44 + due ms: priority first, then due.
local SPAN = 17592186044416

-- The status, claim count and priority of a stored value, and where its
-- envelope starts.
local function meta(v)
  local s, c, p = string.match(v, '^(%d),(%d+),(%d+),')
  return s, c, p, string.find(v, '{', 1, true)
end

-- Takes a task out of the indexes of status s.
local function unplace(id, s)
  if s == '0' then
    redis.call('ZREM', READY, id)
    redis.call('ZREM', DELAYED, id)
  elseif s == '1' then
    redis.call('ZREM', LEASES, id)
  elseif s == '2' then
    redis.call('ZREM', DONE, id)
  end
  local ids = IDS[s]
  if ids then redis.call('ZREM', ids, id) end
end

-- Puts a task into the indexes of status s: the status's id set, and the
-- scored set `kind` names (r ready, d delayed, l leases, f done, - none).
local function place(id, s, kind, score)
  redis.call('ZADD', IDS[s], 0, id)
  local zset = PLACES[kind]
  if zset then redis.call('ZADD', zset, score, id) end
end

-- Removes a task with its indexes and idempotency key; false if absent.
local function remove(id)
  local v = redis.call('HGET', TASKS, id)
  if not v then return false end
  unplace(id, string.sub(v, 1, 1))
  redis.call('HDEL', TASKS, id)
  local key = redis.call('HGET', KEY_OF, id)
  if key then
    if redis.call('HGET', BY_KEY, key) == id then redis.call('HDEL', BY_KEY, key) end
    redis.call('HDEL', KEY_OF, id)
  end
  return true
end
