// Package kafkatopic administers delayq's Kafka topics: which of them exist
// (MissingTopics), creating the missing ones (CreateTopics, for
// DQ_KAFKA_AUTO_CREATE), and a periodic check (TopicCheck) whose answer the
// event and work processes show in /readyz. The event process' producer
// uses it to create a topic on first use and to ask the cluster before it
// makes a task dead for a missing topic.
package kafkatopic
