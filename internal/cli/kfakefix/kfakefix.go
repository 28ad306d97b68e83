// Package kfakefix holds the one workaround delayq applies to kfake
// (github.com/twmb/franz-go/pkg/kfake), the in-process Kafka broker that
// `dq dev` and the tests run: without it kfake and kafka-go can livelock a
// consumer group. Every place that starts a kfake cluster installs it.
package kfakefix

import (
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RebalanceCap is the longest rebalance timeout kfake is let to use for a
// consumer group (the work processes ask for 10s).
//
// Without it, kfake and kafka-go can livelock a classic consumer group
// for good after a few member restarts (seen in the chaos suite: both work
// processes failing JoinGroup with "i/o timeout" every 16s for minutes,
// long after every fault was healed; reproduced with two bare kafka-go
// Readers killed and restarted at random, no delayq code involved: 4 of 10
// trials never recovered, the group stuck in PreparingRebalance with one
// more member after every retry). Two behaviours meet:
//   - kfake restarts the rebalance timer (the members' rebalance timeout)
//     on every JoinGroup that arrives while the group prepares a rebalance
//     (group.rebalance: "Always reset the timer"), and keeps the members
//     whose JoinGroup connection is gone; Kafka's DelayedJoin keeps the
//     deadline set when the rebalance began;
//   - kafka-go waits for a JoinGroup answer only Timeout (5s, fixed for a
//     Reader) + RebalanceTimeout, then drops the connection and its member
//     id and, after JoinGroupBackoff (1s), joins again as a new member.
//
// Two members whose joins land 5-11s apart then push the 10s timer past
// each other's 15s deadline, every 16s, forever. With the timer at 4s a
// join stays unanswered for its 15s only if another join arrives at least
// every 4s meanwhile, which two or three processes that join once per
// attempt cannot do; the same trials (20 over two seeds) all recovered,
// within 5s but one (23s). A member that needs more than 4s to rejoin
// joins the next generation instead. The work binary's own settings are
// left alone: against Kafka the 10s rebalance timeout is right.
const RebalanceCap = 4 * time.Second

// Install lowers the rebalance timeout of every JoinGroup request c
// receives to at most RebalanceCap before kfake handles it.
func Install(c *kfake.Cluster) {
	capMS := int32(RebalanceCap.Milliseconds())
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req, ok := r.(*kmsg.JoinGroupRequest); ok && req.RebalanceTimeoutMillis > capMS {
			req.RebalanceTimeoutMillis = capMS
		}
		return nil, nil, false // not handled: kfake goes on with the request; the function stays installed
	})
}
