package kfakefix

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInstallCapsTheRebalanceTimeout sends a JoinGroup asking for 60s and
// reads, from a control function that runs after Install's (they run in
// the order they were added), what kfake goes on with.
func TestInstallCapsTheRebalanceTimeout(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	Install(c)
	seen := make(chan int32, 4)
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req, ok := r.(*kmsg.JoinGroupRequest); ok {
			seen <- req.RebalanceTimeoutMillis
		}
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, asked := range []int32{60000, 1000} {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group = "g"
		req.SessionTimeoutMillis = 6000
		req.RebalanceTimeoutMillis = asked
		req.ProtocolType = "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0, 0, 0}}}
		if _, err := cl.Request(ctx, req); err != nil {
			t.Logf("join answer: %v (only what kfake saw matters)", err)
		}
		want := min(asked, int32(RebalanceCap.Milliseconds()))
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("asked %dms: kfake went on with %dms, want %dms", asked, got, want)
			}
		case <-ctx.Done():
			t.Fatal("the JoinGroup never reached kfake")
		}
	}
}
