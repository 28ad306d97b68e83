-- releasekeyed: free slots of a keyed rule (Done, release.go): each leaves
-- the type's :ks and its value's count (slots_drop). A slot already gone
-- (expired and pruned, or released before) changes nothing.
-- KEYS[1] :ks
-- ARGV the slot ids
-- Returns how many were held.
return slots_drop(KEYS[1], ARGV)
