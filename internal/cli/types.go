package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
)

const typesUsage = `Usage: dq types [list] [flags]   the task types with their pause state, parked tasks and rate limit
       dq types pause TYPE [flags]  pause a type: work processes park its due tasks (no attempt spent)
       dq types resume TYPE [flags] resume it: its parked tasks run now, in their order

The types listed are the ones paused, with a rate limit, with parked
tasks, or scheduled through this daemon since it started. Pause states
live in etcd: a daemon without DQ_ETCD_ENDPOINTS answers 503. Pausing a
paused type, or resuming a running one, changes nothing and is not an
error.
`

func runTypes(ctx context.Context, env Env, args []string) error {
	sub, fs, api, args := subcommand(env, "types", typesUsage, args)
	switch sub {
	case "list":
		if raw, err := listPrelude(ctx, env, fs, api, args, "/v1/types"); raw || err != nil {
			return err
		}
		types, err := api.client().Types(ctx)
		if err != nil {
			return err
		}
		return printTypes(env.Stdout, types)
	case "pause", "resume":
		typ, err := oneArg(fs, api, args, "types "+sub, "task type", "dq types "+sub+" TYPE")
		if err != nil {
			return err
		}
		c := api.client()
		var s *client.TypeState
		if sub == "pause" {
			s, err = c.PauseType(ctx, typ)
		} else {
			s, err = c.ResumeType(ctx, typ)
		}
		if err != nil {
			return err
		}
		if s.UnparkError != "" {
			fmt.Fprintf(env.Stderr, "warning: %s's parked tasks were not put back now: %s\n", s.Type, s.UnparkError)
		}
		if api.output == "json" {
			return printJSON(env.Stdout, s)
		}
		printTypeState(env.Stdout, sub, s)
		return nil
	case "help":
		fs.Usage()
		return ErrHelp
	default:
		fs.Usage()
		return fmt.Errorf("types %q: dq types [list], dq types pause TYPE or dq types resume TYPE", sub)
	}
}

func printTypeState(w io.Writer, sub string, s *client.TypeState) {
	switch {
	case sub == "pause" && s.Changed:
		fmt.Fprintf(w, "%s paused: its due tasks are parked until dq types resume %s\n", s.Type, s.Type)
	case sub == "pause":
		fmt.Fprintf(w, "%s was already paused\n", s.Type)
	case s.Changed:
		fmt.Fprintf(w, "%s resumed: %d parked %s put back to run\n", s.Type, s.Resumed, plural(s.Resumed, "task", "tasks"))
	default:
		fmt.Fprintf(w, "%s was not paused; %d parked %s put back to run\n", s.Type, s.Resumed, plural(s.Resumed, "task", "tasks"))
	}
}

func printTypes(w io.Writer, types []client.TypeInfo) error {
	if len(types) == 0 {
		_, err := fmt.Fprintln(w, "no task types known yet")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSTATE\tPAUSED AT\tPARKED\tLIMIT")
	for _, t := range types {
		state, at := "running", "-"
		if t.Paused {
			state = "paused"
			if !t.PausedAt.IsZero() {
				at = t.PausedAt.UTC().Format(time.RFC3339)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t.Type, state, at, t.Parked, scopedRuleText(t.Limit))
	}
	return tw.Flush()
}

// ruleText is a rate limit in a few words: "100/1m0s, 10/s burst 20,
// 5 running"; "-" for none.
func ruleText(r *client.LimitRule) string {
	if r == nil {
		return "-"
	}
	var parts []string
	if q := r.WindowQuota; q != nil {
		parts = append(parts, fmt.Sprintf("%d per %s", q.Limit, time.Duration(q.Window)))
	}
	if b := r.TokenBucket; b != nil {
		s := strconv.FormatFloat(b.Rate, 'f', -1, 64) + "/s burst " + strconv.FormatInt(b.Burst, 10)
		if b.Reserve > 0 {
			s += fmt.Sprintf(" (reserve %d for priority >= %d)", b.Reserve, b.MinPriority)
		}
		parts = append(parts, s)
	}
	if c := r.Concurrency; c != nil {
		parts = append(parts, fmt.Sprintf("%d running", c.Limit))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
