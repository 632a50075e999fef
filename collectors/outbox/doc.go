// Package outbox samples an outbox table: the state of its unpublished and
// dead rows, the rows published since the last sample, the leases that
// expired, and the oldest rows stuck in it. It also checks that the table
// has the columns and the indexes its queries need.
//
// A sample is fetched, decided and emitted, each stage in files of its
// own; the SQL it runs is built apart:
//
//   - Build: the sub-package outboxsql writes every query from the
//     configuration and the table's column types (Spec); it reads
//     nothing and decides nothing. With offsets_table (Watermill SQL)
//     every query reads the messages joined with the consumer groups'
//     offsets, once per group that has not acked a message
//     (outboxsql/offsets.go), so the rest of the package is unchanged.
//   - Fetch: sample.go runs the queries as batches in one read-only
//     transaction and scan.go turns their rows into a read, the facts
//     before any decision; behind.go adds the slot's confirmed time for
//     an outbox published by a replication slot, order_track.go the
//     order queries, stuck.go the stuck-rows page, check.go the check
//     command; cover.go completes the capped reads with the series the
//     walk of the oldest rows missed (coverTargets decides which), and
//     claimedcover.go those the walks of the claimed rows missed.
//   - Decide: pure functions, no I/O, tested without a database.
//     state.go decides a row's state, an unknown result and a deadline;
//     class.go folds states into the classes audit and reconcile read;
//     labels.go which label values keep their own series; track.go the
//     watermarks of published rows and the latency histogram; leases.go
//     which expired leases are counted; apply.go turns a read into the
//     snapshot and advances the sampler's state.
//   - Emit: collector.go (and order.go for the order and receipt
//     metrics) exports a snapshot as metrics.
//
// One value from the configuration to its metric, the rows past an
// outbox's deadline: outboxsql.Spec.StateQuery counts, per group of rows,
// those past each of Spec.Deadlines; scanGroups keeps them in that
// order; Sampler.gauges takes, for each series, the count of its own
// Deadline (state.go); Collector.Update sends it as
// outbox_past_deadline_events, beside outbox_deadline_seconds.
package outbox
