package cli

import (
	"path/filepath"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/work"
)

// apps are the applications dq runs when started under their name (the
// image's /daemon, /event and /work are symlinks to /dq) or as dq app NAME.
func apps() map[string]config.RunFunc {
	return map[string]config.RunFunc{
		"daemon": daemon.Run,
		"event":  event.Run,
		"work":   work.Run,
	}
}

// RunsApp tells whether dq started with args (os.Args) runs an
// application, under its name or as dq app NAME, rather than printing its
// version or running a subcommand: its main then re-executes it with the
// runtime's monitor kept awake first (config.KeepSysmonAwake), as the
// applications' own binaries do.
func RunsApp(args []string) bool {
	if len(args) > 0 && apps()[filepath.Base(args[0])] != nil {
		return !config.IsVersionArgs(args[1:])
	}
	return len(args) > 2 && args[1] == "app" && apps()[args[2]] != nil && !config.IsVersionArgs(args[3:])
}
