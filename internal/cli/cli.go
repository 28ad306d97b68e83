package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/delayq/delayq/internal/config"
)

// Env is what a command may use of the outside world; tests pass their own.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// OSEnv is the process's standard streams and environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// ErrHelp is returned after a usage text was printed because -h was given;
// the caller exits 0.
var ErrHelp = flag.ErrHelp

// Main runs dq with args as os.Args: args[0] names the program. Under the
// name of an application (daemon, event, work: a symlink to dq) it runs
// that application with args[1:]; otherwise it runs a dq command.
func Main(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		args = []string{"dq"}
	}
	if name := filepath.Base(args[0]); apps()[name] != nil {
		return runNamedApp(ctx, env, name, args[1:])
	}
	return Run(ctx, args[1:], env)
}

// runNamedApp runs an application, or prints its version for "version"
// and "--version".
func runNamedApp(ctx context.Context, env Env, name string, args []string) error {
	if config.IsVersionArgs(args) {
		_, err := fmt.Fprintln(env.Stdout, config.Version(name))
		return err
	}
	return config.WithProcess(name, apps()[name])(ctx, args, env.Getenv, env.Stderr)
}

// command is one dq subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env Env, args []string) error
}

func commands() []command {
	return []command{
		{"schedule", "schedule a task (dq schedule TYPE [--id ID] [--in 90s | --at RFC3339] [--payload JSON])", runSchedule},
		{"get", "show a task (dq get ID)", runGet},
		{"reschedule", "move a waiting task (dq reschedule ID --in 10m | --at RFC3339)", runReschedule},
		{"cancel", "cancel a waiting task (dq cancel ID)", runCancel},
		{"stats", "totals and per-shard figures", runStats},
		{"tasks", "search tasks, cancel many: dq tasks list [--state S] [--type T] [--due-before T] [--all] | dq tasks cancel (ID... | --type T | --all)", runTasks},
		{"dead", "dead tasks: dq dead list [--limit N] | dq dead redrive (ID... | --type T | --all) | dq dead delete (ID... | --type T | --all)", runDead},
		{"types", "task types: dq types [list] | dq types pause TYPE | dq types resume TYPE", runTypes},
		{"schedules", "periodic tasks: dq schedules [list] | get ID | set ID --cron EXPR --type TYPE [--timezone TZ] [--payload JSON] [--catchup none|last|all] | set ID --file SPEC.json | delete ID | pause ID | resume ID", runSchedules},
		{"cluster", "each shard's leader, backlog and overdue tasks; each process's readiness (dq cluster [-o json])", runCluster},
		{"limits", "rate limits per task type: dq limits [list] | get TYPE | set TYPE --quota N --window 1m | --rate R [--burst B] | --concurrency C [--slot-ttl 5m] | RULES-JSON | delete TYPE", runLimits},
		{"shards", "the shard map: dq shards [-o json] | dq shards grow N [--wait] (grow the shard count online)", runShards},
		{"import", "bulk schedule from a JSON Lines file, resumable (dq import FILE.jsonl)", runImport},
		{"acl", "the least privileges of a namespace: the Redis ACL, etcd role and Kafka ACLs to grant (dq acl [--namespace NS] [--user U])", runACL},
		{"health", "probe a /healthz URL or a Kafka broker; exit 1 when unhealthy (for container healthchecks)", runHealth},
		{"dev", "run delayq in one process (dq dev [--demo] [--tls]), or one piece of it: dq dev etcd | dq dev kafka | dq dev sink | dq dev certs", runDev},
		{"app", "run an application by name: dq app daemon|event|work [flags]", runApp},
		{"version", "print the version, VCS revision and Go version of this build (also dq --version)", runVersion},
	}
}

// Run runs the dq command named by args[0].
func Run(ctx context.Context, args []string, env Env) error {
	if config.IsVersionArgs(args) {
		return runVersion(ctx, env, nil)
	}
	if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
		usage(env.Stderr)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
	}
	usage(env.Stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "dq — delayq's command-line tool\n\nUsage: dq COMMAND [flags] [args]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nAPI commands talk to a daemon: --addr (DQ_ADDR, default http://127.0.0.1:7070), --token (DQ_API_TOKEN), --ca (DQ_CA: CA file for an https daemon), -o json for machine output.")
	fmt.Fprintln(w, "Run dq COMMAND -h for its flags.")
}

func runVersion(_ context.Context, env Env, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("version: unexpected argument %q", args[0])
	}
	_, err := fmt.Fprintln(env.Stdout, config.Version("dq"))
	return err
}

// isHelp reports whether arg asks for a usage text.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func runApp(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintf(env.Stderr, "Usage: dq app NAME [flags]\n\nRuns the application NAME (one of %s) in this process;\n"+
			"dq app NAME -h lists its settings, dq app NAME version prints its version.\n", strings.Join(appNames(), ", "))
		if len(args) == 0 {
			return fmt.Errorf("app: name one of %s", strings.Join(appNames(), ", "))
		}
		return ErrHelp
	}
	if apps()[args[0]] == nil {
		return fmt.Errorf("app %q: not one of %s", args[0], strings.Join(appNames(), ", "))
	}
	return runNamedApp(ctx, env, args[0], args[1:])
}

func appNames() []string {
	var names []string
	for n := range apps() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// newFlagSet is a flag set whose errors and usage go to env.Stderr.
func newFlagSet(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("dq "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// withUsage makes -h (and a flag error) print usage — the command line
// with its arguments, then what the command does — before the flags.
func withUsage(fs *flag.FlagSet, usage string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), strings.TrimRight(usage, "\n")+"\n\nFlags:\n")
		fs.PrintDefaults()
	}
}

// parse parses flags and positional arguments in any order ("dq get ID -o
// json" as well as "dq get -o json ID"); everything after "--" is
// positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// A literal "--" ends flag parsing; keep what follows verbatim.
		dashdash := -1
		for i, a := range args {
			if a == "--" {
				dashdash = i
				break
			}
		}
		head, tail := args, []string(nil)
		if dashdash >= 0 {
			head, tail = args[:dashdash], args[dashdash+1:]
		}
		if err := fs.Parse(head); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, rest[0])
		args = append(append([]string(nil), rest[1:]...), func() []string {
			if dashdash >= 0 {
				return append([]string{"--"}, tail...)
			}
			return nil
		}()...)
	}
}

// envOr returns getenv(name) when it is set, def otherwise.
func envOr(env Env, name, def string) string {
	if env.Getenv != nil {
		if v := env.Getenv(name); v != "" {
			return v
		}
	}
	return def
}

// parseNoArgs parses flags and refuses positional arguments.
func parseNoArgs(fs interface {
	Parse([]string) error
	Args() []string
}, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Args()[0])
	}
	return nil
}
