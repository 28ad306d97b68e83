// Package task defines delayq's task model: the fields a producer sets, the
// states a task moves through, the validation rules every entry point shares,
// and the compact binary encoding the Redis store keeps.
package task
