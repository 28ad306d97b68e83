package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
)

// runDev is dq dev: the whole system in one process, or one piece of it.
func runDev(ctx context.Context, env Env, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "etcd":
			return runDevEtcd(ctx, env, args[1:])
		case "kafka":
			return runDevKafka(ctx, env, args[1:])
		case "sink":
			return runDevSink(ctx, env, args[1:])
		case "certs":
			return runDevCerts(env, args[1:])
		default:
			return fmt.Errorf("dev: unknown component %q (etcd, kafka, sink, certs, or nothing for the whole system)", args[0])
		}
	}
	return runDevAll(ctx, env, args)
}

// runDevSink is a webhook receiver for trying delayq out: it logs every
// task the work binary delivers and answers 200, except for the task
// types SinkHandler fails on purpose.
func runDevSink(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev sink", env)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dq dev sink [flags]\n\nA webhook receiver that prints every task delivered to it.\n%s\nFlags:\n", sinkRules)
		fs.PrintDefaults()
	}
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	log := slog.New(slog.NewTextHandler(env.Stdout, nil))
	log.Info("sink listening", "addr", ln.Addr().String())
	srv := &http.Server{Handler: SinkHandler(log, nil), ReadHeaderTimeout: 10 * time.Second}
	return serveUntil(ctx, srv, ln)
}

// The task types the built-in receiver fails on purpose, to show a
// failure, a retry and a dead letter without writing a server: pinned,
// the README's walkthrough names them.
const (
	// SinkFailPrefix: a task whose type starts with it is answered 400
	// (a permanent failure: dead after its first attempt).
	SinkFailPrefix = "fail."
	// SinkFlakyPrefix: a task whose type starts with it is answered 500
	// (retried) on its first SinkFlakyFailures attempts, 200 after.
	SinkFlakyPrefix = "flaky."
	// SinkFlakyFailures is how many attempts of a flaky task fail.
	SinkFlakyFailures = 2
)

// sinkRules says what the built-in receiver answers (dq dev -h, dq dev
// sink -h).
const sinkRules = `It answers 200, except on purpose: a task whose type starts with "` + SinkFailPrefix + `"
gets 400 (fails for good: dead after its first attempt); one whose type
starts with "` + SinkFlakyPrefix + `" gets 500 on attempts 1 and 2 (retried: it succeeds
on attempt 3 when its max_attempts allows).
`

// sinkAnswer is the built-in receiver's answer to attempt (1-based) of a
// task of type typ: 200, or the status of a failure on purpose and why.
func sinkAnswer(typ string, attempt int) (status int, why string) {
	switch {
	case strings.HasPrefix(typ, SinkFailPrefix):
		return http.StatusBadRequest, "dq dev sink: " + SinkFailPrefix + "* tasks fail for good"
	case strings.HasPrefix(typ, SinkFlakyPrefix) && attempt <= SinkFlakyFailures:
		return http.StatusInternalServerError, fmt.Sprintf("dq dev sink: %s* tasks fail attempts 1 to %d", SinkFlakyPrefix, SinkFlakyFailures)
	default:
		return http.StatusOK, ""
	}
}

// SinkHandler answers GET /healthz and logs every other request as a
// delivered task (Dq-Id, Dq-Type, Dq-Attempt headers and the payload),
// answering 200 — or, for the types of SinkFailPrefix and
// SinkFlakyPrefix, failing it on purpose (400 or 500, logged as such,
// the reason in the body). count, when not nil, counts requests.
func SinkHandler(log *slog.Logger, count *atomic.Int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n") // a failed write means the prober went away: nothing to do
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if count != nil {
			count.Add(1)
		}
		typ, attemptHdr := r.Header.Get("Dq-Type"), r.Header.Get("Dq-Attempt")
		attrs := []any{"task_id", r.Header.Get("Dq-Id"), "type", typ, "attempt", attemptHdr}
		if ms, err := strconv.ParseInt(r.Header.Get("Dq-Due-At"), 10, 64); err == nil {
			due := time.UnixMilli(ms)
			attrs = append(attrs, "due", due.Local().Format("15:04:05.000"), "after_due", time.Since(due).Round(time.Millisecond))
		}
		attempt, err := strconv.Atoi(attemptHdr)
		if err != nil {
			attempt = 1 // not delivered by work: taken as a first attempt
		}
		status, why := sinkAnswer(typ, attempt)
		if status == http.StatusOK {
			log.Info("task delivered", append(attrs, "payload", string(body))...)
			w.WriteHeader(http.StatusOK)
			return
		}
		log.Info("task failed on purpose", append(attrs, "answer", status, "why", why, "payload", string(body))...)
		http.Error(w, why, status)
	})
	return mux
}

// serveUntil serves on ln until ctx ends, then shuts down gracefully.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		return err
	}
}

// Files dq dev certs writes (and dq dev --tls, into <dir>/tls).
const (
	certCA         = "ca.crt"
	certServer     = "server" // server.crt, server.key (devcert.WriteSet's names)
	certClient     = "client" // client.crt, client.key
	secretRedis    = "redis.password"
	secretEtcd     = "etcd.password"
	secretEtcdRoot = "etcd-root.password"
	secretKafka    = "kafka.password"
	redisACLFile   = "users.acl"
)

