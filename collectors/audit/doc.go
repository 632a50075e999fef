// Package audit compares what an outbox says with what its topics hold,
// for a consistent sample of event ids. A relay marks a row published
// after the broker acknowledged it; three things can still go wrong
// between the two sides, and only a comparison of both sees them:
//
//   - a row marked published whose event never reached the broker (the
//     row was marked by hand, or by a relay that lost the send): silent
//     loss, outbox_audit_missing_in_broker_events;
//   - a row still unpublished whose event is already on a topic (the
//     acknowledgement was lost, so a retry will publish it again):
//     outbox_audit_unmarked_in_broker_events;
//   - an event published more than once: outbox_audit_duplicates_total;
//     and, with aggregate and sequence configured, the events of one
//     aggregate arriving out of order: outbox_audit_order_inversions_total.
//
// The work runs in three stages, each in its own files:
//
// Fetch.
//   - tailer.go reads the topics: a consumer with no group and no commits
//     that starts one window back and keeps a 60-bit fingerprint of every
//     sampled id it sees, by record time, for one window (window.go: about
//     6 bytes per id once its minute is sealed; slab_*.go holds them off
//     the Go heap). Record values are read only to find a json:FIELD id and
//     are never kept or logged. extract.go reads the id from a record.
//   - coverage.go asks the brokers what span of record time the topics
//     still hold (retention, DeleteRecords, compaction), so that a row
//     whose record may have been deleted is never called lost.
//   - query.go builds the outbox query (id, state, published_at; never a
//     body) over the sampled rows in scope: rows published inside the
//     covered span, every unpublished row, recent dead rows.
//
// Decide (pure functions, tested without a broker or database).
//   - sample.go picks the sampled ids with one function on both sides: the
//     MD5 of the id's text, md5(id::text) in SQL, so the filter runs in
//     PostgreSQL and only sampled rows travel.
//   - judge.go judges one row against the window (Judge).
//   - mismatch.go tells a real loss from ids written differently on the two
//     sides (case, quotes, dashes), which would otherwise read as thousands
//     of losses; order.go finds order inversions.
//
// Emit.
//   - compare.go runs the comparison every 30 s: it streams the query's
//     rows through Judge and keeps the findings; auditor.go starts and
//     stops the whole; collector.go exports the metrics; report.go answers
//     /api/v1/audit; check.go is what `outbox_exporter check` verifies.
//
// After a restart the window is read again from the topics, so the
// findings are the same; counters count from the start only (see Start).
package audit
