package redisstore

import (
	"strconv"
	"strings"
)

// The wake-up contract: the scripts that make a shard's earliest due time
// earlier (schedule, reschedule, redrive, finish, unpark, movein, fire
// poison) publish "<shard>:<due ms>" on the namespace's wake channel
// (wake in common.lua); the event process's pollers subscribe to it
// (internal/event/fire, Wakeups). Both ends use this file.

// WakeChannel is the pub/sub channel on which scripts announce that a
// shard's earliest due time moved earlier (a payload ParseWake reads).
func (s *Store) WakeChannel() string { return s.k.wake }

// ParseWake reads a wake-up payload, "<shard>:<due ms>" (wake in
// common.lua): the shard and its new earliest due time (unix ms). ok is
// false for anything else, a negative shard included.
func ParseWake(payload string) (shard int, dueMS int64, ok bool) {
	a, b, found := strings.Cut(payload, ":")
	if !found {
		return 0, 0, false
	}
	shard, err1 := strconv.Atoi(a)
	dueMS, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || shard < 0 {
		return 0, 0, false
	}
	return shard, dueMS, true
}
