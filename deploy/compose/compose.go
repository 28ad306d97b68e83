// Package compose holds delayq's docker compose stack (compose.yaml, and
// compose.local.yaml for machines without an image registry) and loads it
// with the Compose Specification's reference parser, so that tests can
// check it and the container integration tier can start the same services.
package compose

import (
	"context"
	"embed"
	"fmt"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

//go:embed compose.yaml compose.local.yaml
var files embed.FS

// File names, relative to this directory.
const (
	Main  = "compose.yaml"
	Local = "compose.local.yaml"
)

// Content returns the bytes of one of the files.
func Content(name string) ([]byte, error) { return files.ReadFile(name) }

// Load parses compose.yaml — and compose.local.yaml on top when local —
// with env as the environment for ${VAR} interpolation (nil: none, so
// every default applies), as `docker compose -p delayq` would.
func Load(ctx context.Context, local bool, env map[string]string) (*types.Project, error) {
	names := []string{Main}
	if local {
		names = append(names, Local)
	}
	details := types.ConfigDetails{WorkingDir: ".", Environment: types.Mapping(env)}
	if details.Environment == nil {
		details.Environment = types.Mapping{}
	}
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		details.ConfigFiles = append(details.ConfigFiles, types.ConfigFile{Filename: n, Content: b})
	}
	p, err := loader.LoadWithContext(ctx, details, func(o *loader.Options) {
		o.SetProjectName("delayq", true)
		o.SkipResolveEnvironment = false
	})
	if err != nil {
		return nil, fmt.Errorf("load %v: %w", names, err)
	}
	return p, nil
}
