package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/task"
)

const schedulesUsage = `Usage: dq schedules [list] [flags]            every schedule with its next and last tick (all pages)
       dq schedules get ID [flags]            one schedule with its next 5 ticks
       dq schedules set ID --cron EXPR --type TYPE [flags]
                                              create or replace a schedule (the whole spec)
       dq schedules set ID --file SPEC.json   the same from a JSON spec (- for stdin), as
                                              PUT /v1/schedules/{id} takes it
       dq schedules delete ID [flags]         remove it (ticks not fired yet are cancelled)
       dq schedules pause ID [flags]          no ticks until it is resumed (missed ones are not caught up)
       dq schedules resume ID [flags]

A schedule turns each tick of a cron expression into a task with the id
ID@<tick in unix ms>, exactly once per tick. --cron takes 5 fields
(minute hour day-of-month month day-of-week), 6 with leading seconds
("*/5 * * * * *"), or @hourly, @daily, @weekly, @monthly, @yearly,
"@every 10s". The fields are read in --timezone (IANA, default UTC): a
wall-clock time that does not exist when DST starts is skipped; one that
occurs twice when DST ends fires once, unless the hour field is "*".
--catchup says what happens to ticks missed while no scheduler ran: none,
last (the default: the most recent fires once) or all.

Schedules live in etcd: a daemon without DQ_ETCD_ENDPOINTS answers 503.
Pausing a paused schedule, or resuming a running one, changes nothing and
is not an error.
`

// specFlags are the flags of dq schedules set that build the spec.
var specFlags = []string{"cron", "timezone", "catchup", "paused", "start-at", "end-at", "type", "payload", "payload-file",
	"binary", "topic", "key", "header", "max-attempts", "timeout", "priority"}

func runSchedules(ctx context.Context, env Env, args []string) error {
	sub, fs, api, args := subcommand(env, "schedules", schedulesUsage, args)
	switch sub {
	case "list":
		if err := parseNoArgs(fs, args); err != nil {
			return err
		}
		tableOutput(api)
		if err := api.check(); err != nil {
			return err
		}
		if api.output == "json" {
			return schedulesJSON(ctx, env, api)
		}
		var list []client.Schedule
		for s, err := range api.client().Schedules(ctx, client.ScheduleListOptions{Limit: schedulesPage}) {
			if err != nil {
				return err
			}
			list = append(list, s)
		}
		return printSchedules(env.Stdout, list)
	case "set":
		return runSchedulesSet(ctx, env, fs, api, args)
	case "get", "delete", "pause", "resume":
		id, err := oneArg(fs, api, args, "schedules "+sub, "schedule id", "dq schedules "+sub+" ID")
		if err != nil {
			return err
		}
		return scheduleAction(ctx, env, api, sub, id)
	case "help":
		fs.Usage()
		return ErrHelp
	default:
		fs.Usage()
		return fmt.Errorf("schedules %q: dq schedules [list], get ID, set ID, delete ID, pause ID or resume ID", sub)
	}
}

// schedulesPage is the page size dq schedules list asks for (a variable
// for the tests).
var schedulesPage = 1000

