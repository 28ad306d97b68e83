// Package client is a small Go client for the delayq daemon's HTTP API:
// schedule delayed tasks (one or a batch), move or cancel them before they
// fire, read them back, look after dead tasks, and operate the system.
//
//	c := client.New("http://127.0.0.1:7070", client.WithToken(os.Getenv("DQ_API_TOKEN")))
//	res, err := c.Schedule(ctx, client.Task{
//		ID:      "order-42-cancel",      // idempotency key; empty: the daemon generates one
//		Type:    "order.cancel",
//		Payload: json.RawMessage(`{"order":42}`),
//		Delay:   24 * time.Hour,
//	})
//
// A Task is scheduled at DueAt, or Delay from now (measured on Redis'
// clock), or now when neither is set. Re-submitting the same id with the
// same content is a no-op (Result.Outcome "unchanged"; Result.KeptDueAt
// reports that the earlier due time stands, Result.Ended that the id names a
// task that already ended and nothing was scheduled); with other content
// while the task still waits it is an upsert ("updated").
//
// When the daemon cannot reach Redis it keeps the task in its durable
// journal and answers with State "journaled" (Result.Journaled); the task
// reaches Redis once it is back.
//
// The operator API lists and searches tasks (ListTasks, or the iterator
// Tasks, which follows the cursors), acts on many tasks at once by ids or
// by a filter (CancelTasks, RedriveDeadTasks, DeleteDeadTasks; each repeats
// the daemon's bounded requests until done and counts what changed),
// pauses and resumes a task type (PauseType, ResumeType, Types), shows the
// cluster (Cluster: shard leaders, backlog, processes), and manages rate
// limits (Limits, GetLimit, SetLimit, DeleteLimit) and the shard count
// (Shards, GrowShards); OpenAPI fetches the API's description. Periodic
// tasks are schedules (PutSchedule, GetSchedule, ListSchedules,
// PauseSchedule, ResumeSchedule, DeleteSchedule): each tick of a cron
// expression becomes the task "<schedule id>@<tick unix ms>".
//
//	for t, err := range c.Tasks(ctx, client.ListOptions{State: client.StateDead, Type: "email.send"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(t.ID, t.DiedAt, t.LastError)
//	}
//	n, err := c.RedriveDeadTasks(ctx, client.Selection{Type: "email.send"})
//
// Errors from the API are *APIError values with the HTTP status and the
// API's error code; errors.Is(err, ErrNotFound) and errors.Is(err,
// ErrConflict) test the common cases.
//
// The answers that the daemon and this client share are declared once, in
// package api (LimitRule, ShardMap, Cluster, Stats and their parts are
// aliases of its types), so the two cannot drift; the client imports
// nothing else of delayq.
package client
