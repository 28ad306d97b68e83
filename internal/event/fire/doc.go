// Package fire moves due tasks of a led shard into Kafka: the Poller takes
// due tasks from the store with its fencing token, produces them in one
// synchronous batch, acks what Kafka confirmed and releases the rest
// (poller.go: the loop of takes and sleeps; batch.go: the path of one take,
// step by step; poison.go: the grace of records Kafka refuses for good);
// the Wakeups subscriber wakes a sleeping poller when a sooner task
// arrives; Kafka is the kafka-go producer behind the small Producer seam.
//
// The chaos suite's crash points (after-take, after-produce, before-ack)
// and its planted bug earlyack are linked in only by the fault builds
// (fault_on.go, tags dqfault and dqplant); a normal build does not import
// internal/fault. Tests watch a poller through its Store seam.
package fire
