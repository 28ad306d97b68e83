package redisstore

import (
	"encoding/binary"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// A fire receipt is the packed value of a task's field in its shard's
// receipts hash (keys.receipts), written by Settle for every copy Kafka
// acknowledged, kept through retries and outcomes, deleted with the record
// (the retention purge, DeleteDead, a move's last step):
//
//	kind 1 byte: 'd' delivered (a topic no work process handles) | 'f' fired (a worked topic)
//	gen u32, attempt u16, fired at ms u48, due ms u48 (of the fired generation),
//	partition u32, offset u64, token u64 (the leader's fencing token)
//
// 39 bytes, big-endian. The scripts read only the kind (first byte) and
// the generation (bytes 2..5, compared with a record's); the rest is the
// Go side's (Get, List).
const receiptLen = 39

// Receipt kinds (the first byte).
const (
	receiptDelivered = 'd'
	receiptFired     = 'f'
)

// Ack is one copy of a take that Kafka acknowledged: its receipt for
// Settle. Delivered asks Settle to end the task there (its topic is not
// worked); Settle does so only if nothing else happened to the task
// meanwhile (see settle.lua).
type Ack struct {
	ID        string
	Gen       uint64
	Attempt   int
	DueAt     time.Time
	FiredAt   time.Time
	Partition int32
	Offset    int64
	Token     int64
	Delivered bool
}

// pack is a's receipt value.
func (a Ack) pack() string {
	b := make([]byte, receiptLen)
	b[0] = receiptFired
	if a.Delivered {
		b[0] = receiptDelivered
	}
	binary.BigEndian.PutUint32(b[1:], uint32(a.Gen))
	binary.BigEndian.PutUint16(b[5:], uint16(a.Attempt))
	putUint48(b[7:], uint64(max(task.Millis(a.FiredAt), 0)))
	putUint48(b[13:], uint64(max(task.Millis(a.DueAt), 0)))
	binary.BigEndian.PutUint32(b[19:], uint32(a.Partition))
	binary.BigEndian.PutUint64(b[23:], uint64(a.Offset))
	binary.BigEndian.PutUint64(b[31:], uint64(a.Token))
	return string(b)
}

// unpackReceipt reads a receipt value; nil when v is not one.
func unpackReceipt(v string) *task.Receipt {
	if len(v) != receiptLen || (v[0] != receiptDelivered && v[0] != receiptFired) {
		return nil
	}
	b := []byte(v)
	return &task.Receipt{
		Delivered: b[0] == receiptDelivered,
		Gen:       uint64(binary.BigEndian.Uint32(b[1:5])),
		Attempt:   int(binary.BigEndian.Uint16(b[5:7])),
		FiredAt:   task.FromMillis(uint48(b[7:13])),
		DueAt:     task.FromMillis(uint48(b[13:19])),
		Partition: int32(binary.BigEndian.Uint32(b[19:23])),
		Offset:    int64(binary.BigEndian.Uint64(b[23:31])),
		Token:     int64(binary.BigEndian.Uint64(b[31:39])),
	}
}
