package tracing

import (
	"context"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
)

// RecordCarrier reads and writes the trace context in a Kafka record's
// headers (a propagation.TextMapCarrier). Set replaces a header of the
// name.
type RecordCarrier struct{ Headers *[]kafka.Header }

func (c RecordCarrier) Get(key string) string {
	for _, h := range *c.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c RecordCarrier) Set(key, value string) {
	hs := *c.Headers
	for i := range hs {
		if hs[i].Key == key {
			hs[i].Value = []byte(value)
			return
		}
	}
	hs = append(hs, kafka.Header{Key: key, Value: []byte(value)})
	*c.Headers = hs
}

func (c RecordCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.Headers))
	for _, h := range *c.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}

// ContextOfRecord is ctx with the trace context of a record's headers as
// its remote parent (ctx unchanged when they carry none).
func ContextOfRecord(ctx context.Context, m *kafka.Message) context.Context {
	c := RecordCarrier{Headers: &m.Headers}
	if c.Get(HeaderTraceparent) == "" {
		return ctx
	}
	return Propagator.Extract(ctx, c)
}

// SetRecordParent makes span the parent a consumer of the record continues
// (its traceparent and tracestate); a record without a trace context, or
// a span that is not valid, is left as it is.
func SetRecordParent(m *kafka.Message, span trace.Span) {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return
	}
	Propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), RecordCarrier{Headers: &m.Headers})
}
