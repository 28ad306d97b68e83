package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

const (
	// fileName is the bbolt file inside the journal directory.
	fileName = "journal.db"
	// lockTimeout bounds how long Open waits for another process's file lock.
	lockTimeout = time.Second
	// batchDelay is how long a batch of concurrent Appends collects callers
	// before it commits. It only applies when Appends overlap; a lone Append
	// commits at once. bbolt's default of 10ms capped a lone caller at about
	// 80 entries/s; with an fsync of about 0.5ms, 1ms beat 0.25, 0.5 and 2ms
	// at 8 and 64 concurrent appenders (BenchmarkAppend).
	batchDelay = time.Millisecond
)

var (
	bucketEntries = []byte("entries")
	bucketIDs     = []byte("ids")
	// bucketMeta holds the journal's own id (keyID), made when the file
	// is created (or first opened by a version that has it)
	bucketMeta  = []byte("meta")
	keyID       = []byte("id")
	bucketProbe = []byte("probe") // Check's write; holds one key (check.go)
)

var (
	// ErrLocked reports that another process holds the journal open.
	ErrLocked = errors.New("locked by another process")
	// ErrInvalidEntry reports an Entry that Append refuses (an empty or too
	// long ID).
	ErrInvalidEntry = errors.New("invalid entry")
)

// Entry is one journaled request. Data is opaque to the journal (the daemon
// stores an encoded task).
type Entry struct {
	Seq  uint64    // assigned by Append, strictly increasing, never reused (survives restarts)
	ID   string    // task id (index key, for Lookup)
	Data []byte    // opaque payload
	At   time.Time // when it was journaled (ms precision)
}

// Journal is a durable, ordered log of Entries in one bbolt file. It is safe
// for concurrent use by many goroutines; only one process may have it open.
type Journal struct {
	db  *bolt.DB
	dir string
	id  string // ID
	now func() time.Time
	// openProbe opens Check's space probe file (a test double refuses
	// its writes as a full disk does).
	openProbe func(path string) (probeFile, error)

	// depth is the number of entries, counting Appends in flight (it is
	// raised before their commit and lowered again if the commit fails), so
	// it is never below the number on disk.
	depth atomic.Int64
	// appenders is the number of Appends in flight; a lone Append skips
	// bbolt's batch delay.
	appenders atomic.Int32

	// health is Check's cached answer and the last failed write (check.go).
	health health
}

// Open opens the journal in dir, creating dir (mode 0o700) and dir/journal.db
// if needed. Every commit is fsync'd. If another process has the journal
// open, Open gives up after a second with an error wrapping ErrLocked. Open
// reads every entry and fails, naming the seq, if one is corrupt (wrapping
// ErrCorrupt): it never drops data silently.
func Open(dir string) (*Journal, error) {
	created := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create journal dir: %w", err)
	}
	path := filepath.Join(dir, fileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: lockTimeout,
		NoSync:  false, // fsync every commit: an acknowledged Append is on disk
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("journal %s is %w", dir, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	db.MaxBatchDelay = batchDelay

	j := &Journal{db: db, dir: dir, now: time.Now, openProbe: openProbeFile}
	if err := j.init(created); err != nil {
		_ = db.Close()
		return nil, err
	}
	return j, nil
}

// init creates the buckets, makes the new file's directory entries durable
// and checks every record, counting them.
func (j *Journal) init(createdDir bool) error {
	err := j.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketEntries, bucketIDs, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if id := meta.Get(keyID); len(id) > 0 {
			j.id = string(id)
			return nil
		}
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("journal id: %w", err)
		}
		j.id = hex.EncodeToString(b)
		return meta.Put(keyID, []byte(j.id))
	})
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.dir, err)
	}
	// bbolt fsyncs the file but not the directory that names it.
	if err := syncDir(j.dir); err != nil {
		return fmt.Errorf("journal %s: %w", j.dir, err)
	}
	if createdDir {
		if err := syncDir(filepath.Dir(j.dir)); err != nil {
			return fmt.Errorf("journal %s: %w", j.dir, err)
		}
	}

	var n int64
	err = j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		next := b.Sequence()
		return b.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("entry key %x: %w: key is %d bytes, want 8", k, ErrCorrupt, len(k))
			}
			seq := binary.BigEndian.Uint64(k)
			if _, err := decodeRecord(v); err != nil {
				return fmt.Errorf("entry seq %d: %w", seq, err)
			}
			if seq > next {
				// NextSequence would hand this seq out again.
				return fmt.Errorf("entry seq %d: %w: beyond the bucket sequence %d", seq, ErrCorrupt, next)
			}
			n++
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.dir, err)
	}
	j.depth.Store(n)
	return nil
}

