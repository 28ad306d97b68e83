-- window: partial admission of n tasks against a fixed-window quota.
-- Admits min(n, remaining) and adds only that to the window's counter.
-- KEYS[1] window hash
-- ARGV[1] shift ms, ARGV[2] limit, ARGV[3] window ms, ARGV[4] n
-- Returns {admitted, window start ms, count after, now ms}
local now = now_ms(tonumber(ARGV[1]))
local limit, win, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local start, count = window_load(KEYS[1], win, now)
local take = math.max(0, math.min(n, limit - count))
if take > 0 then
  count = count + take
  window_save(KEYS[1], start, count, win, now)
end
return {take, start, count, now}
