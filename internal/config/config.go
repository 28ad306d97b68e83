package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"
)

// Binder registers settings on a FlagSet, each with the environment variable
// that sets it when the flag is not given.
type Binder struct {
	fs     *flag.FlagSet
	envOf  map[string]string // flag name -> env name
	secret map[string]bool
}

// NewBinder starts a flag set for a binary.
func NewBinder(name string) *Binder {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Binder{fs: fs, envOf: map[string]string{}, secret: map[string]bool{}}
}

// FlagSet is the underlying flag set.
func (b *Binder) FlagSet() *flag.FlagSet { return b.fs }

func (b *Binder) note(name, env, usage string) string {
	b.envOf[name] = env
	return usage + " (env " + env + ")"
}

// String binds a string setting.
func (b *Binder) String(p *string, name, env, def, usage string) {
	b.fs.StringVar(p, name, def, b.note(name, env, usage))
}

// Secret binds a string setting that is redacted when logged and may be
// read from the file <env>_FILE names instead (Docker secrets).
func (b *Binder) Secret(p *string, name, env, def, usage string) {
	b.String(p, name, env, def, usage+"; or the file "+env+"_FILE names")
	b.secret[name] = true
}

// Int binds an int setting.
func (b *Binder) Int(p *int, name, env string, def int, usage string) {
	b.fs.IntVar(p, name, def, b.note(name, env, usage))
}

// Int64 binds an int64 setting.
func (b *Binder) Int64(p *int64, name, env string, def int64, usage string) {
	b.fs.Int64Var(p, name, def, b.note(name, env, usage))
}

// Bool binds a bool setting.
func (b *Binder) Bool(p *bool, name, env string, def bool, usage string) {
	b.fs.BoolVar(p, name, def, b.note(name, env, usage))
}

// Duration binds a duration setting (Go syntax: "90s", "24h").
func (b *Binder) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	b.fs.DurationVar(p, name, def, b.note(name, env, usage))
}

// List binds a comma-separated list.
func (b *Binder) List(p *[]string, name, env, def, usage string) {
	*p = Split(def)
	b.fs.Var((*listValue)(p), name, b.note(name, env, usage+" (comma-separated)"))
}

type listValue []string

func (l *listValue) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *listValue) Set(s string) error {
	*l = Split(s)
	return nil
}

// Split splits a comma-separated list, dropping empty items.
func Split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ErrHelp is returned by Parse for -h/-help; the usage text was written.
var ErrHelp = flag.ErrHelp

// Parse applies args, then the environment for every flag not given, and
// fails with a message naming the variable when a value does not parse.
func (b *Binder) Parse(args []string, getenv func(string) string, usage io.Writer) error {
	if err := b.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			b.Usage(usage)
		}
		return err
	}
	if b.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", b.fs.Arg(0))
	}
	given := map[string]bool{}
	b.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, env := range b.envOf {
		if given[name] {
			continue
		}
		v := getenv(env)
		if b.secret[name] {
			fv, err := secretFile(env, v, getenv(env+"_FILE"))
			if err != nil {
				return err
			}
			if fv != "" {
				v = fv
			}
		}
		if v != "" {
			if err := b.fs.Set(name, v); err != nil {
				if b.secret[name] {
					return fmt.Errorf("%s: %w", env, err)
				}
				return fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	}
	return nil
}

// secretFile reads a secret from the file <env>_FILE names (the Docker
// secrets convention), without its trailing line break. Setting both the
// variable and its _FILE is an error: one of them would be ignored.
func secretFile(env, direct, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	if direct != "" {
		return "", fmt.Errorf("%s and %s_FILE: set one of them", env, env)
	}
	s, err := ReadSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", env, err)
	}
	return s, nil
}

// ReadSecretFile reads a secret (a password file) without its trailing
// line break; an empty file is an error.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s: the file is empty", path)
	}
	return s, nil
}

// Usage writes every setting with its environment variable and default.
func (b *Binder) Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage of %s:\n", b.fs.Name())
	b.fs.SetOutput(w)
	b.fs.PrintDefaults()
	b.fs.SetOutput(io.Discard)
}

// LogAttrs is the effective configuration for the start-up log line:
// Secret settings are REDACTED, and every URL or address in the others
// goes through RedactURL (user info passwords and secret query values).
func (b *Binder) LogAttrs() []any {
	var names []string
	b.fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	attrs := make([]any, 0, len(names))
	for _, n := range names {
		val := b.fs.Lookup(n).Value
		v := Redact(val.String())
		if l, ok := val.(*listValue); ok {
			items := make([]string, len(*l))
			for i, it := range *l {
				items[i] = RedactURL(it)
			}
			v = strings.Join(items, ",")
		}
		if b.secret[n] && v != "" {
			v = "REDACTED"
		}
		attrs = append(attrs, slog.String(n, v))
	}
	return []any{slog.Group("config", attrs...)}
}
