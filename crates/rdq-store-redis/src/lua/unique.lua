-- A unique submit's compare-and-swap (docs/uniqueness.md). rdq read the
-- slot's holder and its stored value, and the engine decided; this applies
-- the decision only if neither the slot nor the holder changed since.
-- The queue's slots are a hash, TAG .. 'uniq': slot -> the id of the task
-- that took it last.
-- ARGV: mode ('T' the new task takes the slot, 'P' the holder takes a new
-- state), slot, the holder's id read ('' for none), its value read ('' for
-- none), then id, stored value, status, place kind, score: the new task's
-- (T) or the holder's new state (P).
-- Answers {code, value}: 'C' created, 'P' replaced, 'R' changed meanwhile
-- (decide again), 'D' and the stored value (the id is taken).
local UNIQ = TAG .. 'uniq'
local mode, slot, holder, read = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id, v, s, kind, score = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if (redis.call('HGET', UNIQ, slot) or '') ~= holder then
  return { 'R', '' }
end
if holder ~= '' and (value(holder) or '') ~= read then
  return { 'R', '' }
end
if mode == 'T' then
  local current = value(id)
  if current then
    return { 'D', current }
  end
  write(id, v)
  place(id, s, kind, score, key_of(v))
  redis.call('HSET', UNIQ, slot, id)
  flush()
  return { 'C', '' }
end
local old = meta(read)
unplace(holder, old, key_of(read))
write(holder, v)
place(holder, s, kind, score, key_of(v))
flush()
return { 'P', '' }
