// Command dq is delayq's command-line tool: schedule and inspect tasks
// through a daemon, import tasks in bulk, probe health, run delayq in one
// process (dq dev) or one piece of its infrastructure (dq dev etcd, dq dev
// kafka). Started under the name daemon, event or work it runs that
// application (the container image links /daemon, /event and /work to /dq).
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/delayq/delayq/internal/cli"
	"github.com/delayq/delayq/internal/config"
)

func main() {
	if cli.RunsApp(os.Args) {
		config.KeepSysmonAwake(os.Stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := cli.Main(ctx, os.Args, cli.OSEnv())
	code := config.ExitCode(ctx, filepath.Base(os.Args[0]), err, os.Stderr)
	stop()
	os.Exit(code)
}
