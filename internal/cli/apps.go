package cli

import (
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
