-- The first step of unique submits of new ids (docs/uniqueness.md): each
-- is taken to find its slot free. It runs in one MULTI after the HSET that
-- wrote the tasks' stored values, so no other client ever sees a value
-- this removes. For each submit whose slot no task names, the task takes
-- the slot and is placed; a submit whose slot a task names has its value
-- removed, to be decided on a read of the holder (lua/unique.lua).
-- The slots of one call are distinct.
--
-- Sent without lua/common.lua: it places only new PENDING tasks, as
-- common.lua's `place` does for status 0 (the id set; the ready set and
-- the flow key's ready set, or the delayed set), in a few variadic calls.
-- KEYS as common.lua's. ARGV, five per submit: slot, id, place kind ('r'
-- ready, 'd' delayed, '-' none), score, flow key ('' for none).
-- Answers one code per submit: 'C' created, 'R' the slot is named.
local TASKS, READY, DELAYED, IDS0, FKEYS = KEYS[1], KEYS[2], KEYS[3], KEYS[6], KEYS[13]
local TAG = string.sub(TASKS, 1, -6)
local UNIQ = TAG .. 'uniq'
local CHUNK = 512

local function call_chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end

local slots = {}
for i = 1, #ARGV, 5 do slots[#slots + 1] = ARGV[i] end
local named = {}
for i = 1, #slots, CHUNK do
  local last = math.min(i + CHUNK - 1, #slots)
  local got = redis.call('HMGET', UNIQ, unpack(slots, i, last))
  for j = i, last do named[slots[j]] = got[j - i + 1] end
end
local out, taken, gone, ids, ready, delayed, by_key = {}, {}, {}, {}, {}, {}, {}
for i = 1, #ARGV, 5 do
  local slot, id, kind, score, key = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if named[slot] then
    gone[#gone + 1] = id
    out[#out + 1] = 'R'
  else
    named[slot] = id
    taken[#taken + 1] = slot
    taken[#taken + 1] = id
    ids[#ids + 1] = 0
    ids[#ids + 1] = id
    if kind == 'r' then
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
    elseif kind == 'd' then
      delayed[#delayed + 1] = score
      delayed[#delayed + 1] = id
    end
    out[#out + 1] = 'C'
  end
end
call_chunked('HSET', UNIQ, taken)
call_chunked('HDEL', TASKS, gone)
call_chunked('ZADD', IDS0, ids)
call_chunked('ZADD', READY, ready)
call_chunked('ZADD', DELAYED, delayed)
for key, list in pairs(by_key) do
  call_chunked('ZADD', TAG .. 'fr:' .. key, list)
  redis.call('SADD', FKEYS, key)
end
return out
