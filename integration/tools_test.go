package integration

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// requireTool finds a tool a test needs with find, or skips with a named
// reason — a failure in CI (CI set to anything but false/0) or when the
// test's own variable env (DQ_REQUIRE_<TOOL>, which .ci/run sets) is.
func requireTool(t *testing.T, what, env, hint string, find func() (string, error)) string {
	t.Helper()
	path, err := find()
	if err == nil {
		return path
	}
	if fail, msg := missingTool(what, env, hint, err, os.Getenv("CI"), os.Getenv(env)); fail {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
	return ""
}

// missingTool decides what a missing tool means: a named skip, or a
// failure (see requireTool).
func missingTool(what, env, hint string, err error, ci, require string) (fail bool, msg string) {
	if hint != "" {
		hint += "; "
	}
	if require != "" || (ci != "" && ci != "false" && ci != "0") {
		return true, fmt.Sprintf("%s: %v, and CI or %s is set (%sit must run here)", what, err, env, hint)
	}
	return false, fmt.Sprintf("%s: %v (%sset %s=1 to make this a failure)", what, err, hint, env)
}

// TestMissingTool: without its tool a test is a named skip, or a failure
// in CI or with its DQ_REQUIRE_ variable.
func TestMissingTool(t *testing.T) {
	err := errors.New("no chromium on PATH")
	for _, tc := range []struct {
		ci, require string
		fail        bool
	}{
		{"", "", false}, {"false", "", false}, {"0", "", false},
		{"true", "", true}, {"1", "", true}, {"", "1", true},
	} {
		fail, msg := missingTool("console browser test", "DQ_REQUIRE_CHROMIUM", "", err, tc.ci, tc.require)
		if fail != tc.fail || !strings.HasPrefix(msg, "console browser test: no chromium on PATH") || !strings.Contains(msg, "DQ_REQUIRE_CHROMIUM") {
			t.Errorf("CI=%q DQ_REQUIRE_CHROMIUM=%q: fail %v (want %v), %q", tc.ci, tc.require, fail, tc.fail, msg)
		}
	}
}
