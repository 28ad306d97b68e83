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
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	dqapi "github.com/delayq/delayq/api"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/task"
)

// rawCall sends one request to the daemon and returns the body of a 2xx
// answer; any other answer becomes a *client.APIError.
func rawCall(ctx context.Context, api *apiFlags, hc *http.Client, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(api.addr, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil || (method != http.MethodGet && method != http.MethodHead) {
		req.Header.Set("Content-Type", "application/json") // every write, body or not (else 415)
	}
	req.Header.Set("Accept", "application/json")
	if api.token != "" {
		req.Header.Set("Authorization", "Bearer "+api.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var eb struct {
			Error *client.APIError `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			return nil, &client.APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(b))}
		}
		eb.Error.Status = resp.StatusCode
		return nil, eb.Error
	}
	return b, nil
}

// printRaw writes a JSON answer indented.
func printRaw(w io.Writer, b []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		_, err = w.Write(b)
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

const limitsUsage = `Usage: dq limits [list] [flags]
       dq limits get TYPE [flags]
       dq limits set TYPE (--quota N [--window 1m] | --rate R [--burst B] | --concurrency C [--slot-ttl 5m])...
                [--scope key|header:NAME [--unordered]] [flags]
       dq limits set TYPE RULES-JSON [flags]
       dq limits delete TYPE [flags]

  list    every type's rules and their live usage
  get     one type's rules and usage
  set     replace a type's rules: any of the three kinds, from flags or as
          the JSON of PUT /v1/limits/{type}
          ('{"window_quota":{"limit":100,"window":"1m"}}')
  delete  remove a type's rules (its tasks run unlimited)

--scope key applies every limit to each task key separately (a task
without a key counts under its id), --scope header:NAME to each value of
the task header NAME (tasks without it share one value); the tasks of one
value then start in due order unless --unordered. get and list show the
busiest values of such a rule.

Work processes follow the rules live. -o json prints the daemon's answers.`

// runLimits is dq limits: list, get TYPE, set TYPE ..., delete TYPE.
func runLimits(ctx context.Context, env Env, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("limits "+sub, env)
	api := bindAPI(fs, env)
	fs.Usage = func() { limitsHelp(fs, sub) }
	switch sub {
	case "list", "get", "delete":
		return limitsRead(ctx, env, sub, fs, api, args)
	case "set":
		return limitsSet(ctx, env, fs, api, args)
	default:
		return fmt.Errorf("limits %q: list, get TYPE, set TYPE ..., delete TYPE", sub)
	}
}

// limitsHelp prints the usage of dq limits, the flags of sub, and those
// of set's rules when sub is not set (dq limits -h: every sub-command's
// flags in one text).
func limitsHelp(fs *flag.FlagSet, sub string) {
	w := fs.Output()
	fmt.Fprint(w, limitsUsage+"\n\nFlags:\n")
	fs.PrintDefaults()
	if sub != "set" {
		set := flag.NewFlagSet("limits set", flag.ContinueOnError)
		set.SetOutput(w)
		new(limitFlags).bind(set)
		fmt.Fprint(w, "\nFlags of set (the rules):\n")
		set.PrintDefaults()
	}
}

// limitsPath is the API path of a task type's limits.
func limitsPath(typ string) string { return "/v1/limits/" + url.PathEscape(typ) }

// limitsRead is dq limits list, get TYPE and delete TYPE.
func limitsRead(ctx context.Context, env Env, sub string, fs *flag.FlagSet, api *apiFlags, args []string) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	method, path := http.MethodGet, "/v1/limits"
	switch {
	case sub == "list" && len(pos) > 0:
		return fmt.Errorf("limits list: unexpected argument %q", pos[0])
	case sub == "list":
	case len(pos) != 1:
		return fmt.Errorf("limits %s: exactly one task type expected", sub)
	default:
		path = limitsPath(pos[0])
		if sub == "delete" {
			method = http.MethodDelete
		}
	}
	b, err := rawCall(ctx, api, api.httpClient(30*time.Second), method, path, nil)
	if err != nil {
		return err
	}
	switch {
	case api.output == "json":
		return printRaw(env.Stdout, b)
	case sub == "delete":
		fmt.Fprintf(env.Stdout, "limits of %s deleted\n", pos[0])
		return nil
	case sub == "list":
		var l dqapi.Limits
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("limits: decode answer: %w", err)
		}
		return printLimits(env.Stdout, l.Limits)
	}
	return printLimit(env.Stdout, b)
}

// printLimit prints one type's limits (the answer b of GET or PUT
// /v1/limits/{type}) as a table.
func printLimit(w io.Writer, b []byte) error {
	var l dqapi.TypeLimit
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("limits: decode answer: %w", err)
	}
	return printLimits(w, []dqapi.TypeLimit{l})
}

// printLimits prints limits as a table: type, rules, live usage; then,
// for each keyed rule whose usage lists values, its busiest values.
func printLimits(w io.Writer, ls []dqapi.TypeLimit) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintln(w, "no limits (dq limits set TYPE --quota N | --rate R | --concurrency C sets one)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tRULES\tUSAGE")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Type, scopedRuleText(&l.Rule), usageText(l))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range ls {
		if err := printKeys(w, l); err != nil {
			return err
		}
	}
	return nil
}

