// Package compose holds delayq's docker compose stack (compose.yaml,
// compose.local.yaml for machines without an image registry, and
// compose.tls.yaml with secured connections everywhere) and loads it
// with the Compose Specification's reference parser, so that tests can
// check it and the container integration tier can start the same services.
package compose

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

//go:embed compose.yaml compose.local.yaml compose.tls.yaml
var files embed.FS

// File names, relative to this directory.
const (
	Main  = "compose.yaml"
	Local = "compose.local.yaml"
	TLS   = "compose.tls.yaml"
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
	return LoadFiles(ctx, env, names...)
}

// LoadFiles parses the named files of this directory in order, each on
// top of the ones before (`docker compose -p delayq -f A -f B ...`), with
// env as the environment for ${VAR} interpolation (nil: none).
func LoadFiles(ctx context.Context, env map[string]string, names ...string) (*types.Project, error) {
	if len(names) == 0 {
		return nil, errors.New("load: no file named")
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
