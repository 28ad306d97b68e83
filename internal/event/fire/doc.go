// Package fire moves due tasks of a led shard into Kafka: the Poller takes
// due tasks from the store with its fencing token, produces them in one
// synchronous batch, acks what Kafka confirmed and releases the rest; the
// Wakeups subscriber wakes a sleeping poller when a sooner task arrives;
// Kafka is the kafka-go producer behind the small Producer seam.
package fire
