package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/task"
)

// DefaultAddr is the daemon dq talks to when neither --addr nor DQ_ADDR is set.
const DefaultAddr = "http://127.0.0.1:7070"

// apiFlags are the flags every API command shares.
type apiFlags struct {
	addr   string
	token  string
	ca     string         // --ca: PEM file of the CA that signs an https daemon's certificate
	pool   *x509.CertPool // ca's certificates, read by check
	output string
}

func bindAPI(fs *flag.FlagSet, env Env) *apiFlags {
	f := &apiFlags{}
	fs.StringVar(&f.addr, "addr", envOr(env, "DQ_ADDR", DefaultAddr), "daemon base URL (env DQ_ADDR)")
	fs.StringVar(&f.token, "token", envOr(env, "DQ_API_TOKEN", ""), "bearer token (env DQ_API_TOKEN)")
	fs.StringVar(&f.ca, "ca", envOr(env, "DQ_CA", ""), "CA certificate file (PEM) trusted instead of the system's roots for an https --addr (env DQ_CA)")
	fs.StringVar(&f.output, "o", "text", "output: text or json")
	return f
}

func (f *apiFlags) check() error {
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("-o %q: text or json", f.output)
	}
	if !strings.Contains(f.addr, "://") {
		f.addr = "http://" + f.addr
	}
	if f.ca != "" {
		pool, err := config.LoadCA(f.ca)
		if err != nil {
			return fmt.Errorf("--ca (DQ_CA): %w", err)
		}
		f.pool = pool
	}
	return nil
}

func (f *apiFlags) client() *client.Client {
	return client.New(f.addr, client.WithToken(f.token), client.WithCA(f.pool))
}

// httpClient is a plain HTTP client for the commands that build their own
// requests (limits, import): it trusts --ca like client() does. The CA is
// read when the first request goes out, so it may be made before check.
func (f *apiFlags) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &caTransport{f: f}}
}

// caTransport is http.DefaultTransport with the --ca pool as its roots.
type caTransport struct {
	f    *apiFlags
	once sync.Once
	rt   http.RoundTripper
}

func (t *caTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if t.f.pool != nil {
			tr.TLSClientConfig = &tls.Config{RootCAs: t.f.pool, MinVersion: tls.VersionTLS12}
		}
		t.rt = tr
	})
	return t.rt.RoundTrip(r)
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// headerFlags collects repeated --header name=value.
type headerFlags map[string]string

func (h headerFlags) String() string { return fmt.Sprint(map[string]string(h)) }
func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want name=value", s)
	}
	h[k] = v
	return nil
}

