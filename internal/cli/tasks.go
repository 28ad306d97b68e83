package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
)

const tasksUsage = `Usage: dq tasks list [--state S] [--type T] [--due-after TIME] [--due-before TIME] [--limit N] [--all] [--cursor C] [flags]
       dq tasks cancel (ID... | --type T [--due-after TIME] [--due-before TIME] | --all) [flags]

list     the tasks of one state, by time across every shard, oldest first:
         a table of id, type, state, due time, attempt and shard (-o json:
         one JSON array of the tasks as the daemon answers them). One page
         of --limit tasks; --all follows the cursor through every page, and
         without it the command names the cursor of the next page on stderr.
         --state is one of scheduled, retrying, fired, paused, dead,
         succeeded, cancelled, delivered (default: scheduled and
         retrying).
cancel   cancel waiting tasks (scheduled, retrying or paused): the ids given,
         or every one matching the filter, or --all of them. Tasks that are
         not waiting are skipped; it prints how many it cancelled and is
         safe to repeat.

TIME is an RFC 3339 time (2030-01-02T15:04:05Z) or a duration from now
(-1h: an hour ago, 30m: in half an hour). --due-after is inclusive,
--due-before exclusive.
`

// listStates are the values of dq tasks list --state.
var listStates = []string{client.StateScheduled, client.StateRetrying, client.StateFired, client.StatePaused,
	client.StateDead, client.StateSucceeded, client.StateCancelled, client.StateDelivered}

func runTasks(ctx context.Context, env Env, args []string) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet(strings.TrimSpace("tasks "+sub), env)
	api := bindAPI(fs, env)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tasksUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	switch sub {
	case "list":
		return runTasksList(ctx, env, fs, api, args)
	case "cancel":
		return runTasksCancel(ctx, env, fs, api, args)
	case "help":
		fs.Usage()
		return ErrHelp
	case "":
		if err := fs.Parse(args); err != nil {
			return err // -h: ErrHelp after the usage
		}
		fs.Usage()
		return errors.New("tasks: dq tasks list or dq tasks cancel")
	default:
		fs.Usage()
		return fmt.Errorf("tasks %q: dq tasks list or dq tasks cancel", sub)
	}
}

// timeFlag is a flag holding a time: RFC 3339, or a duration from now
// (one now for every flag of a command, so --due-after 1h --due-before 1h
// is an empty range).
type timeFlag struct {
	t   time.Time
	now time.Time
}

func (f *timeFlag) String() string {
	if f == nil || f.t.IsZero() {
		return ""
	}
	return f.t.UTC().Format(time.RFC3339Nano)
}

func (f *timeFlag) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		f.t = t
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		f.t = f.now.Add(d)
		return nil
	}
	return fmt.Errorf("%q: want an RFC 3339 time (2030-01-02T15:04:05Z) or a duration from now (-1h, 30m)", s)
}

func bindTime(fs *flag.FlagSet, name, usage string, now time.Time) *timeFlag {
	f := &timeFlag{now: now}
	fs.Var(f, name, usage)
	return f
}

// tableOutput lets -o table mean -o text, for the commands whose text
// output is a table.
func tableOutput(api *apiFlags) {
	if api.output == "table" {
		api.output = "text"
	}
}

