// Package worked is the registry of worked topics: the Kafka topics that
// delayq work processes handle, declared durably in etcd.
//
// A task fired to a worked topic stays "fired" until a worker finishes it;
// a task fired to any other topic is "delivered" once Kafka acknowledged
// its record (the event process decides that at settle time, reading a
// [View]).
//
// Each worked topic has the key /<ns>/worked/<topic> (the namespace root
// of the pause keys) with the JSON value
//
//	{"topic":"dq.tasks","group":"dq-workers","since":"2026-11-29T01:02:03.456Z","by":"<process id>"}
//
// The key has no lease: a work process that restarts or is down for a
// while must not turn its topics' tasks into delivered ones. A work
// process declares every topic it consumes before it starts consuming
// ([Declare]: put-if-absent, so since stays the first declaration and a
// later declaration by another group leaves the key as it is). An operator
// removes a topic no worker handles any more ([Forget]: DELETE
// /v1/cluster/worked/{topic}, dq cluster forget-topic); [List] reads the
// registry once (GET /v1/cluster).
//
// Topic names follow the rule of a task's topic (package task: up to 249
// characters of [a-zA-Z0-9._-], not "." or ".."), and must not be empty.
package worked
