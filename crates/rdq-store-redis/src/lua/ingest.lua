-- Ingests a run of a source's records: what runs before submit.lua's text
-- in the ingest script (common.lua, this, submit.lua), so the run's tasks
-- are stored exactly as a submit stores them, in the same script as the
-- cursor's compare-and-swap. KEYS[16] is the source's cursor hash in the
-- queue's slot (partition -> cursor). A cursor is
-- 'L,GEN,NEXT,AT,TOKEN' while it lives here and 'M,GEN,NEXT,AT,QUEUE' once
-- moved to QUEUE's slot (NEXT '' for none; see sources.rs). ARGV: the
-- partition, the expected cursor ('' for none), the new cursor, now (ms),
-- this ingest's token, '1' when this queue is the partition's first queue
-- (where no cursor means none), then submit.lua's six per task.
-- Answers {'F'} when the cursor does not live here (nothing changed; the
-- caller moves it here), {'M', CURRENT, ''} when it holds another value
-- (nothing changed), else submit.lua's answer. A cursor that holds this
-- ingest's token was moved by this very ingest (an attempt whose answer
-- was lost): its tasks are submitted again, which finds them stored.
local CUR, PART = KEYS[16], ARGV[1]
local raw = redis.call('HGET', CUR, PART)
local gen, current, token = '0', '', ''
if raw then
  local state, g, n, _, rest = string.match(raw, '^(%a),(%d+),(%d*),(-?%d+),(.*)$')
  if not state then return redis.error_reply('rdq: a damaged source cursor') end
  if state ~= 'L' then return { 'F' } end
  gen, current, token = g, n, rest
elseif ARGV[6] ~= '1' then
  return { 'F' }
end
if current == ARGV[2] then
  redis.call('HSET', CUR, PART, 'L,' .. gen .. ',' .. ARGV[3] .. ',' .. ARGV[4] .. ',' .. ARGV[5])
elseif token ~= ARGV[5] then
  return { 'M', current, '' }
end
-- Shift the tasks' arguments to the front, where submit.lua reads them.
local shift, total = 6, #ARGV
for i = 1, total - shift do ARGV[i] = ARGV[i + shift] end
for i = total, total - shift + 1, -1 do ARGV[i] = nil end