// schedulesJSON prints every schedule as the daemon answers them, one
// {"schedules":[...]} document of all the pages of GET /v1/schedules.
func schedulesJSON(ctx context.Context, env Env, api *apiFlags) error {
	hc := api.httpClient(30 * time.Second)
	all := []json.RawMessage{}
	cursor := ""
	for {
		path := fmt.Sprintf("/v1/schedules?limit=%d", schedulesPage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		b, err := rawCall(ctx, api, hc, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		var p struct {
			Schedules  []json.RawMessage `json:"schedules"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("GET /v1/schedules: decode answer: %w", err)
		}
		all = append(all, p.Schedules...)
		if p.NextCursor == "" {
			break
		}
		if p.NextCursor == cursor {
			return fmt.Errorf("schedules list: the daemon answered the cursor it was sent (%.40q)", cursor)
		}
		cursor = p.NextCursor
	}
	b, err := json.Marshal(struct {
		Schedules []json.RawMessage `json:"schedules"`
	}{all})
	if err != nil {
		return fmt.Errorf("encode schedules: %w", err)
	}
	return printRaw(env.Stdout, b)
}

// scheduleAction runs get, delete, pause or resume on schedule id.
func scheduleAction(ctx context.Context, env Env, api *apiFlags, sub, id string) error {
	path := "/v1/schedules/" + url.PathEscape(id)
	if api.output == "json" {
		method := map[string]string{"get": http.MethodGet, "delete": http.MethodDelete, "pause": http.MethodPost, "resume": http.MethodPost}[sub]
		if sub == "pause" || sub == "resume" {
			path += "/" + sub
		}
		b, err := rawCall(ctx, api, api.httpClient(30*time.Second), method, path, nil)
		if err != nil {
			return err
		}
		return printRaw(env.Stdout, b)
	}
	c := api.client()
	var s *client.Schedule
	var err error
	switch sub {
	case "get":
		if s, err = c.GetSchedule(ctx, id); err != nil {
			return err
		}
		return printSchedule(env.Stdout, s, time.Now())
	case "delete":
		if err := c.DeleteSchedule(ctx, id); err != nil {
			return err
		}
		_, err := fmt.Fprintf(env.Stdout, "%s deleted: no more ticks; ticks not fired yet are cancelled\n", id)
		return err
	case "pause":
		s, err = c.PauseSchedule(ctx, id)
	default:
		s, err = c.ResumeSchedule(ctx, id)
	}
	if err != nil {
		return err
	}
	switch {
	case sub == "pause" && s.Changed:
		fmt.Fprintf(env.Stdout, "%s paused: no ticks until dq schedules resume %s\n", s.ID, s.ID)
	case sub == "pause":
		fmt.Fprintf(env.Stdout, "%s was already paused\n", s.ID)
	case s.Changed:
		fmt.Fprintf(env.Stdout, "%s resumed: next tick %s\n", s.ID, nextText(s, time.Now()))
	default:
		fmt.Fprintf(env.Stdout, "%s was not paused; next tick %s\n", s.ID, nextText(s, time.Now()))
	}
	return nil
}

func runSchedulesSet(ctx context.Context, env Env, fs *flag.FlagSet, api *apiFlags, args []string) error {
	var spec client.ScheduleSpec
	var file, payload, payloadFile, timeout string
	var binary bool
	headers := headerFlags{}
	now := time.Now()
	fs.StringVar(&file, "file", "", "read the whole spec from this JSON `FILE` (- for stdin) instead of the flags below")
	fs.StringVar(&spec.Cron, "cron", "", "cron expression: 5 fields, 6 with leading seconds, or @hourly, @daily, \"@every 10s\", ...")
	fs.StringVar(&spec.Timezone, "timezone", "", "IANA time zone of the cron fields, e.g. Europe/Berlin (default UTC)")
	fs.StringVar(&spec.Catchup, "catchup", "", "missed ticks: none, last (default) or all")
	fs.BoolVar(&spec.Paused, "paused", false, "create it paused")
	start := bindTime(fs, "start-at", "no ticks before this `TIME` (RFC 3339 or a duration from now)", now)
	end := bindTime(fs, "end-at", "no ticks after this `TIME` (RFC 3339 or a duration from now)", now)
	fs.StringVar(&spec.Task.Type, "type", "", "task type of each tick (required)")
	fs.StringVar(&payload, "payload", "", "payload: a JSON value (or raw bytes with --binary)")
	fs.StringVar(&payloadFile, "payload-file", "", "read the payload from this file (- for stdin)")
	fs.BoolVar(&binary, "binary", false, "send the payload as bytes (base64 on the wire), not JSON")
	fs.StringVar(&spec.Task.Topic, "topic", "", "Kafka topic (default: the daemon's default topic)")
	fs.StringVar(&spec.Task.Key, "key", "", "Kafka key (default: the tick's task id)")
	fs.Var(headers, "header", "extra Kafka header name=value (repeatable)")
	fs.IntVar(&spec.Task.MaxAttempts, "max-attempts", 0, "attempts before a tick's task is dead (0: default)")
	fs.StringVar(&timeout, "timeout", "", "handler timeout, e.g. 30s")
	fs.IntVar(&spec.Task.Priority, "priority", 0, "priority -1000..1000")
	id, err := oneArg(fs, api, args, "schedules set", "schedule id", "dq schedules set ID --cron EXPR --type TYPE")
	if err != nil {
		return err
	}
	var body []byte
	if file != "" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			for _, n := range specFlags {
				if f.Name == n {
					given = append(given, "--"+n)
				}
			}
		})
		if len(given) > 0 {
			return fmt.Errorf("schedules set: give --file or the spec flags (%s), not both", strings.Join(given, ", "))
		}
		if body, err = readFileOrStdin(file, env.Stdin); err != nil {
			return fmt.Errorf("--file: %w", err)
		}
	} else {
		if spec.Cron == "" || spec.Task.Type == "" {
			return errors.New("schedules set: --cron and --type are required (or --file SPEC.json)")
		}
		spec.StartAt, spec.EndAt = start.t, end.t
		if timeout != "" {
			if spec.Task.Timeout, err = time.ParseDuration(timeout); err != nil {
				return fmt.Errorf("--timeout: %w", err)
			}
		}
		if len(headers) > 0 {
			spec.Task.Headers = headers
		}
		p, given, err := readPayload("schedules set", payload, payloadFile, binary, env.Stdin)
		if err != nil {
			return err
		}
		if given && binary {
			spec.Task.PayloadBytes = p
		} else if given {
			spec.Task.Payload = p
		}
		if body, err = json.Marshal(spec); err != nil {
			return err
		}
	}
	// The body goes as it is (a --file spec included): the daemon decodes
	// it strictly and names a wrong or unknown field.
	b, err := rawCall(ctx, api, api.httpClient(30*time.Second), http.MethodPut, "/v1/schedules/"+url.PathEscape(id), body)
	if err != nil {
		return err
	}
	if api.output == "json" {
		return printRaw(env.Stdout, b)
	}
	var s client.Schedule
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	verb := "replaced"
	if s.Created {
		verb = "created"
	}
	state := "next tick " + nextText(&s, time.Now())
	if s.Paused {
		state = "paused; it would tick next " + nextText(&s, time.Now())
	}
	_, err = fmt.Fprintf(env.Stdout, "%s %s: %s\n", s.ID, verb, state)
	return err
}

// nextText is the schedule's next tick in its zone with how far it is,
// or why there is none.
func nextText(s *client.Schedule, now time.Time) string {
	switch {
	case len(s.Next) > 0:
		return tickText(s.Next[0], now)
	case s.NextError != "":
		return "unknown (" + s.NextError + ")"
	}
	return "none (the schedule has ended)"
}

// tickText is "2030-01-02T09:30:00+01:00 (in 1h2m)".
func tickText(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	rel := "now"
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return t.Format(time.RFC3339) + " (" + rel + ")"
}

// scheduleState is running, paused or ended (the console's words, and
// dq types': a running schedule makes its ticks).
func scheduleState(s *client.Schedule) string {
	switch {
	case s.Paused:
		return "paused"
	case len(s.Next) == 0 && s.NextError == "":
		return "ended"
	}
	return "running"
}

func printSchedules(w io.Writer, list []client.Schedule) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no schedules (dq schedules set ID --cron EXPR --type TYPE creates one)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCRON\tTIMEZONE\tTYPE\tSTATE\tNEXT\tLAST")
	for i := range list {
		s := &list[i]
		next, last := "-", "-"
		if len(s.Next) > 0 {
			next = s.Next[0].Format(time.RFC3339)
		}
		if !s.LastTick.IsZero() {
			last = s.LastTick.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Cron, s.Timezone, s.Task.Type, scheduleState(s), next, last)
	}
	return tw.Flush()
}

func printSchedule(w io.Writer, s *client.Schedule, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", s.ID)
	row("cron", s.Cron)
	row("timezone", s.Timezone)
	row("state", scheduleState(s))
	row("catchup", s.Catchup)
	if !s.StartAt.IsZero() {
		row("start_at", s.StartAt.Format(time.RFC3339Nano))
	}
	if !s.EndAt.IsZero() {
		row("end_at", s.EndAt.Format(time.RFC3339Nano))
	}
	row("task", templateText(s.Task))
	row("created_at", s.CreatedAt.Format(time.RFC3339Nano))
	row("updated_at", s.UpdatedAt.Format(time.RFC3339Nano))
	if s.LastTick.IsZero() {
		row("last tick", "-")
	} else {
		row("last tick", tickText(s.LastTick, now)+" task "+s.LastTaskID)
	}
	switch {
	case s.NextError != "":
		row("next ticks", "unknown: "+s.NextError)
	case len(s.Next) == 0:
		row("next ticks", "none (the schedule has ended)")
	default:
		row("next ticks", tickText(s.Next[0], now))
		for _, t := range s.Next[1:] {
			fmt.Fprintf(tw, "\t%s\n", tickText(t, now))
		}
	}
	return tw.Flush()
}

// templateText is a task template in a line: "type report.daily, topic t,
// payload 12 bytes, max_attempts 3".
func templateText(t client.ScheduleTask) string {
	parts := []string{"type " + t.Type}
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	add("topic", t.Topic)
	add("key", t.Key)
	switch {
	case len(t.Payload) > 0:
		add("payload", task.Truncate(string(t.Payload), 60))
	case len(t.PayloadBytes) > 0:
		add("payload", fmt.Sprintf("%d bytes", len(t.PayloadBytes)))
	}
	if len(t.Headers) > 0 {
		hs := make([]string, 0, len(t.Headers))
		for k, v := range t.Headers {
			hs = append(hs, k+"="+v)
		}
		slices.Sort(hs)
		add("headers", strings.Join(hs, " "))
	}
	if t.MaxAttempts != 0 {
		add("max_attempts", fmt.Sprint(t.MaxAttempts))
	}
	if t.Timeout != 0 {
		add("timeout", t.Timeout.String())
	}
	if t.Priority != 0 {
		add("priority", fmt.Sprint(t.Priority))
	}
	return strings.Join(parts, ", ")
}
