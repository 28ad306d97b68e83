package config

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// IsVersionArgs reports whether args ask for the version: "version",
// "--version" or "-version" alone.
func IsVersionArgs(args []string) bool {
	return len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version")
}

// Version is the one-line version of a binary from its build info: the
// module version, the VCS revision and commit time (with "+dirty" when
// built from a modified tree) and the Go version, e.g.
// "daemon v1.2.0 (rev 13be76f1c2a3, 2026-11-24T02:00:00Z) go1.26.0".
func Version(binary string) string {
	bi, ok := debug.ReadBuildInfo()
	return version(binary, bi, ok)
}

func version(binary string, bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return fmt.Sprintf("%s (devel, no build info) %s", binary, runtime.Version())
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	var vcs []string
	if rev := s["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if s["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		vcs = append(vcs, "rev "+rev)
	}
	if t := s["vcs.time"]; t != "" {
		vcs = append(vcs, t)
	}
	out := binary + " " + v
	if len(vcs) > 0 {
		out += " (" + strings.Join(vcs, ", ") + ")"
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return out + " " + goVersion
}
