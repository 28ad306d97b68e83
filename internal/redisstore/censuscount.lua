-- censuscount: counts a sorted set's members per score range, for GET
-- /v1/load (the due set) and GET /v1/history (the done and dead sets);
-- census.go. Read only, one set (it names every key it reads).
-- KEYS[1] the set
-- ARGV: edges e1 .. en (scores, '-inf' allowed)
-- Returns n - 1 counts: of the scores in [e1, e2), [e2, e3), ...
local out = {}
for i = 1, #ARGV - 1 do
  out[i] = redis.call('ZCOUNT', KEYS[1], ARGV[i], '(' .. ARGV[i + 1])
end
return out
