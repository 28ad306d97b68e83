package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	WindowQuota *struct {
		Limit  int64  `json:"limit"`
		Window string `json:"window"`
	} `json:"window_quota,omitempty"`
	TokenBucket *struct {
		Rate        float64 `json:"rate"`
		Burst       int64   `json:"burst"`
		Reserve     int64   `json:"reserve,omitempty"`
		MinPriority int     `json:"min_priority,omitempty"`
	} `json:"token_bucket,omitempty"`
	Concurrency *struct {
		Limit   int64  `json:"limit"`
		SlotTTL string `json:"slot_ttl,omitempty"`
	} `json:"concurrency,omitempty"`
}

func runLimits(ctx context.Context, env Env, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("limits "+sub, env)
	api := bindAPI(fs, env)
	hc := api.httpClient(30 * time.Second)
	typePath := func(pos []string) (string, error) {
		if len(pos) < 1 {
			return "", fmt.Errorf("limits %s: a task type is required", sub)
		}
		return "/v1/limits/" + url.PathEscape(pos[0]), nil
	}
	switch sub {
	case "list", "get", "delete":
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if err := api.check(); err != nil {
			return err
		}
		method, path := http.MethodGet, "/v1/limits"
		switch sub {
		case "list":
			if len(pos) > 0 {
				return fmt.Errorf("limits list: unexpected argument %q", pos[0])
			}
		case "get", "delete":
			if len(pos) != 1 {
				return fmt.Errorf("limits %s: exactly one task type expected", sub)
			}
			if path, err = typePath(pos); err != nil {
				return err
			}
			if sub == "delete" {
				method = http.MethodDelete
			}
		}
		b, err := rawCall(ctx, api, hc, method, path, nil)
		if err != nil {
			return err
		}
		if sub == "delete" && api.output == "text" {
			fmt.Fprintf(env.Stdout, "limits of %s deleted\n", pos[0])
			return nil
		}
		return printRaw(env.Stdout, b)
	case "set":
		var r limitRules
		var quota, burst, reserve, conc int64
		var window, slotTTL string
		var rate float64
		var minPrio int
		fs.Int64Var(&quota, "quota", 0, "window quota: at most this many per window")
		fs.StringVar(&window, "window", "1m", "window of --quota")
		fs.Float64Var(&rate, "rate", 0, "token bucket: tokens per second")
		fs.Int64Var(&burst, "burst", 0, "token bucket: capacity (default: the rate rounded up, at least 1)")
		fs.Int64Var(&reserve, "reserve", 0, "token bucket: below this many tokens only --min-priority tasks pass")
		fs.IntVar(&minPrio, "min-priority", 0, "token bucket: priority that may use the reserve")
		fs.Int64Var(&conc, "concurrency", 0, "at most this many running at once across workers")
		fs.StringVar(&slotTTL, "slot-ttl", "", "concurrency: a crashed worker's slot frees after this long (default 5m)")
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
		path, _ := typePath(pos)
		var body []byte
		if len(pos) == 2 {
			body = []byte(pos[1])
			if !json.Valid(body) {
				return errors.New("limits set: the rules are not valid JSON")
			}
		} else {
			if quota > 0 {
				r.WindowQuota = &struct {
					Limit  int64  `json:"limit"`
					Window string `json:"window"`
				}{quota, window}
			}
			if rate > 0 {
				r.TokenBucket = &struct {
					Rate        float64 `json:"rate"`
					Burst       int64   `json:"burst"`
					Reserve     int64   `json:"reserve,omitempty"`
					MinPriority int     `json:"min_priority,omitempty"`
				}{rate, burst, reserve, minPrio}
			}
			if conc > 0 {
				r.Concurrency = &struct {
					Limit   int64  `json:"limit"`
					SlotTTL string `json:"slot_ttl,omitempty"`
				}{conc, slotTTL}
			}
			if r.WindowQuota == nil && r.TokenBucket == nil && r.Concurrency == nil {
				return errors.New("limits set: give --quota, --rate or --concurrency (or the rules as JSON)")
			}
			if body, err = json.Marshal(r); err != nil {
				return err
			}
		}
		b, err := rawCall(ctx, api, hc, http.MethodPut, path, body)
		if err != nil {
			return err
		}
		return printRaw(env.Stdout, b)
	default:
		return fmt.Errorf("limits %q: list, get TYPE, set TYPE ..., delete TYPE", sub)
	}
}
