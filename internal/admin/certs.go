package admin

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/delayq/delayq/internal/config"
)

// defaultCertPoll is how often certs looks at the files for a change.
const defaultCertPoll = time.Second

// certs holds the HTTP server's certificate and reloads it from its files
// on SIGHUP and when either file changes (size or modification time), so
// that a renewed certificate (cert-manager, certbot, a rotated secret) is
// served without a restart. A change is acted on once the files have
// settled (the same stamp at two polls in a row), so that a file caught
// half-written, or a pair caught between its cert and its key, is not
// loaded. A reload that fails keeps the certificate in use and logs one
// warning per settled change of the files (or per SIGHUP).
type certs struct {
	files config.ServerFiles
	log   *slog.Logger
	poll  time.Duration

	cur atomic.Pointer[tls.Certificate]
	// Only Run's goroutine uses these.
	seen    fileStamp // the files as of the last reload attempt
	pending fileStamp // a change seen at the last poll, not yet settled
}

// fileStamp is what a change of the pair looks like from outside.
type fileStamp struct {
	certSize, keySize int64
	certMod, keyMod   time.Time
}

func (s fileStamp) same(o fileStamp) bool {
	return s.certSize == o.certSize && s.keySize == o.keySize && s.certMod.Equal(o.certMod) && s.keyMod.Equal(o.keyMod)
}

// newCerts loads the pair once: a server must not start without one.
func newCerts(files config.ServerFiles, log *slog.Logger, poll time.Duration) (*certs, error) {
	c := &certs{files: files, log: log, poll: poll}
	c.seen = c.stamp()
	c.pending = c.seen
	cert, err := files.Load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(&cert)
	return c, nil
}

// getCertificate is tls.Config.GetCertificate.
func (c *certs) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// tlsConfig is the server's TLS configuration.
func (c *certs) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.getCertificate}
}

// stamp is the files' current sizes and modification times (zero for a
// file that cannot be read: its return is a change too).
func (c *certs) stamp() fileStamp {
	var s fileStamp
	if fi, err := os.Stat(c.files.Cert); err == nil {
		s.certSize, s.certMod = fi.Size(), fi.ModTime()
	}
	if fi, err := os.Stat(c.files.Key); err == nil {
		s.keySize, s.keyMod = fi.Size(), fi.ModTime()
	}
	return s
}

// reload loads the pair again; on failure the current certificate stays.
func (c *certs) reload(why string) {
	c.seen = c.stamp()
	c.pending = c.seen
	cert, err := c.files.Load()
	if err != nil {
		c.log.Warn("http tls: certificate not reloaded, still serving the previous one", "reason", why, "err", err)
		return
	}
	c.cur.Store(&cert)
	attrs := []any{"reason", why, "cert", c.files.Cert}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "serial", cert.Leaf.SerialNumber.String(), "not_after", cert.Leaf.NotAfter)
	}
	c.log.Info("http tls: certificate reloaded", attrs...)
}

// check is one poll: a change of the files is reloaded when the files
// look the same as at the previous poll; until then it is only noted.
func (c *certs) check() {
	now := c.stamp()
	switch {
	case now.same(c.seen):
		c.pending = c.seen
	case now.same(c.pending):
		c.reload("files changed")
	default:
		c.pending = now
	}
}

// start installs the SIGHUP handler now (so that a SIGHUP after start
// returns reloads instead of ending the process) and watches until ctx
// ends; wait returns after the watching goroutine exited.
func (c *certs) start(ctx context.Context) (wait func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer signal.Stop(hup)
		tick := time.NewTicker(c.poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				c.reload("SIGHUP")
			case <-tick.C:
				c.check()
			}
		}
	})
	return wg.Wait
}