// scopedRuleText is ruleText (types.go) with a keyed rule's scope in
// front, "per key: 1 running" or "per header:tenant (unordered): 10/s
// burst 10", so that a per-value limit never reads as the type's.
func scopedRuleText(r *dqapi.LimitRule) string {
	if r == nil || !r.Keyed() {
		return ruleText(r)
	}
	scope := "per " + oneLine(r.Scope, 80)
	if r.Unordered {
		scope += " (unordered)"
	}
	return scope + ": " + ruleText(r)
}

// maxKeyText bounds a value as printed: a header value may be long.
const maxKeyText = 48

// printKeys prints the busiest values of a keyed rule (the daemon's
// usage.keys, already bounded and ordered), one short table per type;
// nothing for a type-wide rule or when no value is listed.
func printKeys(w io.Writer, l dqapi.TypeLimit) error {
	if !l.Rule.Keyed() || l.Usage == nil || len(l.Usage.Keys) == 0 {
		return nil
	}
	r := &l.Rule
	fmt.Fprintf(w, "\nbusiest values of %s (%s; %d of %d active):\n", l.Type, oneLine(r.Scope, 80), len(l.Usage.Keys), max(l.Usage.ActiveKeys, int64(len(l.Usage.Keys))))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  VALUE\tRUNNING\tWAITING\tWINDOW\tTOKENS")
	for _, k := range l.Usage.Keys {
		running, window, tokens := "-", "-", "-"
		if c := r.Concurrency; c != nil {
			running = fmt.Sprintf("%d/%d", k.Running, c.Limit)
		}
		if q := r.WindowQuota; q != nil {
			window = fmt.Sprintf("%d/%d", k.WindowCount, q.Limit)
		}
		if r.TokenBucket != nil {
			tokens = strconv.FormatFloat(k.Tokens, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", keyText(k.Key), running, k.Waiting, window, tokens)
	}
	return tw.Flush()
}

// keyText is a value as one printable cell: quoted when it is empty (the
// value of the tasks without the header) or holds white space or control
// characters, which would break the table.
func keyText(k string) string {
	if k == "" || strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return task.Truncate(strconv.Quote(k), maxKeyText)
	}
	return task.Truncate(k, maxKeyText)
}

// usageText is the live usage of l's rules: "window 3/100, tokens 2.5,
// running 1/5"; for a keyed rule the active values and the sums over
// them ("12 active, running 3, window 40"), a per-value limit being no
// bound of a sum; the reason when it could not be read.
func usageText(l dqapi.TypeLimit) string {
	if l.UsageError != "" {
		return "unknown: " + oneLine(l.UsageError, 60)
	}
	u := l.Usage
	if u == nil {
		return "-"
	}
	if l.Rule.Keyed() {
		parts := []string{fmt.Sprintf("%d active", u.ActiveKeys)}
		if l.Rule.Concurrency != nil {
			parts = append(parts, fmt.Sprintf("running %d", u.Running))
		}
		if l.Rule.WindowQuota != nil {
			parts = append(parts, fmt.Sprintf("window %d", u.WindowCount))
		}
		return strings.Join(parts, ", ")
	}
	var parts []string
	if q := l.Rule.WindowQuota; q != nil {
		parts = append(parts, fmt.Sprintf("window %d/%d", u.WindowCount, q.Limit))
	}
	if l.Rule.TokenBucket != nil {
		parts = append(parts, "tokens "+strconv.FormatFloat(u.Tokens, 'f', 1, 64))
	}
	if c := l.Rule.Concurrency; c != nil {
		parts = append(parts, fmt.Sprintf("running %d/%d", u.Running, c.Limit))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// limitFlags are dq limits set's rule flags.
type limitFlags struct {
	quota, burst, reserve, conc int64
	window, slotTTL, scope      string
	rate                        float64
	minPrio                     int
	unordered                   bool
}

func (f *limitFlags) bind(fs *flag.FlagSet) {
	fs.Int64Var(&f.quota, "quota", 0, "window quota: at most this many per window")
	fs.StringVar(&f.window, "window", "1m", "window of --quota")
	fs.Float64Var(&f.rate, "rate", 0, "token bucket: tokens per second")
	fs.Int64Var(&f.burst, "burst", 0, "token bucket: capacity (default: the rate rounded up, at least 1)")
	fs.Int64Var(&f.reserve, "reserve", 0, "token bucket: below this many tokens only --min-priority tasks pass")
	fs.IntVar(&f.minPrio, "min-priority", 0, "token bucket: priority that may use the reserve")
	fs.Int64Var(&f.conc, "concurrency", 0, "at most this many running at once across workers")
	fs.StringVar(&f.slotTTL, "slot-ttl", "", "concurrency: a crashed worker's slot frees after this long (default 5m)")
	fs.StringVar(&f.scope, "scope", "", "what each limit counts: type (the default), key (each task key) or header:NAME (each value of a header)")
	fs.BoolVar(&f.unordered, "unordered", false, "with --scope key or header:NAME: a value's tasks need not start in due order")
}

// body is the rules the flags give, as the API's JSON (api.LimitRule, the
// wire type the daemon reads).
func (f *limitFlags) body() ([]byte, error) {
	r := dqapi.LimitRule{Scope: f.scope, Unordered: f.unordered}
	if f.quota > 0 {
		w, err := time.ParseDuration(f.window)
		if err != nil {
			return nil, fmt.Errorf("limits set: --window: %w", err)
		}
		r.WindowQuota = &dqapi.WindowQuota{Limit: f.quota, Window: dqapi.Duration(w)}
	}
	if f.rate > 0 {
		r.TokenBucket = &dqapi.TokenBucket{Rate: f.rate, Burst: f.burst, Reserve: f.reserve, MinPriority: f.minPrio}
	}
	if f.conc > 0 {
		r.Concurrency = &dqapi.Concurrency{Limit: f.conc}
		if f.slotTTL != "" {
			ttl, err := time.ParseDuration(f.slotTTL)
			if err != nil {
				return nil, fmt.Errorf("limits set: --slot-ttl: %w", err)
			}
			r.Concurrency.SlotTTL = dqapi.Duration(ttl)
		}
	}
	if r.WindowQuota == nil && r.TokenBucket == nil && r.Concurrency == nil {
		return nil, errors.New("limits set: give --quota, --rate or --concurrency (or the rules as JSON)")
	}
	return json.Marshal(r)
}

// limitsSet is dq limits set TYPE [RULES-JSON], or TYPE with rule flags.
func limitsSet(ctx context.Context, env Env, fs *flag.FlagSet, api *apiFlags, args []string) error {
	var f limitFlags
	f.bind(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return errors.New(`limits set: TYPE [RULES-JSON], or TYPE with --quota/--rate/--concurrency flags`)
	}
	var body []byte
	if len(pos) == 2 {
		if f.scope != "" || f.unordered {
			// RULES-JSON is sent as written: a flag merged into it would
			// be a second, silent source of the rule.
			return errors.New(`limits set: --scope and --unordered go with the rule flags; with RULES-JSON write "scope" and "unordered" in it`)
		}
		body = []byte(pos[1])
		if !json.Valid(body) {
			return errors.New("limits set: the rules are not valid JSON")
		}
	} else if body, err = f.body(); err != nil {
		return err
	}
	b, err := rawCall(ctx, api, api.httpClient(30*time.Second), http.MethodPut, limitsPath(pos[0]), body)
	if err != nil {
		return err
	}
	if api.output == "json" {
		return printRaw(env.Stdout, b)
	}
	return printLimit(env.Stdout, b)
}
