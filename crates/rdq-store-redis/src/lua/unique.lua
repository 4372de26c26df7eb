-- Unique submits' and redrives' compare-and-swaps (docs/uniqueness.md).
-- For each, rdq read the slot's holder and its stored value, and the
-- engine decided; this applies each decision only if neither the slot nor
-- the holder changed since (an earlier one of this call included).
-- The queue's slots are a hash, TAG .. 'uniq': slot -> the id of the task
-- that took it last.
-- ARGV, ten per entry: mode ('T' the new task takes the slot; 'P' the
-- holder takes a new state; 'V' a DEAD task is redriven and takes the
-- slot), slot, the holder's id read ('' for none), its value read ('' for
-- none), then id, stored value, status, place kind, score: the new task's
-- (T), the holder's new state (P) or the redriven task's (V); last, for
-- V, the claim count the DEAD task must still have ('' otherwise).
-- Answers two per entry, {code, value}: 'C' created (V: redriven), 'P'
-- replaced, 'R' changed meanwhile (decide again), 'D' and the stored
-- value (the id is taken), 'L' (V: the task is no longer that DEAD task).
local UNIQ = TAG .. 'uniq'
-- Every slot's holder, read at once; then as this call changes them.
local slots, holders = every(ARGV, 2, 10), every(ARGV, 3, 10)
local named = {}
for i = 1, #slots, CHUNK do
  local last = math.min(i + CHUNK - 1, #slots)
  local got = redis.call('HMGET', UNIQ, unpack(slots, i, last))
  for j = i, last do named[slots[j]] = got[j - i + 1] or '' end
end
local check = {}
for i = 1, #ARGV, 10 do
  if ARGV[i] == 'T' or ARGV[i] == 'V' then check[#check + 1] = ARGV[i + 4] end
end
prefetch(check)
local read_holders = {}
for _, h in ipairs(holders) do
  if h ~= '' then read_holders[#read_holders + 1] = h end
end
prefetch(read_holders)
local out, taken = {}, {}
local function answer(code, v)
  out[#out + 1] = code
  out[#out + 1] = v
end
-- Task `id` takes `slot` with stored value `v`, placed by status, kind
-- and score.
local function take(slot, id, v, s, kind, score)
  write(id, v)
  place(id, s, kind, score, key_of(v))
  named[slot] = id
  taken[#taken + 1] = slot
  taken[#taken + 1] = id
  answer('C', '')
end
for i = 1, #ARGV, 10 do
  local mode, slot, holder, read = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local id, v, s, kind, score = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
  if named[slot] ~= holder then
    answer('R', '')
  elseif holder ~= '' and (value(holder) or '') ~= read then
    answer('R', '')
  elseif mode == 'V' then
    local current = value(id)
    if current == v then
      -- Applied by an attempt whose answer was lost.
      answer('C', '')
    elseif not current then
      answer('L', '')
    else
      local old, claims = meta(current)
      if old ~= '3' or claims ~= ARGV[i + 9] then
        answer('L', '')
      else
        unplace(id, old, key_of(current))
        take(slot, id, v, s, kind, score)
      end
    end
  elseif mode == 'T' then
    local current = value(id)
    if current then
      answer('D', current)
    else
      take(slot, id, v, s, kind, score)
    end
  else
    local old = meta(read)
    unplace(holder, old, key_of(read))
    write(holder, v)
    place(holder, s, kind, score, key_of(v))
    answer('P', '')
  end
end
call_chunked('HSET', UNIQ, taken)
flush()
return out
