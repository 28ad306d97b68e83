// Package record owns the Kafka record contract of delayq: the dq-* header
// names, the encoding of a fired task's record and of its dead-letter
// copies (Encode, EncodeDead, DeadLetter), the size a task's record will
// have (Size, which the daemon checks at submit), and the parsing and
// checking of a consumed record's headers (Parse), and the outcome records
// of the outcomes topic (EncodeOutcome, ParseOutcome; outcome.go).
//
// The event process (package fire) writes records with Encode and
// EncodeDead; the worker reads them with Parse and dead-letters what it
// cannot handle with DeadLetter; the daemon refuses at submit a task whose
// Size the broker would refuse. Tests and benchmarks build records with
// Encode, so every producer of the format is this package.
//
// The package depends on kafka-go because a record is a kafka.Message (the
// type both the fire producer and the worker consumer use); it has no other
// dependency outside the standard library and internal/task.
package record
