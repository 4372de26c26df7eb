-- A claim under flow limits (rates, per-key concurrency, fairness), as an
-- optimistic transaction around rdq's one selection algorithm,
-- `FlowLedger::select`, which runs in the claiming process (see
-- `src/flow.rs` for why).
--
-- ARGV: now, lease until, max, how many delayed tasks that have come due to
-- move into the ready set first, the global concurrency limit (-1: none),
-- the ledger version the choice was made on ('' to only read), the new
-- ledger (JSON), '1' when the claim was cut short by flow limits (else
-- '0'), then the chosen ids.
--
-- With a version that is still the ledger's, and every chosen task still a
-- due PENDING task of the ready set within the global limit's room, claims
-- them, stores the ledger, bumps its version and answers 'K' and the
-- claimed values. Otherwise (or when only reading) changes nothing but due
-- delayed tasks and answers a snapshot to choose from: 'S', the version,
-- the ledger ('' when none), the room, then per flow key with due ready
-- tasks: the key ('' for tasks without one), its IN_FLIGHT count, the
-- number n of its candidates, and n pairs of id and ready score, the first
-- `room` of the key's ready tasks in claim order.
local now, now_s, until_ms = tonumber(ARGV[1]), ARGV[1], ARGV[2]
local max, limit = tonumber(ARGV[3]), tonumber(ARGV[5])

-- What the global concurrency limit leaves of `max`.
local function room()
  if limit < 0 then return max end
  return math.max(0, math.min(max, limit - redis.call('ZCARD', IDS['1'])))
end

local version = redis.call('HGET', FLOW, 'v') or '0'
if ARGV[6] ~= '' and ARGV[6] == version then
  local ids = every(ARGV, 9, 1)
  local ok = #ids <= room()
  prefetch(ids)
  local ats = {}
  for i, id in ipairs(ids) do
    if not ok then break end
    local v = value(id)
    local score = redis.call('ZSCORE', READY, id)
    if not v or not score then
      ok = false
    else
      local s, c = meta(v)
      local at = tonumber(score) % SPAN
      ok = s == '0' and c ~= MAX_COUNT and at <= now
      ats[i] = at
    end
  end
  if ok then
    local out = { 'K' }
    for i, id in ipairs(ids) do
      local v = value(id)
      zop(READY, id, false)
      frop(key_of(v), id, false)
      local claimed = claim_value(v, id, ats[i], now, now_s, until_ms)
      if claimed then out[#out + 1] = claimed end
    end
    redis.call('HSET', FLOW, 'ledger', ARGV[7])
    redis.call('HINCRBY', FLOW, 'v', 1)
    if ARGV[8] == '1' then redis.call('HINCRBY', FLOW, 't', 1) end
    flush()
    return out
  end
end

promote(now_s, tonumber(ARGV[4]))
local room_now = room()
local out = { 'S', version, redis.call('HGET', FLOW, 'ledger') or '', tostring(room_now) }
if room_now == 0 then return out end

-- One group of the answer: `key`, its IN_FLIGHT count and its candidates
-- (a flat list of ids and ready scores).
local function group(key, in_flight, found)
  out[#out + 1] = key
  out[#out + 1] = tostring(in_flight)
  out[#out + 1] = tostring(#found / 2)
  for _, x in ipairs(found) do out[#out + 1] = x end
end

local keyed_in_flight = 0
for _, n in ipairs(redis.call('HVALS', FIF)) do
  keyed_in_flight = keyed_in_flight + tonumber(n)
end
local keyed_ready = 0
local flow_keys = redis.call('SMEMBERS', FKEYS)
for _, key in ipairs(flow_keys) do
  local fr = FR(key)
  keyed_ready = keyed_ready + redis.call('ZCARD', fr)
  local got = redis.call('ZRANGE', fr, 0, room_now - 1, 'WITHSCORES')
  local found = {}
  for i = 1, #got, 2 do
    -- A task written as due by a clock ahead of this claimer's waits.
    if tonumber(got[i + 1]) % SPAN <= now then
      found[#found + 1] = got[i]
      found[#found + 1] = got[i + 1]
    end
  end
  if #found > 0 then group(key, redis.call('HGET', FIF, key) or '0', found) end
end

-- Which of `ids` (ready tasks) have no flow key: with few keys, asked of
-- each key's ready set (no task is read); with many, read from the tasks.
local function unkeyed_of(ids)
  local keyed = {}
  if #flow_keys <= 16 then
    for _, key in ipairs(flow_keys) do
      local scores = redis.call('ZMSCORE', FR(key), unpack(ids))
      for i = 1, #ids do
        if scores[i] then keyed[i] = true end
      end
    end
  else
    prefetch(ids)
    for i, id in ipairs(ids) do
      local v = value(id)
      if v and key_of(v) ~= '' then keyed[i] = true end
    end
  end
  return keyed
end

-- Tasks without a flow key have no ready set of their own (a queue without
-- flow keys pays nothing for flow control): they are the ready set's tasks
-- outside every key's, found by walking the ready set in claim order past
-- keyed tasks, which stops once it has `room` of them or has seen them all.
local unkeyed = redis.call('ZCARD', READY) - keyed_ready
if unkeyed > 0 then
  local found, seen, start, step = {}, 0, 0, 256
  while #found / 2 < room_now and seen < unkeyed do
    local chunk = redis.call('ZRANGE', READY, start, start + step - 1, 'WITHSCORES')
    if #chunk == 0 then break end
    local keyed = unkeyed_of(every(chunk, 1, 2))
    for i = 1, #chunk, 2 do
      if not keyed[(i + 1) / 2] then
        seen = seen + 1
        -- A member whose task is gone (never left by rdq's scripts) is
        -- passed over rather than offered.
        if tonumber(chunk[i + 1]) % SPAN <= now and value(chunk[i]) then
          found[#found + 1] = chunk[i]
          found[#found + 1] = chunk[i + 1]
        end
        if #found / 2 >= room_now or seen >= unkeyed then break end
      end
    end
    start = start + step
  end
  if #found > 0 then
    group('', math.max(0, redis.call('ZCARD', IDS['1']) - keyed_in_flight), found)
  end
end
return out
