package chaos

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/testenv"
)

// The broker's slowness (kafkaFaults.setSlow, startFaultyKafka) sits in
// kfake's listener, not in a kfake control function: a connection of the
// broker reads each
// request whole and, when it is a produce or a fetch and the fault is on,
// hands it to kfake only after the delay. kfake serves one request per
// connection at a time (the next one is read once the answer is written),
// so a delayed request delays its connection's later ones, as a slow
// broker does, while every other connection goes on.
//
// Why not kfake.SleepControl, which the suite used until session 40: its
// per-connection queue of sleeping requests (bsleep, kfake at
// 01f206a7e32c, the newest served) starts a second waiting goroutine when
// a request begins to sleep just as the previous one's waiter drains the
// queue; both then run the same request (cluster.go waitQueue), and the
// race detector failed TestChaos (seed 481629459) in kfake's own code.

// slowListener wraps a plain listener (kfake puts TLS on top of the
// listener it is given, so frames are only readable on a plain one).
type slowListener struct {
	net.Listener
	delay func(key int16) time.Duration // the delay of a request with this API key now
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, delay: l.delay, closed: make(chan struct{})}, nil
}

// slowConn reads the client's requests a frame at a time (a 4-byte size,
// then the body: API key, version, ...) and holds each for its delay
// before kfake reads it.
type slowConn struct {
	net.Conn
	delay func(key int16) time.Duration

	frame []byte // the rest of the frame read, not yet handed over

	closeOnce sync.Once
	closed    chan struct{}
}

func (c *slowConn) Read(p []byte) (int, error) {
	if len(c.frame) == 0 {
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
		copy(frame, size[:])
		if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
			return 0, err
		}
		if len(frame) >= 6 {
			if d := c.delay(int16(binary.BigEndian.Uint16(frame[4:6]))); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-c.closed:
					t.Stop()
					return 0, net.ErrClosed
				}
			}
		}
		c.frame = frame
	}
	n := copy(p, c.frame)
	c.frame = c.frame[n:]
	return n, nil
}

func (c *slowConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestSlowBroker: while the broker is slow a produce is answered no sooner
// than the delay and is stored; while it also drops produces, a produce
// fails and nothing of it is stored; healed, produces go through again.
func TestSlowBroker(t *testing.T) {
	k, kf := startFaultyKafka(t, testenv.KafkaOptions{Partitions: 1, Topics: []string{"slow"}})
	cl := k.Client(t, kgo.DefaultProduceTopic("slow"), kgo.DisableIdempotentWrite(),
		kgo.RecordDeliveryTimeout(2*time.Second))
	stored := func() int64 {
		var n int64
		for _, p := range k.Cluster.PartitionInfos("slow") {
			n += p.HighWatermark
		}
		return n
	}
	produce := func() (time.Duration, error) {
		t0 := time.Now()
		err := cl.ProduceSync(t.Context(), &kgo.Record{Value: []byte("x")}).FirstErr()
		return time.Since(t0), err
	}

	if _, err := produce(); err != nil {
		t.Fatalf("produce to a healthy broker: %v", err)
	}
	const d = 400 * time.Millisecond
	kf.setSlow(d, false)
	took, err := produce()
	if err != nil {
		t.Fatalf("produce to a slow broker: %v", err)
	}
	if took < d {
		t.Fatalf("produce to a broker slow by %v answered in %v", d, took)
	}
	if n := stored(); n != 2 {
		t.Fatalf("%d records stored after two produces, want 2", n)
	}

	kf.setSlow(100*time.Millisecond, true)
	if _, err := produce(); err == nil {
		t.Fatal("produce while the broker drops produces succeeded")
	}
	if n := stored(); n != 2 {
		t.Fatalf("%d records stored after a dropped produce, want 2: a dropped produce was applied", n)
	}

	kf.setSlow(0, false)
	if _, err := produce(); err != nil {
		t.Fatalf("produce once healed: %v", err)
	}
	if n := stored(); n != 3 {
		t.Fatalf("%d records stored once healed, want 3", n)
	}
}
