package daemon

import (
	"fmt"
	"path"
	"strings"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
)

// topicPolicy says which Kafka topics a producer's task may name (the
// "topic" of POST /v1/tasks, of a batch item, of a schedule's task
// template). Never delayq's own topics: a task fired into the outcomes
// topic forges an outcome (a signed on_success call for a task that never
// ran), one fired into the dead-letter topic forges a dead letter. Never
// Kafka's internal topics (__consumer_offsets, __transaction_state, ...).
// The default names (dq.outcomes, dq.dead) stay reserved when the daemon
// is configured with others: the event and work processes have settings
// of their own and may still use them. With DQ_ALLOWED_TOPICS, only the
// topics matching one of its patterns.
// An empty topic is the event's default topic (DQ_DEFAULT_TOPIC): always
// allowed; the operator chose it.
type topicPolicy struct {
	outcomes string   // "": outcomes disabled (DQ_OUTCOMES_TOPIC=none)
	dead     string   // DQ_DEAD_TOPIC
	allowed  []string // path.Match patterns; empty: every topic not reserved
}

// newTopicPolicy is the policy of a validated configuration.
func newTopicPolicy(cfg *Config) topicPolicy {
	p := topicPolicy{dead: cfg.DeadTopic, allowed: cfg.AllowedTopics}
	if outcome.Enabled(cfg.OutcomesTopic) {
		p.outcomes = cfg.OutcomesTopic
	}
	return p
}

// topics is the daemon's topic policy.
func (co *core) topics() topicPolicy { return newTopicPolicy(&co.cfg) }

// refuse says why topic may not be named ("" when it may).
func (p topicPolicy) refuse(topic string) string {
	switch {
	case topic == "":
		return ""
	case topic == p.outcomes || topic == record.DefaultOutcomesTopic:
		return fmt.Sprintf("%s is delayq's outcomes topic", topic)
	case topic == p.dead || topic == DefaultDeadTopic:
		return fmt.Sprintf("%s is delayq's dead-letter topic", topic)
	case strings.HasPrefix(topic, "__"):
		return fmt.Sprintf("%s is a Kafka-internal topic", task.Truncate(topic, 64))
	case len(p.allowed) > 0 && !p.matches(topic):
		return fmt.Sprintf("%s is not in DQ_ALLOWED_TOPICS", task.Truncate(topic, 64))
	}
	return ""
}

func (p topicPolicy) matches(topic string) bool {
	for _, pat := range p.allowed {
		if ok, _ := path.Match(pat, topic); ok { // patterns are checked by Validate
			return true
		}
	}
	return false
}

// check is the answer to a task naming topic: nil, or 422 invalid_task
// naming the field, as for any other field with a wrong value.
func (p topicPolicy) check(topic string) *wire.Error {
	if why := p.refuse(topic); why != "" {
		return wire.InvalidTask("topic: " + why)
	}
	return nil
}

// checkTemplateTopic is check for a schedule's task template: 422
// invalid_schedule naming task.topic, as for its other fields.
func (a *App) checkTemplateTopic(topic string) *wire.Error {
	if why := a.core.topics().refuse(topic); why != "" {
		return invalidSchedule("task.topic: " + why)
	}
	return nil
}