func runSchedule(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("schedule", env)
	withUsage(fs, `Usage: dq schedule TYPE [--id ID] [--in 90s | --at RFC3339] [--payload JSON | --payload-file FILE] [flags]

Schedules one task of type TYPE (or --type), due in --in, at --at, or now.
Re-submitting an id answers "unchanged" and keeps the stored task: its due
time (a relative --in is not computed again: dq reschedule moves it), or,
when it had ended (succeeded, dead, cancelled), its state.`)
	api := bindAPI(fs, env)
	var t client.Task
	var in, at, timeout, payload, payloadFile string
	var binary bool
	headers := headerFlags{}
	fs.StringVar(&t.ID, "id", "", "task id (idempotency key); empty: the daemon generates one")
	fs.StringVar(&t.Type, "type", "", "task type (or the first argument)")
	fs.StringVar(&in, "in", "", "delay from now, e.g. 90s, 24h")
	fs.StringVar(&at, "at", "", "due time, RFC 3339 (e.g. 2030-01-02T15:04:05Z)")
	fs.StringVar(&payload, "payload", "", "payload: a JSON value (or raw bytes with --binary)")
	fs.StringVar(&payloadFile, "payload-file", "", "read the payload from this file (- for stdin)")
	fs.BoolVar(&binary, "binary", false, "send the payload as bytes (base64 on the wire), not JSON")
	fs.StringVar(&t.Topic, "topic", "", "Kafka topic (default: the daemon's default topic)")
	fs.StringVar(&t.Key, "key", "", "Kafka key (default: the id)")
	fs.Var(headers, "header", "extra Kafka header name=value (repeatable)")
	fs.IntVar(&t.MaxAttempts, "max-attempts", 0, "attempts before the task is dead (0: default)")
	fs.StringVar(&timeout, "timeout", "", "handler timeout, e.g. 30s")
	fs.IntVar(&t.Priority, "priority", 0, "priority -1000..1000")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && t.Type == "":
		t.Type = pos[0]
	case len(pos) > 0:
		return fmt.Errorf("schedule: unexpected argument %q", pos[len(pos)-1])
	}
	if t.Type == "" {
		return errors.New("schedule: a task type is required (dq schedule TYPE)")
	}
	if in != "" && at != "" {
		return errors.New("schedule: give --in or --at, not both")
	}
	if in != "" {
		if t.Delay, err = time.ParseDuration(in); err != nil {
			return fmt.Errorf("--in: %w", err)
		}
	}
	if at != "" {
		if t.DueAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return fmt.Errorf("--at: %w", err)
		}
	}
	if timeout != "" {
		if t.Timeout, err = time.ParseDuration(timeout); err != nil {
			return fmt.Errorf("--timeout: %w", err)
		}
	}
	if len(headers) > 0 {
		t.Headers = headers
	}
	body, given, err := readPayload("schedule", payload, payloadFile, binary, env.Stdin)
	if err != nil {
		return err
	}
	if given && binary {
		t.PayloadBytes = body
	} else if given {
		t.Payload = body
	}
	res, err := api.client().Schedule(ctx, t)
	if err != nil {
		return err
	}
	if api.output == "json" {
		return printJSON(env.Stdout, res)
	}
	if res.Journaled() {
		fmt.Fprintf(env.Stdout, "%s journaled: Redis is unreachable; the daemon keeps the task and writes it when Redis is back\n", res.ID)
		return nil
	}
	fmt.Fprintf(env.Stdout, "%s %s (%s), due %s, shard %d%s\n", res.ID, res.State, res.Outcome, dueText(res.DueAt), res.Shard, keptText(res))
	return nil
}

// keptText says what of an existing task a re-submit kept ("" when
// nothing): why the answer is not the one asked.
func keptText(r client.Result) string {
	switch {
	case r.Ended():
		return "; the task had already ended (" + r.State + "): nothing was scheduled, use another id"
	case r.KeptDueAt():
		return "; the due time of the earlier submission is kept (dq reschedule moves it)"
	}
	return ""
}

// readPayload reads a task payload from --payload or --payload-file (-
// for stdin), refusing both at once; without --binary it must be JSON.
// given is false when neither flag was set.
func readPayload(cmd, payload, payloadFile string, binary bool, stdin io.Reader) (body []byte, given bool, err error) {
	body = []byte(payload)
	if payloadFile != "" {
		if payload != "" {
			return nil, false, fmt.Errorf("%s: give --payload or --payload-file, not both", cmd)
		}
		if body, err = readFileOrStdin(payloadFile, stdin); err != nil {
			return nil, false, err
		}
	}
	if len(body) == 0 && payloadFile == "" {
		return nil, false, nil
	}
	if !binary && !json.Valid(body) {
		return nil, false, fmt.Errorf("%s: the payload is not valid JSON (use --binary for raw bytes)", cmd)
	}
	return body, true, nil
}

func readFileOrStdin(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// dueText is "2030-01-02T15:04:05.000Z (in 1h2m)".
func dueText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t).Round(time.Second)
	rel := "now"
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + rel + ")"
}