func runTasksList(ctx context.Context, env Env, fs *flag.FlagSet, api *apiFlags, args []string) error {
	var o client.ListOptions
	fs.StringVar(&o.State, "state", "", "list the tasks in this state: "+strings.Join(listStates, ", ")+" (default: scheduled and retrying)")
	fs.StringVar(&o.Type, "type", "", "only tasks of this type")
	now := time.Now()
	after := bindTime(fs, "due-after", "only tasks due at or after this `TIME`", now)
	before := bindTime(fs, "due-before", "only tasks due before this `TIME`", now)
	fs.IntVar(&o.Limit, "limit", 100, "tasks per page, 1 to 1000")
	all := fs.Bool("all", false, "follow the cursor through every page")
	fs.StringVar(&o.Cursor, "cursor", "", "start at this cursor (the next page of an earlier listing with the same filters)")
	fs.Lookup("o").Usage = "output: text (or table) or json (one array of the tasks)"
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	tableOutput(api)
	if err := api.check(); err != nil {
		return err
	}
	if o.State != "" && !slices.Contains(listStates, o.State) {
		return fmt.Errorf("--state %q: one of %s", o.State, strings.Join(listStates, ", "))
	}
	if o.Limit < 1 || o.Limit > 1000 {
		return fmt.Errorf("--limit %d: between 1 and 1000", o.Limit)
	}
	o.DueAfter, o.DueBefore = after.t, before.t
	if !o.DueAfter.IsZero() && !o.DueBefore.IsZero() && !o.DueAfter.Before(o.DueBefore) {
		return fmt.Errorf("--due-after %s is not before --due-before %s: no task can match", after, before)
	}
	if api.output == "json" {
		return listJSON(ctx, env, api, o, *all)
	}
	return listTable(ctx, env, api, o, *all)
}

// listTable prints the tasks as a table, one page at a time (a page's
// columns are aligned; --all does not hold every task in memory).
func listTable(ctx context.Context, env Env, api *apiFlags, o client.ListOptions, all bool) error {
	c := api.client()
	n := 0
	for {
		p, err := c.ListTasks(ctx, o)
		if err != nil {
			return err
		}
		if len(p.Tasks) > 0 {
			tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			if n == 0 {
				fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tDUE AT\tATTEMPT\tSHARD")
			}
			for _, t := range p.Tasks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\n", t.ID, t.Type, t.State, timeText(t.DueAt), t.Attempt, t.MaxAttempts, t.Shard)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			n += len(p.Tasks)
		}
		if done, err := nextPage(env, &o, p.NextCursor, all); done || err != nil {
			if n == 0 && err == nil {
				fmt.Fprintln(env.Stdout, "no tasks")
			}
			return err
		}
	}
}

