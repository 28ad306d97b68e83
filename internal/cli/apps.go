package cli

import (
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/work"
)

// apps are the applications dq runs when started under their name (the
// image's /daemon, /event and /work are symlinks to /dq) or as dq app NAME.
func apps() map[string]AppFunc {
	return map[string]AppFunc{
		"daemon": daemon.Run,
		"event":  event.Run,
		"work":   work.Run,
	}
}
