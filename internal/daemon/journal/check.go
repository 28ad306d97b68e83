package journal

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Check: can the journal take a new write?
//
// bbolt is copy-on-write over a file it grows sparsely: a commit puts its
// pages into free pages of the file first, and a free page that was
// written before already has its disk blocks, so a full disk refuses only
// a commit that needs pages never written before. A small bbolt write says
// nothing about space: on a full 1 MiB tmpfs (0 bytes available, an Append
// of one 300-byte entry refused with ENOSPC) the one-key put Check used to
// make succeeded every time, and so did an Append of a 1-byte entry.
// Check therefore makes two writes:
//
//   - a bbolt commit of one small key (bucket probe): the file is open and
//     bbolt commits (a closed journal, a read-only file or file system);
//   - probeBytes of fresh data written to dir/space.probe, fsync'd, then
//     truncated away: the file system has room for new blocks (a full disk
//     or a quota refuses the write with ENOSPC or EDQUOT). The data is
//     random, so that a compressing file system cannot store it as a hole.
//
// probeBytes is headroom, not a promise: an Append bigger than what is
// left can still fail. A journal write that fails (Append, Remove,
// Rewrite) is Check's answer at once, with its error, until the next
// probe. Answers are cached for checkEvery: a readiness poll costs at most
// two fsyncs and probeBytes of writes per checkEvery, whatever its rate.
const (
	probeName  = "space.probe"
	probeBytes = 64 << 10 // 16 pages of 4 KiB
	checkEvery = 5 * time.Second
)

// probeData is what the space probe writes (random: incompressible).
var probeData = sync.OnceValue(func() []byte {
	b := make([]byte, probeBytes)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (it crashes the program instead)
	return b
})

// probeFile is the space probe's file: what Check does with it.
type probeFile interface {
	Write(b []byte) (int, error)
	Sync() error
	Truncate(size int64) error
	Close() error
}

func openProbeFile(path string) (probeFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
}

// errClosed is Check's answer once the journal is closed.
var errClosed = errors.New("closed")

// health is Check's last answer: a probe's result or a failed write, and
// when it was found.
type health struct {
	mu  sync.Mutex // held across a probe: concurrent Checks share it
	at  time.Time  // zero: no answer yet
	err error
	off bool // closed
}

// writeFailed makes a failed journal write Check's answer from now on.
func (h *health) writeFailed(now time.Time, dir string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at, h.err = now, fmt.Errorf("journal %s: a write failed: %w", dir, err)
}

func (h *health) closed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.off = true
}

// Check tells whether the journal can take a new write now (see above):
// nil, or why not. A closed journal, a file bbolt cannot commit to, a
// file system without room for probeBytes of new data and a journal write
// that failed since the last probe are errors. It does not change what
// Peek, Lookup or Len see.
func (j *Journal) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	h := &j.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.off {
		return fmt.Errorf("journal %s: %w", j.dir, errClosed)
	}
	now := j.now()
	if age := now.Sub(h.at); !h.at.IsZero() && age >= 0 && age < checkEvery {
		return h.err
	}
	h.at, h.err = now, j.probe(now)
	return h.err
}

// probe makes Check's two writes.
func (j *Journal) probe(now time.Time) error {
	at := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()))
	err := j.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketProbe)
		if err != nil {
			return err
		}
		return b.Put([]byte("at"), at)
	})
	if err != nil {
		return fmt.Errorf("journal %s: write check: %w", j.dir, err)
	}
	if err := j.probeSpace(); err != nil {
		return fmt.Errorf("journal %s: no room for %d bytes of new data: %w", j.dir, probeBytes, err)
	}
	return nil
}

// probeSpace writes probeBytes to the probe file, fsyncs them and
// truncates the file again (the next probe needs fresh blocks too).
func (j *Journal) probeSpace() (err error) {
	f, err := j.openProbe(filepath.Join(j.dir, probeName))
	if err != nil {
		return err
	}
	defer func() {
		if terr := f.Truncate(0); err == nil && terr != nil {
			err = terr
		}
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := f.Write(probeData()); err != nil {
		return err
	}
	return f.Sync()
}
