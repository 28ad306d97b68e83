// Package journal is the daemon's durable, ordered compensation log: requests
// accepted while Redis was unreachable, kept on local disk until they are
// replayed.
//
// A Journal is one bbolt file, dir/journal.db, opened by one process at a
// time. Every Append is fsync'd before it returns, so an entry whose Append
// returned survives a crash of the process or the machine. Entries carry a
// sequence number that is strictly increasing and never reused, also across
// restarts; Peek and PeekAfter (a page after a given Seq) return them
// oldest first, and the replay loop removes them with Remove once Redis has
// them, in any order: it leaves in place the entries whose shard is down.
//
// On disk there are two buckets:
//
//	entries: 8-byte big-endian seq -> record
//	ids:     task id               -> 8-byte big-endian seq of the latest entry for that id
//
// A record is
//
//	version byte (1) | uvarint len(id) | id | varint At (unix ms) | Data | CRC32C (Castagnoli, big-endian)
//
// where the CRC covers everything before it. Open reads and checks every
// record, so a damaged file is reported when the daemon starts, naming the
// first bad seq, rather than dropping data silently.
package journal
