package outboxsql

// Receipts: a worker that marks a row sent records the
// downstream's receipt id with it. A row marked published with no receipt
// was marked without the downstream's confirmation (by hand, or by a
// relay that gave up waiting), which hides the problem from the queue.
// For an outbox whose downstream is not Kafka the receipt is the only
// evidence, so the rows seen becoming published are counted by whether
// they carry one. The published-rows query already reads each such row
// once through the watermark; the receipt is one more column of it, so
// the count costs no extra read.

// receiptExprs are the published query's extra columns: whether the row
// has no receipt (NULL, or empty once read as text). None without a
// receipt column.
func (s *Spec) receiptExprs() []string {
	if s.O.Receipt == "" {
		return nil
	}
	return []string{"coalesce(" + col(s.O.Receipt) + "::text, '') = ''"}
}
