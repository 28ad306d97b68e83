package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
)

const shardsUsage = `Usage: dq shards [flags]                  show the namespace's shard map
       dq shards grow N [--wait] [flags]  grow the namespace to N shards, online

The shard count grows online: N must be above the current count, at most
4096 and a multiple of the current count. One growth runs at a time (the
daemon answers 409 while one runs). Tasks move to their new shard in the
background; dq shards shows the progress, dq shards grow N --wait polls it
every 500ms until the map is stable again.
`

const (
	// shardsPoll is how often dq shards grow --wait reads the map.
	shardsPoll = 500 * time.Millisecond
	// --wait gives up after shardsMaxFailures failed reads in a row (no
	// answer, or a 5xx: a daemon restarting, etcd away); a 4xx ends it at
	// once.
	shardsMaxFailures = 20
	// --wait gives up after shardsMaxStale reads in a row of a stable map
	// below the count it asked for. The growth's 202 already published the
	// new map, so such a read is a daemon whose view has not caught up
	// yet, and --wait gives it time (10 s) before it gives up.
	shardsMaxStale = 20
)

func runShards(ctx context.Context, env Env, args []string) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet(strings.TrimSpace("shards "+sub), env)
	api := bindAPI(fs, env)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), shardsUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	switch sub {
	case "":
		if err := parseNoArgs(fs, args); err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		m, err := api.client().Shards(ctx)
		if err != nil {
			return err
		}
		if api.output == "json" {
			return printJSON(env.Stdout, m)
		}
		return printShardMap(env.Stdout, m)
	case "grow":
		wait := fs.Bool("wait", false, "poll the map every 500ms until the migration is done, printing its progress on stderr")
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("shards grow: exactly one shard count expected (dq shards grow N)")
		}
		n, err := strconv.Atoi(pos[0])
		if err != nil {
			return fmt.Errorf("shards grow: %q is not a shard count", pos[0])
		}
		c := api.client()
		m, err := c.GrowShards(ctx, n)
		if err != nil {
			return err
		}
		if !*wait {
			if api.output == "json" {
				return printJSON(env.Stdout, m)
			}
			fmt.Fprintf(env.Stdout, "growing from %d to %d shards (epoch %d); dq shards shows the progress\n", m.Previous, m.Count, m.Epoch)
			return printShardMap(env.Stdout, m)
		}
		if api.output == "text" {
			fmt.Fprintf(env.Stdout, "growing from %d to %d shards (epoch %d)\n", m.Previous, m.Count, m.Epoch)
		}
		m, err = waitShards(ctx, c, m, n, env.Stderr, shardsPoll)
		if err != nil {
			return err
		}
		if api.output == "json" {
			return printJSON(env.Stdout, m)
		}
		fmt.Fprintf(env.Stdout, "done: %d shards, stable (epoch %d), %d tasks moved\n", m.Count, m.Epoch, m.Moved)
		return nil
	case "help":
		fs.Usage()
		return ErrHelp
	default:
		fs.Usage()
		return fmt.Errorf("shards %q: dq shards, or dq shards grow N", sub)
	}
}

// printShardMap writes the map as a table; a migrating map gets a progress
// row.
func printShardMap(w io.Writer, m *client.ShardMap) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("count", m.Count)
	row("previous", m.Previous)
	row("state", m.State)
	if m.Migrating() {
		row("progress", fmt.Sprintf("%.1f%%", 100*m.Progress()))
	}
	row("moved", m.Moved)
	row("remaining", m.Remaining)
	row("epoch", m.Epoch)
	return tw.Flush()
}

// growLine is the progress line of a migrating map m: "starting" until
// the growth has counted what it moves (no figures yet, which would read
// "0.0% (0 moved, 0 remaining)").
func growLine(m *client.ShardMap) string {
	if m.Moved == 0 && m.Remaining == 0 {
		return fmt.Sprintf("migrating %d → %d shards: starting", m.Previous, m.Count)
	}
	return fmt.Sprintf("migrating %d → %d shards: %.1f%% (%d moved, %d remaining)", m.Previous, m.Count, 100*m.Progress(), m.Moved, m.Remaining)
}

// waitShards polls the map every interval, starting from m (the growth's
// answer), until it is stable at target shards or more, and writes a
// progress line to progress whenever the figures change. A read that
// fails with a 5xx or no answer at all is retried (up to
// shardsMaxFailures in a row); a 4xx ends the wait.
func waitShards(ctx context.Context, c *client.Client, m *client.ShardMap, target int, progress io.Writer, interval time.Duration) (*client.ShardMap, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failures, stale := 0, 0
	last := ""
	for {
		if m != nil {
			if !m.Migrating() {
				if m.Count >= target {
					return m, nil
				}
				if stale++; stale >= shardsMaxStale {
					return nil, fmt.Errorf("shards grow: the daemon still reports a stable map of %d shards, not %d, after %d reads", m.Count, target, stale)
				}
			} else {
				stale = 0
				if line := growLine(m); line != last {
					fmt.Fprintln(progress, line)
					last = line
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		next, err := c.Shards(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ae *client.APIError
			if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
				return nil, err
			}
			if failures++; failures >= shardsMaxFailures {
				return nil, fmt.Errorf("shards grow: %d reads of the shard map failed in a row, the last: %w", failures, err)
			}
			fmt.Fprintf(progress, "reading the shard map: %v (retrying)\n", err)
			m = nil
			continue
		}
		failures, m = 0, next
	}
}
