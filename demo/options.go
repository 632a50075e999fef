package demo

import (
	"io"
	"time"
)

// DefaultFaultEvery is how often the CLI injects a fault by default.
const DefaultFaultEvery = time.Minute

// Options configures a demo pipeline. Zero values take the defaults named
// on each field, except FaultEvery.
type Options struct {
	// DatabaseURL names the PostgreSQL server to use (e.g. DATABASE_URL).
	// Empty: LocalURL if it answers, else a throwaway cluster made with
	// the local initdb.
	DatabaseURL string
	// LocalURL is the server tried when DatabaseURL is empty. Default
	// DefaultLocalURL.
	LocalURL string
	// Database is the database the demo drops, creates and owns. Default
	// outbox_demo.
	Database string
	// DropOnClose drops Database when the pipeline closes; otherwise it
	// stays for inspection until the next start.
	DropOnClose bool
	// KafkaBrokers names a real cluster; empty starts an in-process kfake
	// cluster on 127.0.0.1.
	KafkaBrokers []string
	// Topic the relays publish to. Default messages.
	Topic string

	// FaultEvery is the pause between scripted faults; 0 injects none
	// (InjectFault still works). The CLI default is DefaultFaultEvery.
	FaultEvery time.Duration

	// Rate is how many messages a second the writers commit. Default 3.
	Rate float64
	// EditShare is the share of writes that edit a recent message (a v2
	// event) instead of creating one. Default 0.3; negative for none.
	EditShare float64
	// Relays is the number of relays. Default 2.
	Relays int
	// PollInterval is how long an idle relay waits. Default 200ms.
	PollInterval time.Duration
	// LeaseTTL is the claim lease. Default 15s.
	LeaseTTL time.Duration
	// ReclaimAfter is how long past its expiry a lease must be before
	// another relay takes the row back. Default 90s, so a crashed relay's
	// row stays visible (lease_expired, then past its deadline) for
	// longer than an alert's `for: 1m`.
	ReclaimAfter time.Duration
	// UnknownBackoff is the wait before retrying a publish whose result is
	// unknown. Default 2m: the audit (a 10m window cut into time buckets
	// of 10-20s, 15s grace, a comparison every 30s) sees the row unmarked
	// while its event is on the topic within about a minute; the rest
	// keeps it visible.
	UnknownBackoff time.Duration
	// MaxAttempts before a row is ABANDONED. Default 5.
	MaxAttempts int
	// StallFor is how long a consumer stall lasts. Default NotifyDeadline
	// plus two minutes: the lag stays past its deadline for two minutes.
	StallFor time.Duration
	// OrderStallFor is how long the relay of an order_overtaken fault
	// holds the overtaken event after its successor was published.
	// Default 6m: longer than the 5m for: of OutboxOutOfOrderEvents.
	OrderStallFor time.Duration

	// OutboxDeadline is the outbox notification deadline. Default 30s.
	OutboxDeadline time.Duration
	// GroupDeadline is the lag deadline of search-index. Default 1m.
	GroupDeadline time.Duration
	// NotifyDeadline is the lag deadline of notify. Default 30s.
	NotifyDeadline time.Duration
	// ReconcileSchedule of the search_index job. Default "@every 30s".
	ReconcileSchedule string
	// ReconcileGrace of the search_index job. Default 20s.
	ReconcileGrace time.Duration
	// AuditGrace of the outbox audit. Default 15s.
	AuditGrace time.Duration
	// AuditWindow of the outbox audit. Default 10m: the audit places a
	// record in a time bucket, a fixed share of its window, and judges an
	// unmarked row only after its bucket ends, so a shorter window judges
	// sooner.
	AuditWindow time.Duration

	// Out receives the announcements for the person watching. Default
	// io.Discard.
	Out io.Writer
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Database == "" {
		o.Database = "outbox_demo"
	}
	if o.LocalURL == "" {
		o.LocalURL = DefaultLocalURL
	}
	if o.Topic == "" {
		o.Topic = "messages"
	}
	if o.Rate == 0 {
		o.Rate = 3
	}
	if o.EditShare == 0 {
		o.EditShare = 0.3
	}
	if o.Relays <= 0 {
		o.Relays = 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	def(&o.PollInterval, 200*time.Millisecond)
	def(&o.LeaseTTL, 15*time.Second)
	def(&o.ReclaimAfter, 90*time.Second)
	def(&o.UnknownBackoff, 2*time.Minute)
	def(&o.OutboxDeadline, 30*time.Second)
	def(&o.GroupDeadline, time.Minute)
	def(&o.NotifyDeadline, 30*time.Second)
	def(&o.StallFor, o.NotifyDeadline+2*time.Minute)
	def(&o.OrderStallFor, 6*time.Minute)
	def(&o.ReconcileGrace, 20*time.Second)
	def(&o.AuditGrace, 15*time.Second)
	def(&o.AuditWindow, 10*time.Minute)
	if o.ReconcileSchedule == "" {
		o.ReconcileSchedule = "@every 30s"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}
