-- What every rdq script shares: the keys of one queue, the stored value's
-- layout and the index bookkeeping (see docs/stores/redis.md).
--
-- A task is one field of the queue's task hash: "S,C,P,CA,L,K" followed by
-- its canonical envelope JSON (which starts with '{'). S is the status
-- (0 PENDING, 1 IN_FLIGHT, 2 SUCCEEDED, 3 DEAD), C the claim count (the
-- lease token), P the priority, K the flow key ('' for none; absent in
-- values written before flow keys); CA and L are set only by a claim made
-- here (claimed at, lease until, unix ms), which leaves the PENDING
-- envelope as it was: rdq replays the claim on it when it reads the task.
local TASKS, READY, DELAYED, LEASES, DONE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local IDS = { ['0'] = KEYS[6], ['1'] = KEYS[7], ['2'] = KEYS[8], ['3'] = KEYS[9] }
local BY_KEY, KEY_OF = KEYS[10], KEYS[11]
-- Flow control: the flow keys with ready tasks (a set), the IN_FLIGHT
-- count per flow key (a hash; keyed tasks only), the ledger (a hash).
local FKEYS, FIF, FLOW = KEYS[13], KEYS[14], KEYS[15]
local PLACES = { r = READY, d = DELAYED, l = LEASES, f = DONE }
-- Ready scores are (255 - priority) * 2^44 + due ms: priority first, then due.
local SPAN = 17592186044416
-- The queue's hash tag with its ':' ("{prefix:queue}:").
local TAG = string.sub(TASKS, 1, -6)

-- The ready set of flow key `key`: that key's tasks of the ready set, with
-- the same scores, kept only for tasks with a key.
local function FR(key)
  return TAG .. 'fr:' .. key
end

-- The status, claim count and priority of a stored value, where its
-- envelope starts, and its flow key.
local function meta(v)
  local s, c, p = string.match(v, '^(%d),(%d+),(%d+),')
  local brace = string.find(v, '{', 1, true)
  local key = ''
  if brace then
    key = string.match(string.sub(v, 1, brace - 1), '^[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,(.*)$') or ''
  end
  return s, c, p, brace, key
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
local fr_keys = {}  -- flow keys whose ready set changed
local fif = {}      -- flow key -> change of its IN_FLIGHT count

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

-- Adds `id` to (score) or removes it from (false) flow key `key`'s ready
-- set at `flush`; nothing for a task without a key.
local function frop(key, id, score)
  if key ~= '' then
    zop(FR(key), id, score)
    fr_keys[key] = true
  end
end

-- Counts a task of flow key `key` into (1) or out of (-1) IN_FLIGHT at
-- `flush`; nothing for a task without a key (those are the rest of the
-- IN_FLIGHT set).
local function count_in_flight(key, d)
  if key ~= '' then fif[key] = (fif[key] or 0) + d end
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
  for key in pairs(fr_keys) do
    if redis.call('EXISTS', FR(key)) == 1 then
      redis.call('SADD', FKEYS, key)
    else
      redis.call('SREM', FKEYS, key)
    end
  end
  for key, d in pairs(fif) do
    if d ~= 0 and redis.call('HINCRBY', FIF, key, d) <= 0 then
      redis.call('HDEL', FIF, key)
    end
  end
  cached, dirty, zsets, fr_keys, fif = {}, {}, {}, {}, {}
end

-- Takes a task of flow key `key` out of the indexes of status s.
local function unplace(id, s, key)
  if s == '0' then
    zop(READY, id, false)
    zop(DELAYED, id, false)
    frop(key, id, false)
  elseif s == '1' then
    zop(LEASES, id, false)
    count_in_flight(key, -1)
  elseif s == '2' then
    zop(DONE, id, false)
  end
  local ids = IDS[s]
  if ids then zop(ids, id, false) end
end

-- Puts a task of flow key `key` into the indexes of status s: the status's
-- id set, and the scored set `kind` names (r ready, d delayed, l leases,
-- f done, - none); a ready task goes into its key's ready set too.
local function place(id, s, kind, score, key)
  zop(IDS[s], id, 0)
  local zset = PLACES[kind]
  if zset then zop(zset, id, score) end
  if kind == 'r' then frop(key, id, score) end
  if s == '1' then count_in_flight(key, 1) end
end

-- The flow key of a stored value.
local function key_of(v)
  local _, _, _, _, key = meta(v)
  return key
end

-- Moves up to `limit` delayed tasks due at `now` (unix ms, a string) into
-- the ready set and their keys' ready sets, at once (not at flush: what
-- follows in the script must see them).
local function promote(now, limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  if #due == 0 then return end
  local moved, ready, by_key = every(due, 1, 2), {}, {}
  prefetch(moved)
  for i = 1, #due, 2 do
    local id, at = due[i], tonumber(due[i + 1])
    local v = value(id)
    if v then
      local _, _, p, _, key = meta(v)
      local score = (255 - tonumber(p)) * SPAN + math.max(at, 0)
      ready[#ready + 1] = score
      ready[#ready + 1] = id
      if key ~= '' then
        local list = by_key[key]
        if not list then
          list = {}
          by_key[key] = list
        end
        list[#list + 1] = score
        list[#list + 1] = id
      end
    end
  end
  call_chunked('ZREM', DELAYED, moved)
  call_chunked('ZADD', READY, ready)
  for key, list in pairs(by_key) do
    call_chunked('ZADD', FR(key), list)
    redis.call('SADD', FKEYS, key)
  end
end

-- Removes a task with its indexes and idempotency key; false if absent.
local function remove(id)
  local v = value(id)
  if not v then return false end
  unplace(id, string.sub(v, 1, 1), key_of(v))
  write(id, false)
  local key = redis.call('HGET', KEY_OF, id)
  if key then
    if redis.call('HGET', BY_KEY, key) == id then redis.call('HDEL', BY_KEY, key) end
    redis.call('HDEL', KEY_OF, id)
  end
  return true
end

-- A task whose claim count is at its maximum can never be claimed again.
local MAX_COUNT = '4294967295'

-- Claims the task `id` with stored value `v`, taken out of the ready set,
-- that was due at `at` (unix ms): marks it IN_FLIGHT under a new claim
-- count and a lease until `until_ms` (a string) at `now` (a number; `now_s`
-- the same as a string). Answers the claimed value, or nil when the task
-- is not claimable (a task due later goes back to the delayed set).
local function claim_value(v, id, at, now, now_s, until_ms)
  local s, c, p, brace, key = meta(v)
  if s ~= '0' or c == MAX_COUNT then return nil end
  if at > now then
    -- Written as due by a clock ahead of this claimer's: wait for it.
    zop(DELAYED, id, at)
    return nil
  end
  local claimed = '1,' .. (tonumber(c) + 1) .. ',' .. p .. ',' .. now_s .. ',' .. until_ms .. ',' .. key .. string.sub(v, brace)
  write(id, claimed)
  zop(IDS['0'], id, false)
  zop(IDS['1'], id, 0)
  zop(LEASES, id, until_ms)
  count_in_flight(key, 1)
  return claimed
end
