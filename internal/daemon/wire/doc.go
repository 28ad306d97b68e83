// Package wire is the daemon's HTTP wire format: it decodes request
// bodies (a strict hand-written JSON reader: exact field names, unknown
// and duplicate fields refused, invalid UTF-8 refused rather than
// repaired, a JSON payload kept byte for byte), encodes the answers, and
// owns the API's error type and its stable error codes.
//
// It knows nothing of Redis, the journal or HTTP routing: the daemon's
// handlers call it to turn bytes into a validated redisstore.Submit and
// results back into bytes. The decoding policy is at the top of
// decode.go; the reader is in jsonscan.go; FuzzDecodeTask checks it
// against encoding/json and BenchmarkDecode measures it against
// encoding/json.
package wire