// devCAName is the name of the CA dq dev makes.
const devCAName = "delayq dev CA"

// devUser is the user name delayq logs in as to Redis, etcd and Kafka in
// dq dev --tls and the compose TLS override (and the CN of its client
// certificate).
const devUser = "delayq"

// runDevCerts is dq dev certs: a throwaway CA, a server certificate for
// the given hosts and a client certificate, written into a directory (the
// compose TLS override's one-shot init); with --secrets also random
// passwords and the Redis ACL file. What is there already and still fits
// is kept, so that running it again (every compose up) changes nothing
// that running servers or etcd's stored users depend on.
func runDevCerts(env Env, args []string) error {
	fs := newFlagSet("dev certs", env)
	dir := fs.String("dir", "", "directory to write into (created; required)")
	hosts := fs.String("hosts", "localhost,127.0.0.1", "host names and IP addresses the server certificate is for (comma-separated)")
	cn := fs.String("client-cn", devUser, "common name of the client certificate (etcd takes it as the user name of a request without a token)")
	secrets := fs.Bool("secrets", false, "also write random passwords ("+secretRedis+", "+secretEtcd+", "+secretEtcdRoot+", "+secretKafka+") and the Redis ACL file "+redisACLFile+" (user "+devUser+" limited to --namespace, user health for PING only, the default user off)")
	ns := fs.String("namespace", "dq", "the delayq namespace the Redis ACL user is limited to (with --secrets)")
	owner := fs.String("owner", "", "UID:GID to give every file written (running as root for a volume that non-root containers read)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("dev certs: --dir is required")
	}
	hostList := config.Split(*hosts)
	if len(hostList) == 0 {
		return errors.New("dev certs: --hosts: at least one host")
	}
	uid, gid := -1, -1
	if *owner != "" {
		u, g, ok := strings.Cut(*owner, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("dev certs: --owner %q: UID:GID", *owner)
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("dev certs: %w", err)
	}
	var written []string
	if certsFit(*dir, hostList, *cn) {
		fmt.Fprintf(env.Stdout, "kept the certificates in %s (they fit %s)\n", *dir, strings.Join(hostList, ","))
	} else {
		files, err := devcert.WriteSet(*dir, devCAName, *cn, hostList...)
		if err != nil {
			return fmt.Errorf("dev certs: %w", err)
		}
		written = append(written, files.Server.CA, files.Server.Cert, files.Server.Key, files.Client.Cert, files.Client.Key)
	}
	if *secrets {
		pw := map[string]string{}
		for _, name := range []string{secretRedis, secretEtcd, secretEtcdRoot, secretKafka} {
			p, made, err := ensureSecret(filepath.Join(*dir, name))
			if err != nil {
				return fmt.Errorf("dev certs: %w", err)
			}
			pw[name] = p
			if made {
				written = append(written, filepath.Join(*dir, name))
			}
		}
		aclPath := filepath.Join(*dir, redisACLFile)
		if err := os.WriteFile(aclPath, []byte(acl.RedisACLFile(devUser, pw[secretRedis], *ns, true)), 0o600); err != nil {
			return fmt.Errorf("dev certs: %w", err)
		}
		written = append(written, aclPath)
	}
	if uid >= 0 {
		entries, err := os.ReadDir(*dir)
		if err != nil {
			return fmt.Errorf("dev certs: %w", err)
		}
		for _, e := range append(entries, nil) {
			p := *dir
			if e != nil {
				p = filepath.Join(*dir, e.Name())
			}
			if err := os.Chown(p, uid, gid); err != nil {
				return fmt.Errorf("dev certs: --owner: %w", err)
			}
		}
	}
	for _, f := range written {
		fmt.Fprintf(env.Stdout, "wrote %s\n", f)
	}
	return nil
}

// certsFit reports whether dir holds a CA, a server certificate that it
// signed for every host and a client certificate named cn, with their
// keys, good for at least another day.
func certsFit(dir string, hosts []string, cn string) bool {
	pool, err := config.LoadCA(filepath.Join(dir, certCA))
	if err != nil {
		return false
	}
	leaf := func(name string, usage x509.ExtKeyUsage) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		if err != nil || len(pair.Certificate) == 0 {
			return nil
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil || time.Until(c.NotAfter) < 24*time.Hour {
			return nil
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil
		}
		return c
	}
	server := leaf(certServer, x509.ExtKeyUsageServerAuth)
	client := leaf(certClient, x509.ExtKeyUsageClientAuth)
	if server == nil || client == nil || client.Subject.CommonName != cn {
		return false
	}
	for _, h := range hosts {
		if server.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// ensureSecret returns the password in path, or writes a new random one
// there (mode 0600) when the file is missing or empty.
func ensureSecret(path string) (pw string, made bool, err error) {
	if pw, err := config.ReadSecretFile(path); err == nil {
		return pw, false, nil
	}
	pw = randomPassword()
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", false, err
	}
	return pw, true, nil
}

// randomPassword is 32 random hex digits: nothing that needs quoting in a
// Redis ACL file or a shell.
func randomPassword() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}