// listJSON prints the tasks as one JSON array, each task as the daemon
// answered it, page after page.
func listJSON(ctx context.Context, env Env, api *apiFlags, o client.ListOptions, all bool) error {
	hc := api.httpClient(30 * time.Second)
	var out bytes.Buffer
	n := 0
	out.WriteString("[")
	for {
		b, err := rawCall(ctx, api, hc, http.MethodGet, "/v1/tasks"+listQuery(o), nil)
		if err != nil {
			return err
		}
		var p struct {
			Tasks      []json.RawMessage `json:"tasks"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("GET /v1/tasks: decode answer: %w", err)
		}
		for _, t := range p.Tasks {
			if n > 0 {
				out.WriteString(",")
			}
			out.WriteString("\n  ")
			if err := json.Indent(&out, t, "  ", "  "); err != nil {
				return fmt.Errorf("GET /v1/tasks: a task is not JSON: %w", err)
			}
			n++
		}
		if _, err := env.Stdout.Write(out.Bytes()); err != nil {
			return err
		}
		out.Reset()
		done, err := nextPage(env, &o, p.NextCursor, all)
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	if n > 0 {
		out.WriteString("\n")
	}
	out.WriteString("]\n")
	_, err := env.Stdout.Write(out.Bytes())
	return err
}

// nextPage moves o to the next page when the listing goes on (all), or
// names the cursor of the next page on stderr; it reports whether the
// listing is done.
func nextPage(env Env, o *client.ListOptions, next string, all bool) (bool, error) {
	switch {
	case next == "":
		return true, nil
	case !all:
		fmt.Fprintf(env.Stderr, "more tasks: add --all, or --cursor %s for the next page\n", next)
		return true, nil
	case next == o.Cursor:
		return true, fmt.Errorf("tasks list: the daemon answered the cursor it was sent (%.40q)", next)
	}
	o.Cursor = next
	return false, nil
}

// listQuery is the query string of GET /v1/tasks for o.
func listQuery(o client.ListOptions) string {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", o.State)
	set("type", o.Type)
	if !o.DueAfter.IsZero() {
		q.Set("due_after", o.DueAfter.UTC().Format(time.RFC3339Nano))
	}
	if !o.DueBefore.IsZero() {
		q.Set("due_before", o.DueBefore.UTC().Format(time.RFC3339Nano))
	}
	q.Set("limit", strconv.Itoa(o.Limit))
	set("cursor", o.Cursor)
	return "?" + q.Encode()
}

// timeText is t as RFC 3339 with milliseconds in UTC; "-" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func runTasksCancel(ctx context.Context, env Env, fs *flag.FlagSet, api *apiFlags, args []string) error {
	typ := fs.String("type", "", "cancel the waiting tasks of this type")
	now := time.Now()
	after := bindTime(fs, "due-after", "cancel the waiting tasks due at or after this `TIME`", now)
	before := bindTime(fs, "due-before", "cancel the waiting tasks due before this `TIME`", now)
	all := fs.Bool("all", false, "cancel every waiting task")
	ids, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	s := client.Selection{IDs: ids, Type: *typ, DueAfter: after.t, DueBefore: before.t, All: *all}
	filter := s.Type != "" || !s.DueAfter.IsZero() || !s.DueBefore.IsZero()
	switch {
	case len(ids) > 0 && (filter || s.All):
		return errors.New("tasks cancel: give task ids or a filter (--type, --due-after, --due-before) or --all, not several")
	case filter && s.All:
		return errors.New("tasks cancel: --all cancels every waiting task: give it without --type, --due-after and --due-before")
	case len(ids) == 0 && !filter && !s.All:
		return errors.New("tasks cancel: give task ids, a filter (--type, --due-after, --due-before) or --all")
	case !s.DueAfter.IsZero() && !s.DueBefore.IsZero() && !s.DueAfter.Before(s.DueBefore):
		return fmt.Errorf("--due-after %s is not before --due-before %s: no task can match", after, before)
	}
	n, err := api.client().CancelTasks(ctx, s)
	return printChanged(env, api, "cancelled", n, err)
}

// printChanged prints the count of a bulk operation (also when it failed
// half-way, before its error).
func printChanged(env Env, api *apiFlags, what string, n int, err error) error {
	if err != nil {
		if n > 0 {
			fmt.Fprintf(env.Stderr, "%s %d tasks before the error\n", what, n)
		}
		return err
	}
	if api.output == "json" {
		return printJSON(env.Stdout, map[string]int{"changed": n})
	}
	fmt.Fprintf(env.Stdout, "%s %d %s\n", what, n, plural(n, "task", "tasks"))
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// deadBulk runs dq dead redrive or dq dead delete on ids, --type or --all
// (sub is "redrive" or "delete"). One id and nothing else keeps the
// single-task form (done by the caller): it reports a task that is not
// dead as an error.
func deadBulk(ctx context.Context, env Env, api *apiFlags, sub string, ids []string, typ string, all bool) error {
	switch {
	case len(ids) > 0 && (typ != "" || all):
		return fmt.Errorf("dead %s: give dead task ids, --type or --all, not several", sub)
	case typ != "" && all:
		return fmt.Errorf("dead %s: --all is every dead task: give it without --type", sub)
	case len(ids) == 0 && typ == "" && !all:
		return fmt.Errorf("dead %s: give dead task ids, --type T or --all", sub)
	}
	s := client.Selection{IDs: ids, Type: typ, All: all}
	c := api.client()
	if sub == "redrive" {
		n, err := c.RedriveDeadTasks(ctx, s)
		return printChanged(env, api, "redriven", n, err)
	}
	n, err := c.DeleteDeadTasks(ctx, s)
	return printChanged(env, api, "deleted", n, err)
}

// rawGet prints the daemon's answer to GET path as it is (indented), read
// with a client that trusts --ca.
func rawGet(ctx context.Context, api *apiFlags, path string, w io.Writer) error {
	b, err := rawCall(ctx, api, api.httpClient(30*time.Second), http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return printRaw(w, b)
}
