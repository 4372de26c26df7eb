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

-- Most arguments one variadic call takes (even: pairs stay whole).
local CHUNK = 512

-- Reads and writes of a script go through a cache: tasks read once (in bulk
-- with `prefetch`), writes kept until `flush` and then made with a few
-- variadic calls, so a batch of N costs a handful of calls rather than
-- several per task. A read sees the writes before it.
local cached = {}   -- id -> stored value, or false when absent
local dirty = {}    -- ids whose cached value must be written back
local zsets = {}    -- sorted set -> { id -> score, or false to remove }

-- Calls `cmd key args...` in chunks of CHUNK arguments.
local function call_chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end

-- Every `step`-th element of `list` from `first` on: the ids of a flat
-- answer or of an argument list.
local function every(list, first, step)
  local out = {}
  for i = first, #list, step do out[#out + 1] = list[i] end
  return out
end

-- Reads the tasks `ids` not yet cached in one call per CHUNK.
local function prefetch(ids)
  local want = {}
  for _, id in ipairs(ids) do
    if cached[id] == nil then want[#want + 1] = id end
  end
  for i = 1, #want, CHUNK do
    local last = math.min(i + CHUNK - 1, #want)
    local got = redis.call('HMGET', TASKS, unpack(want, i, last))
    for j = i, last do cached[want[j]] = got[j - i + 1] end
  end
end

-- The stored value of a task, false when absent.
local function value(id)
  local v = cached[id]
  if v == nil then
    v = redis.call('HGET', TASKS, id)
    cached[id] = v
  end
  return v
end

-- Sets a task's stored value (false removes the task) at `flush`.
local function write(id, v)
  cached[id] = v
  dirty[id] = true
end

-- Adds `id` to sorted set `key` with `score` (false: removes it) at `flush`.
local function zop(key, id, score)
  local members = zsets[key]
  if not members then
    members = {}
    zsets[key] = members
  end
  members[id] = score
end

-- Makes every deferred write; the last write of each task and member wins.
local function flush()
  local set, del = {}, {}
  for id in pairs(dirty) do
    local v = cached[id]
    if v then
      set[#set + 1] = id
      set[#set + 1] = v
    else
      del[#del + 1] = id
    end
  end
  call_chunked('HSET', TASKS, set)
  call_chunked('HDEL', TASKS, del)
  for key, members in pairs(zsets) do
    local add, rem = {}, {}
    for id, score in pairs(members) do
      if score then
        add[#add + 1] = score
        add[#add + 1] = id
      else
        rem[#rem + 1] = id
      end
    end
    call_chunked('ZREM', key, rem)
    call_chunked('ZADD', key, add)
  end
  cached, dirty, zsets = {}, {}, {}
end

-- Takes a task out of the indexes of status s.
local function unplace(id, s)
  if s == '0' then
    zop(READY, id, false)
    zop(DELAYED, id, false)
  elseif s == '1' then
    zop(LEASES, id, false)
  elseif s == '2' then
    zop(DONE, id, false)
  end
  local ids = IDS[s]
  if ids then zop(ids, id, false) end
end

-- Puts a task into the indexes of status s: the status's id set, and the
-- scored set `kind` names (r ready, d delayed, l leases, f done, - none).
local function place(id, s, kind, score)
  zop(IDS[s], id, 0)
  local zset = PLACES[kind]
  if zset then zop(zset, id, score) end
end

-- Removes a task with its indexes and idempotency key; false if absent.
local function remove(id)
  local v = value(id)
  if not v then return false end
  unplace(id, string.sub(v, 1, 1))
  write(id, false)
  local key = redis.call('HGET', KEY_OF, id)
  if key then
    if redis.call('HGET', BY_KEY, key) == id then redis.call('HDEL', BY_KEY, key) end
    redis.call('HDEL', KEY_OF, id)
  end
  return true
end
