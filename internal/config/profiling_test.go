package config_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
)

// DQ_PPROF_ADDR serves the runtime profiles while the binary runs, and
// only then; unset, nothing listens; a bad address is refused by name.
func TestWithProfiling(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	get := func() (int, string, error) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	var stderr bytes.Buffer
	err := config.WithProfiling(func(context.Context, []string, func(string) string, io.Writer) error {
		code, body, err := get()
		if err != nil || code != http.StatusOK || body == "" {
			t.Errorf("GET /debug/pprof/cmdline while running: %d %q %v", code, body, err)
		}
		return nil
	})(t.Context(), nil, env(map[string]string{config.PprofEnv: addr}), &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), addr) {
		t.Errorf("no log line naming the address: %q", stderr.String())
	}
	if _, _, err := get(); err == nil {
		t.Error("the profiles are still served after the run returned")
	}
	err = config.WithProfiling(func(context.Context, []string, func(string) string, io.Writer) error {
		if _, _, err := get(); err == nil {
			t.Error("profiles served without DQ_PPROF_ADDR")
		}
		return nil
	})(t.Context(), nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = config.WithProfiling(func(context.Context, []string, func(string) string, io.Writer) error {
		t.Error("ran with an address it cannot listen on")
		return nil
	})(t.Context(), nil, env(map[string]string{config.PprofEnv: "no-such-host.invalid:x"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), config.PprofEnv) {
		t.Fatalf("bad address: %v, want an error naming %s", err, config.PprofEnv)
	}
}
