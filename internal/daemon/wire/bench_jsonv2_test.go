//go:build goexperiment.jsonv2

package wire

import (
	"encoding/json"
	jsonv2 "encoding/json/v2"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
)

// encoding/json/v2 (GOEXPERIMENT=jsonv2; the same code as
// github.com/go-json-experiment/json) in BenchmarkDecode. Its defaults
// are delayq's policy: exact (case-sensitive) names, duplicate names and
// invalid UTF-8 refused, exactly one value; RejectUnknownMembers refuses
// unknown fields. The payload (json.RawMessage) is kept verbatim.
func init() {
	benchDecoders = append(benchDecoders, benchDecoder{"encoding-json-v2", v2DecodeTask, v2DecodeBatch})
}

func v2DecodeTask(b []byte, now time.Time) (redisstore.Submit, *Error) {
	var o oracleRequest
	if err := jsonv2.Unmarshal(b, &o, jsonv2.RejectUnknownMembers(true)); err != nil {
		return redisstore.Submit{}, InvalidJSON(err.Error())
	}
	req := o.request()
	return req.submit(now)
}

func v2DecodeBatch(b []byte, maxBatch int) ([][]byte, *Error) {
	var o struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := jsonv2.Unmarshal(b, &o, jsonv2.RejectUnknownMembers(true)); err != nil {
		return nil, InvalidJSON(err.Error())
	}
	return benchItems(o.Tasks, maxBatch)
}