// ID is the journal's own id: random, made with its file, kept across
// restarts. With an entry's Seq it names the entry among every daemon's
// journals (the daemon's replay token, redisstore.Submit.Replay).
func (j *Journal) ID() string { return j.id }

// Close closes the journal file and releases its lock.
func (j *Journal) Close() error {
	j.health.closed()
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("close journal %s: %w", j.dir, err)
	}
	return nil
}

// Append adds entries to the journal in one transaction (one fsync) and
// returns their Seqs in order. A zero At is set to the current time; At is
// kept at millisecond precision. Concurrent Appends are coalesced into one
// commit. When Append returns nil error the entries are on disk.
//
// ctx is checked before the commit starts; a started commit is not abandoned,
// since the caller could then not tell whether the entries were kept.
func (j *Journal) Append(ctx context.Context, entries ...Entry) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	now := j.now()
	recs := make([][]byte, len(entries))
	for i, e := range entries {
		if e.ID == "" || len(e.ID) > bolt.MaxKeySize {
			return nil, fmt.Errorf("append entry %d: %w: id must be 1..%d bytes, got %d", i, ErrInvalidEntry, bolt.MaxKeySize, len(e.ID))
		}
		if e.At.IsZero() {
			e.At = now
		}
		recs[i] = encodeRecord(e)
	}

	seqs := make([]uint64, len(entries))
	// Batch may run fn more than once (in a transaction that is rolled back
	// and then retried); seqs come from the bucket sequence inside the
	// transaction, so a rerun assigns them afresh and only the committed run
	// counts.
	fn := func(tx *bolt.Tx) error {
		eb, ib := tx.Bucket(bucketEntries), tx.Bucket(bucketIDs)
		for i, rec := range recs {
			seq, err := eb.NextSequence()
			if err != nil {
				return fmt.Errorf("next seq: %w", err)
			}
			key := seqKey(seq) // bbolt keeps keys and values until commit: one allocation each
			if err := eb.Put(key, rec); err != nil {
				return fmt.Errorf("put seq %d: %w", seq, err)
			}
			if err := ib.Put([]byte(entries[i].ID), key); err != nil {
				return fmt.Errorf("index seq %d: %w", seq, err)
			}
			seqs[i] = seq
		}
		return nil
	}

	n := int64(len(entries))
	j.depth.Add(n)
	var err error
	if j.appenders.Add(1) == 1 {
		err = j.db.Update(fn) // alone: nothing to batch with, skip the batch delay
	} else {
		err = j.db.Batch(fn)
	}
	j.appenders.Add(-1)
	if err != nil {
		j.depth.Add(-n)
		err = fmt.Errorf("append %d entries: %w", n, err)
		j.health.writeFailed(j.now(), j.dir, err)
		return nil, err
	}
	return seqs, nil
}

// Peek returns up to limit entries, oldest (lowest Seq) first. It does not
// remove them.
func (j *Journal) Peek(ctx context.Context, limit int) ([]Entry, error) {
	return j.PeekAfter(ctx, 0, limit)
}

// PeekAfter returns up to limit entries whose Seq is above after, oldest
// first (Seqs start at 1, so after 0 is Peek). A caller pages through the
// journal with it, passing the last Seq it got, past entries it leaves in
// place.
func (j *Journal) PeekAfter(ctx context.Context, after uint64, limit int) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	if limit <= 0 || after == math.MaxUint64 {
		return nil, nil
	}
	out := make([]Entry, 0, min(limit, j.Len(), 4096)) // Len is never negative
	err := j.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEntries).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			e, err := entryAt(k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return out, nil
}

