-- Compare-and-swap writes of whole tasks: settles, lease extensions and
-- reaps (required status '1', IN_FLIGHT) and redrives ('3', DEAD). ARGV[1]
-- is the required status, then six per write: id, expected claim count,
-- new stored value, new status, place kind, score. Writes apply in order.
-- Answers two per write: 'K' and '' (applied), 'N' and '' (no such task),
-- or 'L' and the current value (status or claim count differ, or the task
-- was asked to stop and the new value does not know it: a state decided
-- from a worker's stale copy never overwrites a cancel request; the engine
-- decides again from the stored one).
local required = ARGV[1]
-- How a canonical envelope spells its cancel request (`docs/envelope.md`).
local ASKED = ',"cancel_requested":{"at":'
local function overwrites_request(stored, new)
  return required == '1' and string.find(stored, ASKED, 1, true) ~= nil
    and string.find(new, ASKED, 1, true) == nil
end
prefetch(every(ARGV, 2, 6))
local out = {}
for i = 2, #ARGV, 6 do
  local id = ARGV[i]
  local v = value(id)
  if not v then
    out[#out + 1] = 'N'
    out[#out + 1] = ''
  else
    local s, c, _, _, key = meta(v)
    if s ~= required or c ~= ARGV[i + 1] or overwrites_request(v, ARGV[i + 2]) then
      out[#out + 1] = 'L'
      out[#out + 1] = v
    else
      -- Each index entry is filed under the flow key of the stored value
      -- it belongs to (fixed at submit, so the same key both times).
      unplace(id, s, key)
      write(id, ARGV[i + 2])
      place(id, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], key_of(ARGV[i + 2]))
      out[#out + 1] = 'K'
      out[#out + 1] = ''
    end
  end
end
flush()
return out
