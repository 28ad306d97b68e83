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
	"strings"
	"time"

	"github.com/delayq/delayq/client"
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

// printRaw writes a JSON answer indented (both output modes: the limits
// API's answers are small documents that read well as they are).
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

// limitRules is the body of PUT /v1/limits/{type}; any subset.
type limitRules struct {
	WindowQuota *windowQuota `json:"window_quota,omitempty"`
	TokenBucket *tokenBucket `json:"token_bucket,omitempty"`
	Concurrency *concurrency `json:"concurrency,omitempty"`
}

type windowQuota struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
}

type tokenBucket struct {
	Rate        float64 `json:"rate"`
	Burst       int64   `json:"burst"`
	Reserve     int64   `json:"reserve,omitempty"`
	MinPriority int     `json:"min_priority,omitempty"`
}

type concurrency struct {
	Limit   int64  `json:"limit"`
	SlotTTL string `json:"slot_ttl,omitempty"`
}

// runLimits is dq limits: list, get TYPE, set TYPE ..., delete TYPE.
func runLimits(ctx context.Context, env Env, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("limits "+sub, env)
	api := bindAPI(fs, env)
	switch sub {
	case "list", "get", "delete":
		return limitsRead(ctx, env, sub, fs, api, args)
	case "set":
		return limitsSet(ctx, env, fs, api, args)
	default:
		return fmt.Errorf("limits %q: list, get TYPE, set TYPE ..., delete TYPE", sub)
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
	if sub == "delete" && api.output == "text" {
		fmt.Fprintf(env.Stdout, "limits of %s deleted\n", pos[0])
		return nil
	}
	return printRaw(env.Stdout, b)
}

// limitFlags are dq limits set's rule flags.
type limitFlags struct {
	quota, burst, reserve, conc int64
	window, slotTTL             string
	rate                        float64
	minPrio                     int
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
}

// body is the rules the flags give, as the API's JSON.
func (f *limitFlags) body() ([]byte, error) {
	var r limitRules
	if f.quota > 0 {
		r.WindowQuota = &windowQuota{f.quota, f.window}
	}
	if f.rate > 0 {
		r.TokenBucket = &tokenBucket{f.rate, f.burst, f.reserve, f.minPrio}
	}
	if f.conc > 0 {
		r.Concurrency = &concurrency{f.conc, f.slotTTL}
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
	return printRaw(env.Stdout, b)
}
