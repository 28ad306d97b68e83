package election

import (
	"strings"
	"testing"
)

func TestKeyLayout(t *testing.T) {
	const ns = "dq"
	if got, want := MembersPrefix(ns), "/dq/members/"; got != want {
		t.Errorf("MembersPrefix = %q, want %q", got, want)
	}
	if got, want := ElectionPrefix(ns, 3), "/dq/shards/3/"; got != want {
		t.Errorf("ElectionPrefix = %q, want %q", got, want)
	}
	if got, want := CandidateKey(ns, 3, 0x694d7a1b2c), "/dq/shards/3/694d7a1b2c"; got != want {
		t.Errorf("CandidateKey = %q, want %q", got, want)
	}
	// shard 1's prefix is not a prefix of shard 10's (etcd#6278)
	if strings.HasPrefix(ElectionPrefix(ns, 10), ElectionPrefix(ns, 1)) {
		t.Error("shard 1's election prefix is a prefix of shard 10's")
	}
}

func TestParseElectionKey(t *testing.T) {
	for _, tc := range []struct {
		key   string
		shard int
		ok    bool
	}{
		{CandidateKey("dq", 7, 42), 7, true},
		{"/dq/shards/0/1", 0, true},
		{"/dq/shards/12", 0, false},
		{"/dq/shards/-1/1", 0, false},
		{"/dq/shards/x/1", 0, false},
		{"/other/shards/1/1", 0, false},
		{"/dq/members/p1", 0, false},
	} {
		s, ok := ParseElectionKey("dq", tc.key)
		if ok != tc.ok || (ok && s != tc.shard) {
			t.Errorf("ParseElectionKey(%q) = %d, %v; want %d, %v", tc.key, s, ok, tc.shard, tc.ok)
		}
	}
}
