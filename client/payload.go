package client

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// JSONPayload encodes v as JSON for Task.Payload (and Schedule's
// Payload): a struct, a map, a slice or any value encoding/json encodes.
// Unlike json.Marshal it leaves <, > and & as they are (a payload is
// data, not HTML: stored, listed and delivered byte for byte). A worker
// decodes it with worker.JSON.
func JSONPayload(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("delayq: payload: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