// Remove deletes the entries with the given seqs, typically after they were
// replayed. Unknown seqs are ignored. An id's index entry is dropped only if
// it still points at the removed seq, so Lookup keeps finding a newer entry
// for the same id.
func (j *Journal) Remove(ctx context.Context, seqs ...uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if len(seqs) == 0 {
		return nil
	}
	var removed int64
	err := j.db.Update(func(tx *bolt.Tx) error {
		removed = 0
		eb, ib := tx.Bucket(bucketEntries), tx.Bucket(bucketIDs)
		for _, seq := range seqs {
			key := seqKey(seq)
			v := eb.Get(key)
			if v == nil {
				continue
			}
			e, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("entry seq %d: %w", seq, err)
			}
			id := []byte(e.ID)
			if p := ib.Get(id); bytes.Equal(p, key) {
				if err := ib.Delete(id); err != nil {
					return fmt.Errorf("unindex seq %d: %w", seq, err)
				}
			}
			if err := eb.Delete(key); err != nil {
				return fmt.Errorf("delete seq %d: %w", seq, err)
			}
			removed++
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("remove %d entries: %w", len(seqs), err)
		j.health.writeFailed(j.now(), j.dir, err)
		return err
	}
	j.depth.Add(-removed)
	return nil
}

// Rewrite replaces the Data of entries still in the journal, found by
// their Seq (their ID and At stay; an entry no longer there is skipped), in
// one fsync'd commit. The daemon marks an entry written once its replay
// reached Redis.
func (j *Journal) Rewrite(ctx context.Context, entries ...Entry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rewrite: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		eb := tx.Bucket(bucketEntries)
		for _, n := range entries {
			key := seqKey(n.Seq)
			v := eb.Get(key)
			if v == nil {
				continue
			}
			e, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("entry seq %d: %w", n.Seq, err)
			}
			e.Data = n.Data
			if err := eb.Put(key, encodeRecord(e)); err != nil {
				return fmt.Errorf("rewrite seq %d: %w", n.Seq, err)
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("rewrite %d entries: %w", len(entries), err)
		j.health.writeFailed(j.now(), j.dir, err)
		return err
	}
	return nil
}

// Lookup returns the latest entry for id that is still in the journal, if the
// index has one. (Removing the latest entry for an id before an older one —
// out of order — leaves the older one out of the index.)
func (j *Journal) Lookup(ctx context.Context, id string) (Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, false, fmt.Errorf("lookup: %w", err)
	}
	if id == "" {
		return Entry{}, false, nil
	}
	var (
		e     Entry
		found bool
	)
	err := j.db.View(func(tx *bolt.Tx) error {
		key := tx.Bucket(bucketIDs).Get([]byte(id))
		if key == nil {
			return nil
		}
		if len(key) != 8 {
			return fmt.Errorf("index of %q: %w: seq is %d bytes, want 8", id, ErrCorrupt, len(key))
		}
		v := tx.Bucket(bucketEntries).Get(key)
		if v == nil {
			return nil
		}
		var err error
		if e, err = entryAt(key, v); err != nil {
			return err
		}
		if e.ID != id {
			return fmt.Errorf("index of %q: %w: seq %d holds id %q", id, ErrCorrupt, e.Seq, e.ID)
		}
		found = true
		return nil
	})
	if err != nil {
		return Entry{}, false, fmt.Errorf("lookup: %w", err)
	}
	return e, found, nil
}

// Len returns the number of entries in the journal (Appends in flight
// included). It does no I/O.
func (j *Journal) Len() int {
	return int(j.depth.Load())
}

// entryAt decodes the entry stored under key k.
func entryAt(k, v []byte) (Entry, error) {
	if len(k) != 8 {
		return Entry{}, fmt.Errorf("entry key %x: %w: key is %d bytes, want 8", k, ErrCorrupt, len(k))
	}
	seq := binary.BigEndian.Uint64(k)
	e, err := decodeRecord(v)
	if err != nil {
		return Entry{}, fmt.Errorf("entry seq %d: %w", seq, err)
	}
	e.Seq = seq
	return e, nil
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

// syncDir fsyncs a directory so that the names in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
