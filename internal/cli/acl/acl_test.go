package acl_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// scriptCall finds the commands scripts run: redis.call('HGET', ...).
var scriptCall = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)

// TestRedisCommandsCoverScripts reads every Lua script of the module
// (.lua files and scripts inline in Go) and requires each command it
// calls to be in RedisCommands: Redis checks a script's calls against the
// user's ACL, so a command missing there fails the script half-way.
func TestRedisCommandsCoverScripts(t *testing.T) {
	root := moduleRoot(t)
	found := map[string]string{}
	for _, dir := range []string{"internal", "worker"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !strings.HasSuffix(path, ".lua") && (!strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go")) {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range scriptCall.FindAllSubmatch(src, -1) {
				found[strings.ToLower(string(m[1]))] = path
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(found) < 15 {
		t.Fatalf("found only %d script commands (%v): is the scan looking in the right place?", len(found), found)
	}
	for cmd, path := range found {
		if !slices.Contains(acl.RedisCommands, cmd) {
			t.Errorf("%s calls %s, which acl.RedisCommands does not allow", path, strings.ToUpper(cmd))
		}
	}
}

func TestRedisKeyPatternsEscapeGlobs(t *testing.T) {
	got := acl.RedisKeyPatterns(`a*b`)
	want := []string{`dq:{a\*b:*`, `dq:{a\*b}:*`}
	if !slices.Equal(got, want) {
		t.Errorf("patterns %q, want %q", got, want)
	}
}

// TestRedisRulesRunTheLifecycle creates the user on a real redis-server
// with exactly RedisRules and runs a task's whole life through the store
// as that user: schedule, reschedule, take, settle, claim, finish (dead),
// list dead, redrive, cancel, stats, wake-ups. Another namespace's keys
// and channels, and commands outside the list, are refused.
func TestRedisRulesRunTheLifecycle(t *testing.T) {
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	const ns = "acl1"
	args := []any{"ACL", "SETUSER", "dq-acl", "reset", "on", ">s3cret"}
	for _, r := range acl.RedisRules(ns) {
		args = append(args, r)
	}
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("redis-server refuses the rules: %v", err)
	}
	c := config.Common{RedisAddrs: []string{srv.Addr}, RedisUsername: "dq-acl", RedisPassword: "s3cret"}
	lifecycle(t, c, ns)
}

// TestRedisRulesOnTLSCluster runs the lifecycle as the recipe's user on a
// 3-master Redis Cluster on TLS only (client certificates required, the
// default user off): CLUSTER SLOTS, COMMAND and the scripts on every
// master.
func TestRedisRulesOnTLSCluster(t *testing.T) {
	pki := testenv.NewPKI(t)
	const ns = "acl2"
	cl := testenv.StartRedisCluster(t, testenv.RedisOptions{TLS: pki,
		Users: []testenv.RedisUser{{Name: "dq-acl", Password: "s3cret", Rules: acl.RedisRules(ns)}}})
	c := config.Common{RedisAddrs: cl.Addrs, RedisUsername: "dq-acl", RedisPassword: "s3cret"}
	c.RedisTLS.CA, c.RedisTLS.Cert, c.RedisTLS.Key = pki.Client.CA, pki.Client.Cert, pki.Client.Key
	lifecycle(t, c, ns)
}

// lifecycle runs a task's life through the store as the user of c, a
// client built as the binaries build theirs, and checks what the user may
// not do.
func lifecycle(t *testing.T, c config.Common, ns string) {
	t.Helper()
	rdb, err := c.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()

	s, err := redisstore.New(ctx, rdb, redisstore.Options{Namespace: ns, Shards: 4, Retention: time.Hour})
	if err != nil {
		t.Fatalf("open store as the acl user: %v", err)
	}
	sub := rdb.Subscribe(ctx, s.WakeChannel())
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("subscribe to the wake-up channel: %v", err)
	}

	mk := func(id string, due time.Time) redisstore.Submit {
		return redisstore.Submit{Task: &task.Task{ID: id, Type: "acl.t", Payload: []byte(`{}`), PayloadJSON: true, DueAt: due, MaxAttempts: 1}}
	}
	past := time.Now().Add(-time.Second)
	res, err := s.Schedule(ctx, []redisstore.Submit{mk("a", past), mk("b", time.Now().Add(time.Hour)), mk("c", time.Now().Add(time.Hour))})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("schedule %d: %v", i, r.Err)
		}
	}
	if _, err := s.Reschedule(ctx, "b", time.Now().Add(2*time.Hour), 0, false); err != nil {
		t.Fatalf("reschedule: %v", err)
	}
	if err := s.Cancel(ctx, "c"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	shard := s.Shard("a")
	if _, err := s.Adopt(ctx, shard, 7); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	tk, err := s.Take(ctx, shard, 7, 10, time.Minute)
	if err != nil || len(tk.Tasks) != 1 {
		t.Fatalf("take: %d tasks, %v", len(tk.Tasks), err)
	}
	if _, _, err := s.Settle(ctx, shard, 7, tk.Lease, nil); err != nil {
		t.Fatalf("settle: %v", err)
	}
	gen := tk.Tasks[0].Gen
	cr, err := s.ClaimMany(ctx, []redisstore.Claim{{ID: "a", Gen: gen, TTL: time.Minute, Owner: "w:1"}})
	if err != nil || cr[0].Code != redisstore.Claimed {
		t.Fatalf("claim: %+v, %v", cr, err)
	}
	if _, err := s.FinishMany(ctx, []redisstore.Finish{{ID: "a", Gen: gen, Kind: redisstore.Dead, Error: "boom", Owner: "w:1"}}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	dead, err := s.ListDead(ctx, 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("list dead: %d, %v", len(dead), err)
	}
	if _, err := s.Redrive(ctx, "a"); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if _, err := s.Get(ctx, "a"); err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, err := s.Stats(ctx); err != nil {
		t.Fatalf("stats: %v", err)
	}

	// nothing beyond the namespace and the list
	refused := map[string]error{
		"another namespace's key":     rdb.Get(ctx, "dq:{other:0}:due").Err(),
		"another namespace's channel": rdb.Publish(ctx, "dq:{other}:wake", "x").Err(),
		"FLUSHALL":                    rdb.FlushAll(ctx).Err(),
		"CONFIG SET":                  rdb.ConfigSet(ctx, "maxmemory", "1").Err(),
	}
	for what, err := range refused {
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: %v, want NOPERM", what, err)
		}
		if !redisstore.IsUnavailable(err) {
			t.Errorf("%s: NOPERM must count as Redis unavailable (a setting to fix), never as bad input", what)
		}
	}
	var re redis.Error
	if err := rdb.Get(ctx, "dq:{"+ns+":0}:nothing").Err(); err != nil && !errors.Is(err, redis.Nil) && errors.As(err, &re) {
		t.Errorf("a key of the namespace: %v", err)
	}
}

// TestRedisSetUserLineRunsInAShell runs the recipe's redis-cli line, as
// printed, through bash against a real redis-server: the user it makes
// opens the store.
func TestRedisSetUserLineRunsInAShell(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found (apt-get install redis-tools): %v", err)
	}
	srv := testenv.StartRedis(t)
	_, port, _ := strings.Cut(srv.Addr, ":")
	line := acl.RedisSetUser("delayq", "dq")
	line = strings.Replace(line, "redis-cli ", "redis-cli -h 127.0.0.1 -p "+port+" ", 1)
	line = strings.Replace(line, ">PASSWORD", ">pw-from-the-recipe", 1)
	out, err := exec.CommandContext(t.Context(), "bash", "-c", line).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Fatalf("%s\n%s %v", line, out, err)
	}
	c := config.Common{RedisAddrs: []string{srv.Addr}, RedisUsername: "delayq", RedisPassword: "pw-from-the-recipe"}
	rdb, err := c.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, err := redisstore.New(t.Context(), rdb, redisstore.Options{Namespace: "dq", Shards: 2, Retention: time.Hour}); err != nil {
		t.Fatalf("open the store as the recipe's user: %v", err)
	}
}

// moduleRoot is the directory of the module's go.mod, above the test's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
