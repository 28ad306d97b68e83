package integration

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUnexplainedDuplicates: a lost etcd session explains only the copies a
// shard's next leader fires again (one shard, another token); a copy from
// another shard or from the same leadership stays a defect, and without a
// lost session every duplicate is one.
func TestUnexplainedDuplicates(t *testing.T) {
	rec := func(id, shard, token string) *kgo.Record {
		return &kgo.Record{Key: []byte(id), Headers: []kgo.RecordHeader{
			{Key: "dq-shard", Value: []byte(shard)}, {Key: "dq-token", Value: []byte(token)},
		}}
	}
	kl := &kafkaLog{byID: map[string][]*kgo.Record{
		"once":     {rec("once", "3", "10")},
		"refired":  {rec("refired", "3", "10"), rec("refired", "3", "17")},
		"twoshard": {rec("twoshard", "3", "10"), rec("twoshard", "40", "12")},
		"sametok":  {rec("sametok", "5", "11"), rec("sametok", "5", "11")},
	}}
	ids := []string{"once", "refired", "twoshard", "sametok"}
	for _, c := range []struct {
		lost string
		bad  []string
	}{
		{"", []string{"refired", "twoshard", "sametok"}},
		{"event 1 had 2 etcd sessions", []string{"twoshard", "sametok"}},
	} {
		dups, bad := unexplainedDuplicates(kl, ids, c.lost)
		if dups != 3 || !slices.Equal(bad, c.bad) {
			t.Errorf("lost %q: %d duplicates, unexplained %v; want 3, %v", c.lost, dups, bad, c.bad)
		}
	}
}
