package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
)

const clusterUsage = `Usage: dq cluster [flags]                    the shards, processes and worked topics
       dq cluster forget-topic TOPIC [flags] forget a worked topic no work process handles any more

The state of the whole system as the daemon sees it: each shard with the
process leading it, its fencing token, the tasks waiting (pending), the
ones already due (overdue) and how late the oldest of them is, the tasks
parked by a paused type, firing and dead; then every daemon, event and work
process with its version and readiness; then the worked topics: the topics
delayq work processes declared they consume (in etcd, kept when they stop),
with the consumer group and time of the first declaration. A part the
daemon could not read (Redis, etcd) is named at the top. -o json prints
the daemon's answer.

A task fired to a worked topic stays fired until a worker finishes it; a
task fired to any other topic ends delivered once Kafka acknowledged its
record. forget-topic removes a topic from the worked topics (a work process
consuming it declares it again when it starts); forgetting a topic that is
not worked changes nothing and is not an error.
`

func runCluster(ctx context.Context, env Env, args []string) error {
	sub, fs, api, args := subcommand(env, "cluster", clusterUsage, args)
	switch sub {
	case "list":
		if raw, err := listPrelude(ctx, env, fs, api, args, "/v1/cluster"); raw || err != nil {
			return err
		}
		cl, err := api.client().Cluster(ctx)
		if err != nil {
			return err
		}
		return printCluster(env.Stdout, cl, time.Now())
	case "forget-topic":
		topic, err := oneArg(fs, api, args, "cluster forget-topic", "topic", "dq cluster forget-topic TOPIC")
		if err != nil {
			return err
		}
		forgotten, err := api.client().ForgetWorkedTopic(ctx, topic)
		if err != nil {
			return err
		}
		if api.output == "json" {
			return printJSON(env.Stdout, struct {
				Topic     string `json:"topic"`
				Forgotten bool   `json:"forgotten"`
			}{topic, forgotten})
		}
		if forgotten {
			fmt.Fprintf(env.Stdout, "%s forgotten: its tasks fired from now on end delivered, unless a work process declares it again\n", topic)
		} else {
			fmt.Fprintf(env.Stdout, "%s was not a worked topic\n", topic)
		}
		return nil
	case "help":
		fs.Usage()
		return ErrHelp
	default:
		fs.Usage()
		return fmt.Errorf("cluster %q: dq cluster or dq cluster forget-topic TOPIC", sub)
	}
}

func printCluster(w io.Writer, cl *client.Cluster, now time.Time) error {
	redis := "up"
	if !cl.RedisUp {
		redis = "DOWN"
	}
	fmt.Fprintf(w, "namespace %s, %d shards, redis %s, journal %d\n", cl.Namespace, cl.ShardCount, redis, cl.JournalDepth)
	if cl.RedisError != "" {
		fmt.Fprintf(w, "redis: %s\n", oneLine(cl.RedisError, 200))
	}
	if cl.EtcdError != "" {
		fmt.Fprintf(w, "etcd: %s\n", oneLine(cl.EtcdError, 200))
	}
	var pending, overdue, leaderless int64
	var oldest float64
	for _, s := range cl.Shards {
		pending += s.Pending
		overdue += s.Overdue
		oldest = max(oldest, s.OldestOverdueSeconds)
		if s.Leader == nil {
			leaderless++
		}
	}
	fmt.Fprintf(w, "pending %d, overdue %d (oldest %s), shards without a leader %d\n\n", pending, overdue, secondsText(oldest), leaderless)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLEADER\tADDR\tTOKEN\tPENDING\tOVERDUE\tOLDEST OVERDUE\tPAUSED\tFIRING\tDEAD")
	for _, s := range cl.Shards {
		id, addr := "-", "-"
		if s.Leader != nil {
			id, addr = orDash(s.Leader.ID), orDash(s.Leader.Addr)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n", s.Shard, id, addr, s.LeaderToken,
			s.Pending, s.Overdue, secondsText(s.OldestOverdueSeconds), s.Paused, s.Firing, s.Dead)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(cl.Processes) == 0 {
		fmt.Fprintln(w, "no processes registered")
	} else {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tKIND\tVERSION\tADDR\tREADY\tUP\tREASON")
		for _, p := range cl.Processes {
			ready, up := "yes", "-"
			if !p.Ready {
				ready = "NO"
			}
			if !p.StartedAt.IsZero() {
				up = now.Sub(p.StartedAt).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Kind, orDash(p.Version), orDash(p.Addr), ready, up, orDash(oneLine(p.Reason, 100)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if cl.EtcdError != "" {
		return nil // the worked topics live in etcd: not known (said at the top)
	}
	fmt.Fprintln(w)
	if len(cl.WorkedTopics) == 0 {
		_, err := fmt.Fprintln(w, "no worked topics: tasks fired to any topic end delivered once Kafka has them")
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKED TOPIC\tGROUP\tSINCE")
	for _, t := range cl.WorkedTopics {
		since := "-"
		if !t.Since.IsZero() {
			since = t.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Topic, orDash(oneLine(t.Group, 100)), since)
	}
	return tw.Flush()
}

// secondsText is a number of seconds as a duration ("1m35s", "1.5s"); "-"
// for 0.
func secondsText(s float64) string {
	if s <= 0 {
		return "-"
	}
	d := time.Duration(s * float64(time.Second))
	if d >= time.Second {
		d = d.Round(100 * time.Millisecond)
		if d >= time.Minute {
			d = d.Round(time.Second)
		}
	}
	return d.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