// oneID parses an API command taking exactly one id.
func oneID(name string, fs *flag.FlagSet, args []string) (string, error) {
	return oneArg(fs, nil, args, name, "task id", "")
}

// oneArg parses a command taking exactly one argument (what, e.g. "schedule
// id"), checking api's flags first when api is set. usage, when set, is
// named in the error, e.g. "dq schedules get ID".
func oneArg(fs *flag.FlagSet, api *apiFlags, args []string, name, what, usage string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if api != nil {
		if err := api.check(); err != nil {
			return "", err
		}
	}
	if len(pos) != 1 {
		if usage != "" {
			what += " expected (" + usage + ")"
		} else {
			what += " expected"
		}
		return "", fmt.Errorf("%s: exactly one %s, got %d arguments", name, what, len(pos))
	}
	return pos[0], nil
}

func runGet(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("get", env)
	withUsage(fs, `Usage: dq get ID [flags]

Shows the task ID: its state, due time, attempts, payload, last error, the
time of death of a dead task, and the fire receipt of its latest copy.`)
	api := bindAPI(fs, env)
	id, err := oneID("get", fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	if api.output == "json" {
		// The daemon's own JSON, as it sent it.
		b, err := rawCall(ctx, api, api.httpClient(30*time.Second), http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil)
		if err != nil {
			return err
		}
		return printRaw(env.Stdout, b)
	}
	t, err := api.client().Get(ctx, id)
	if err != nil {
		return err
	}
	printTask(env.Stdout, t)
	return nil
}

func printTask(w io.Writer, t *client.TaskInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("id", t.ID)
	row("type", t.Type)
	row("state", t.State)
	row("due", dueText(t.DueAt))
	row("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	row("shard", t.Shard)
	if t.Topic != "" {
		row("topic", t.Topic)
	}
	if t.Key != "" {
		row("key", t.Key)
	}
	for k, v := range t.Headers {
		row("header "+k, v)
	}
	if t.Timeout != 0 {
		row("timeout", time.Duration(t.Timeout))
	}
	if t.Priority != 0 {
		row("priority", t.Priority)
	}
	switch {
	case len(t.Payload) > 0:
		row("payload", string(t.Payload))
	case len(t.PayloadBytes) > 0:
		row("payload", fmt.Sprintf("%d bytes (binary)", len(t.PayloadBytes)))
	}
	if t.LastError != "" {
		row("last error", t.LastError)
	}
	if !t.DiedAt.IsZero() {
		row("died at", timeText(t.DiedAt))
	}
	if t.HasReceipt() {
		// the fire receipt: what Kafka acknowledged for the latest copy
		row("fired at", fmt.Sprintf("%s (attempt %d)", timeText(t.FiredAt), t.FiredAttempt))
		row("late", time.Duration(t.LateMs)*time.Millisecond)
		row("partition/offset", fmt.Sprintf("%d/%d", t.Partition, t.Offset))
		row("leader token", t.LeaderToken)
	}
	if t.AttemptsDropped > 0 {
		row("earlier attempts", fmt.Sprintf("%d not kept", t.AttemptsDropped))
	}
	for _, a := range t.Attempts {
		row(fmt.Sprintf("attempt %d", a.Attempt), attemptText(a))
	}
	tw.Flush()
}

// attemptText is one line of a task's attempt history: its outcome, when
// it ran and for how long (when known), and its error.
func attemptText(a client.Attempt) string {
	s := a.Outcome
	switch {
	case !a.StartedAt.IsZero() && !a.EndedAt.IsZero():
		s += fmt.Sprintf(", started %s, took %s", timeText(a.StartedAt), a.EndedAt.Sub(a.StartedAt))
	case !a.EndedAt.IsZero():
		s += ", ended " + timeText(a.EndedAt)
	}
	if a.Error != "" {
		s += ": " + a.Error
	}
	return s
}

func runReschedule(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("reschedule", env)
	withUsage(fs, `Usage: dq reschedule ID (--in 10m | --at RFC3339) [flags]

Moves the waiting task ID (scheduled, retrying or paused) to a new due time.`)
	api := bindAPI(fs, env)
	var in, at string
	fs.StringVar(&in, "in", "", "new delay from now, e.g. 10m")
	fs.StringVar(&at, "at", "", "new due time, RFC 3339")
	id, err := oneID("reschedule", fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	var due time.Time
	switch {
	case (in == "") == (at == ""):
		return errors.New("reschedule: give exactly one of --in and --at")
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil {
			return fmt.Errorf("--in: %w", err)
		}
		due, err = api.client().RescheduleIn(ctx, id, d)
		if err != nil {
			return err
		}
	default:
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("--at: %w", err)
		}
		due, err = api.client().Reschedule(ctx, id, t)
		if err != nil {
			return err
		}
	}
	if api.output == "json" {
		return printJSON(env.Stdout, map[string]any{"id": id, "due_at": due})
	}
	fmt.Fprintf(env.Stdout, "%s rescheduled: due %s\n", id, dueText(due))
	return nil
}

func runCancel(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("cancel", env)
	withUsage(fs, `Usage: dq cancel ID [flags]

Cancels the waiting task ID; dq tasks cancel cancels many.`)
	api := bindAPI(fs, env)
	id, err := oneID("cancel", fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	if err := api.client().Cancel(ctx, id); err != nil {
		return err
	}
	if api.output == "json" {
		return printJSON(env.Stdout, map[string]string{"id": id, "state": "cancelled"})
	}
	fmt.Fprintf(env.Stdout, "%s cancelled\n", id)
	return nil
}

func runStats(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("stats", env)
	withUsage(fs, `Usage: dq stats [--shards] [flags]

The totals of the namespace and the figures of its busy shards.`)
	api := bindAPI(fs, env)
	all := fs.Bool("shards", false, "list every shard, not only the busy ones")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	s, err := api.client().Stats(ctx)
	if err != nil {
		return err
	}
	if api.output == "json" {
		return printJSON(env.Stdout, s)
	}
	w := env.Stdout
	redis := "up"
	if !s.RedisUp {
		redis = "DOWN: " + s.RedisError
	}
	fmt.Fprintf(w, "namespace %s, %d shards, redis %s, journal %d\n", s.Namespace, s.ShardCount, redis, s.JournalDepth)
	fmt.Fprintf(w, "scheduled %d, firing %d, dead %d\n", s.Totals.Scheduled, s.Totals.Firing, s.Totals.Dead)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\tscheduled\tfiring\tdead\tleader token\tearliest due\t")
	for _, sh := range s.Shards {
		if !*all && sh.Scheduled == 0 && sh.Firing == 0 && sh.Dead == 0 {
			continue
		}
		due := "-"
		if sh.EarliestDue != nil {
			due = dueText(*sh.EarliestDue)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t\n", sh.Shard, sh.Scheduled, sh.Firing, sh.Dead, sh.LeaderToken, due)
	}
	return tw.Flush()
}

const deadUsage = `Usage: dq dead list [--limit N] [flags]
       dq dead redrive (ID... | --type T | --all) [flags]
       dq dead delete (ID... | --type T | --all) [flags]

  list     dead tasks, most recent first (dq tasks list --state dead walks
           them all, oldest first, with filters)
  redrive  schedule dead tasks again now, with fresh attempts: the ids
           given, every dead task of a type, or all of them
  delete   forget dead tasks for good, chosen the same way

With one ID, redrive and delete report a task that is not dead as an
error; otherwise they print how many tasks they changed, skip the ones
that are not dead, and are safe to repeat.

dq dead SUBCOMMAND -h lists its flags (--addr, --token, --ca, -o json).`

func runDead(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(env.Stderr, deadUsage)
		if len(args) > 0 && isHelp(args[0]) {
			return ErrHelp
		}
		return errors.New("dead: list, redrive (ID... | --type T | --all) or delete (ID... | --type T | --all)")
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("dead "+sub, env)
	api := bindAPI(fs, env)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), deadUsage+"\n\nFlags:\n")
		fs.PrintDefaults()
	}
	switch sub {
	case "list":
		limit := fs.Int("limit", 100, "at most this many, most recent first")
		if err := parseNoArgs(fs, args); err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		if api.output == "json" {
			b, err := rawCall(ctx, api, api.httpClient(30*time.Second), http.MethodGet, "/v1/dead?limit="+strconv.Itoa(*limit), nil)
			if err != nil {
				return err
			}
			return printRaw(env.Stdout, b)
		}
		dead, err := api.client().ListDead(ctx, *limit)
		if err != nil {
			return err
		}
		if len(dead) == 0 {
			fmt.Fprintln(env.Stdout, "no dead tasks")
			return nil
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tATTEMPTS\tDIED\tLAST ERROR")
		for _, d := range dead {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID, d.Type, d.Attempt, d.DiedAt.UTC().Format(time.RFC3339), oneLine(d.LastError, 80))
		}
		return tw.Flush()
	case "redrive":
		typ := fs.String("type", "", "redrive every dead task of this type")
		all := fs.Bool("all", false, "redrive every dead task")
		ids, err := parse(fs, args)
		if err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		if len(ids) != 1 || *typ != "" || *all {
			return deadBulk(ctx, env, api, sub, ids, *typ, *all)
		}
		id := ids[0]
		due, err := api.client().Redrive(ctx, id)
		if err != nil {
			return err
		}
		if api.output == "json" {
			return printJSON(env.Stdout, map[string]any{"id": id, "state": "scheduled", "due_at": due})
		}
		fmt.Fprintf(env.Stdout, "%s redriven: due %s\n", id, dueText(due))
		return nil
	case "delete":
		typ := fs.String("type", "", "delete every dead task of this type")
		all := fs.Bool("all", false, "delete every dead task")
		ids, err := parse(fs, args)
		if err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		if len(ids) != 1 || *typ != "" || *all {
			return deadBulk(ctx, env, api, sub, ids, *typ, *all)
		}
		id := ids[0]
		if err := api.client().DeleteDead(ctx, id); err != nil {
			return err
		}
		if api.output == "json" {
			return printJSON(env.Stdout, map[string]string{"id": id, "state": "deleted"})
		}
		fmt.Fprintf(env.Stdout, "%s deleted\n", id)
		return nil
	default:
		fmt.Fprintln(env.Stderr, deadUsage)
		return fmt.Errorf("dead %q: list, redrive or delete", sub)
	}
}

func oneLine(s string, maxLen int) string {
	return task.Truncate(strings.Join(strings.Fields(s), " "), maxLen-1)
}

// subcommand splits "dq <group> [sub] [flags] [args]" (sub defaults to
// list) and makes the sub-command's flag set with the API flags and the
// group's usage text.
func subcommand(env Env, group, usage string, args []string) (sub string, fs *flag.FlagSet, api *apiFlags, rest []string) {
	sub = "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs = newFlagSet(group+" "+sub, env)
	api = bindAPI(fs, env)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	return sub, fs, api, args
}

// listPrelude is the common start of a list sub-command: no arguments,
// table output by default, the API settings checked, and with -o json the
// daemon's answer to path printed as is (raw true: nothing left to do).
func listPrelude(ctx context.Context, env Env, fs *flag.FlagSet, api *apiFlags, args []string, path string) (raw bool, err error) {
	if err := parseNoArgs(fs, args); err != nil {
		return false, err
	}
	tableOutput(api)
	if err := api.check(); err != nil {
		return false, err
	}
	if api.output == "json" {
		return true, rawGet(ctx, api, path, env.Stdout)
	}
	return false, nil
}
