package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/cli/acl"
)

// RedisUser is an ACL user created when the server starts: "user <Name> on
// ><Password> <Rules...>" (nopass when Password is empty).
type RedisUser struct {
	Name, Password string
	// Rules are the ACL SETUSER rule words after "on >password", e.g.
	// {"~dq:*", "&dq:*", "+@all"} or {"~*", "+get"}. Without any "~" rule
	// the user reaches no key; without a "+" rule it may run no command.
	Rules []string
}

// aclFileName is the ACL file written into the server's dir when
// RedisOptions.Users is set. The users go into an aclfile rather than
// "--user" arguments: the file keeps passwords off the process list, and
// ACL SAVE and ACL LOAD work as they do in production.
const aclFileName = "users.acl"

// RedisAdminUser is the ACL user (every key, channel and command) that
// testenv adds next to RedisOptions.Users and logs in as itself: the
// readiness PING, the cluster setup and the cluster helpers. Tests should
// not use it; its password is random.
const RedisAdminUser = "testenv-admin"

// secure prepares how testenv logs in to r (TLS config, admin user) and,
// with RedisOptions.Users, writes the ACL file into r.Dir. adminPassword is
// the admin user's password (all nodes of a cluster share one, since
// redis-cli --cluster create logs in to every node with the same).
func (r *Redis) secure(tb testing.TB, adminPassword string) {
	tb.Helper()
	o := r.opts
	if o.TLS != nil {
		r.tlsConf = o.TLS.ClientTLS(tb)
	}
	r.adminUser, r.adminPassword = "", o.Password
	if len(o.Users) == 0 {
		return
	}
	if o.Password != "" {
		tb.Fatalf("testenv: RedisOptions: Password (requirepass, the default user's) and Users exclude each other: with Users the default user is off")
	}
	r.adminUser, r.adminPassword = RedisAdminUser, adminPassword
	var b strings.Builder
	b.WriteString("user default off\n")
	b.WriteString(acl.RedisACLFileUser(RedisAdminUser, adminPassword, []string{"~*", "&*", "+@all"}))
	for _, u := range o.Users {
		words := append([]string{u.Name, u.Password}, u.Rules...)
		for _, w := range words {
			if strings.ContainsAny(w, " \t\r\n\"'") {
				tb.Fatalf("testenv: RedisUser %q: %q: names, passwords and rules may not contain spaces or quotes", u.Name, w)
			}
		}
		if u.Name == "" || u.Name == "default" || u.Name == RedisAdminUser {
			tb.Fatalf("testenv: RedisUser name %q: empty or reserved", u.Name)
		}
		b.WriteString(acl.RedisACLFileUser(u.Name, u.Password, u.Rules))
	}
	if err := os.WriteFile(filepath.Join(r.Dir, aclFileName), []byte(b.String()), 0o600); err != nil {
		tb.Fatalf("testenv: write ACL file: %v", err)
	}
}

// ClientAs returns a go-redis client that logs in as user with password
// (AUTH password alone when user is empty; no AUTH when both are), over TLS
// with the PKI's client certificate when RedisOptions.TLS is set. It is
// closed at cleanup.
func (r *Redis) ClientAs(tb testing.TB, user, password string) *redis.Client {
	tb.Helper()
	o := &redis.Options{Addr: r.Addr, Username: user, Password: password}
	if r.opts.TLS != nil {
		o.TLSConfig = r.opts.TLS.ClientTLS(tb)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// adminOptions are the options of testenv's own short-lived connections to
// r: no retries, 1s dial timeout, TLS and the admin user when set.
func (r *Redis) adminOptions() *redis.Options {
	return &redis.Options{
		Addr:        r.Addr,
		TLSConfig:   r.tlsConf,
		Username:    r.adminUser,
		Password:    r.adminPassword,
		MaxRetries:  -1,
		DialTimeout: time.Second,
	}
}
