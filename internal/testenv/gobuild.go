package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// GoTool is the go command of the toolchain running the tests.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// GoBuild builds pkgs (e.g. "./cmd/daemon") of the module at root into
// dir the way the images are built: static (CGO_ENABLED=0), -trimpath,
// with tags when not empty, so that every suite shares the compiled
// packages through the build cache. The error names the command and
// carries its output; an ended ctx stops the build.
func GoBuild(ctx context.Context, root, dir, tags string, pkgs ...string) error {
	args := []string{"build", "-trimpath"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, GoTool(), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
