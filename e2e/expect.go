package e2e

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/demo"
)

// AlertKey identifies an alert as the test tells them apart: its name and,
// for OutboxReconcileGaps, the kind of gap (the rule keeps the kind label,
// so each kind is an alert of its own).
type AlertKey struct {
	Name string
	Kind string
}

func (k AlertKey) String() string {
	if k.Kind == "" {
		return k.Name
	}
	return k.Name + `{kind="` + k.Kind + `"}`
}

// KeyOf returns the AlertKey of an alert with these labels.
func KeyOf(labels map[string]string) AlertKey {
	return AlertKey{Name: labels["alertname"], Kind: labels["kind"]}
}

// Expectation is what a fault must raise at the receiver.
type Expectation struct {
	Fault demo.FaultKind
	// Own are alerts no other fault raises: they prove the fault was seen
	// for what it is.
	Own []AlertKey
	// Shared are alerts the fault also raises, as another one may.
	Shared []AlertKey
	// May are alerts the fault explains but need not raise in the test's
	// time: they depend on which row it hits or on the traffic so far.
	May []AlertKey
}

// burn is the publish SLO's burn-rate alert. A row published late (the
// crashed relay's, once taken back; the lost acknowledgement's, once
// retried) is one late event among the few hundred a short run publishes:
// more than the 0.1% the default 99.9% objective allows, so the ticket
// burn alert (1x budget over 3d and 6h) may fire: correctly, for a run
// this small.
var burn = AlertKey{Name: "OutboxPublishDeadlineBudgetBurn"}

// Expectations maps each fault of the demo to its alerts (alerts/*.go).
// mark_before_send also leaves a missing_target gap (its message is never
// indexed), like index_row_lost: the test injects it only after
// index_row_lost's gap alert has arrived, so that alert stays
// index_row_lost's own. When the row it hits is an edit, the gap is
// stale_target instead (the index keeps the previous version).
var Expectations = []Expectation{
	{Fault: demo.FaultRelayCrash,
		// The claimed row's lease expires and nobody takes it back for
		// ReclaimAfter; meanwhile it ages past the outbox deadline.
		Own:    []AlertKey{{Name: "OutboxLeaseExpiriesSustained"}},
		Shared: []AlertKey{{Name: "OutboxNotificationDeadlineMissed"}},
		May:    []AlertKey{burn}},
	{Fault: demo.FaultAckLost,
		// The event is on the topic while its row waits UnknownBackoff
		// with an unknown result.
		Own:    []AlertKey{{Name: "OutboxAuditAcknowledgementLost"}},
		Shared: []AlertKey{{Name: "OutboxUnknownResultEvents"}, {Name: "OutboxNotificationDeadlineMissed"}},
		May:    []AlertKey{burn}},
	{Fault: demo.FaultMarkBeforeSend,
		// It raises OutboxPublishedWithoutReceipt too (the relay marked
		// the row without a receipt); that alert is marked_by_hand's own,
		// which is injected before it.
		Own: []AlertKey{{Name: "OutboxAuditSilentLoss"}},
		May: []AlertKey{{Name: "OutboxReconcileGaps", Kind: "stale_target"}}},
	{Fault: demo.FaultConsumerStall,
		Own: []AlertKey{{Name: "OutboxConsumerLagAboveDeadline"}}},
	{Fault: demo.FaultIndexRowLost,
		Own: []AlertKey{{Name: "OutboxReconcileGaps", Kind: "missing_target"}}},
	{Fault: demo.FaultMissingOutbox,
		Own: []AlertKey{{Name: "OutboxReconcileMissingOutbox"}}},
	{Fault: demo.FaultRollbackAfterPublish,
		Own: []AlertKey{{Name: "OutboxReconcileGaps", Kind: "orphan_target"}}},
	{Fault: demo.FaultOrderOvertaken,
		// The overtaken row while its relay stalls; the inversion the
		// audit reads once it is published. The stalled row may age past
		// the outbox deadline meanwhile.
		Own: []AlertKey{{Name: "OutboxOutOfOrderEvents"}, {Name: "OutboxAuditOrderInversions"}},
		May: []AlertKey{{Name: "OutboxNotificationDeadlineMissed"}}},
	{Fault: demo.FaultMarkedByHand,
		// Injected before mark_before_send, which raises it too.
		Own: []AlertKey{{Name: "OutboxPublishedWithoutReceipt"}}},
}

// ExplainedAlerts is every alert some fault must or may raise; the value
// says whether one must.
func ExplainedAlerts() map[AlertKey]bool {
	out := map[AlertKey]bool{}
	for _, e := range Expectations {
		for _, k := range e.May {
			if _, ok := out[k]; !ok {
				out[k] = false
			}
		}
		for _, k := range append(append([]AlertKey(nil), e.Own...), e.Shared...) {
			out[k] = true
		}
	}
	return out
}

// Missing lists, one line per fault, what is wrong with its alerts: an
// own alert that has not arrived, arrived before the fault was injected,
// or arrived later than bound after it; a shared alert that never
// arrived. injected holds when each fault was injected (absent: not yet),
// received when each alert first arrived. It returns nothing when every
// fault's alerts arrived in time.
func Missing(injected map[demo.FaultKind]time.Time, received map[AlertKey]time.Time, bound time.Duration) []string {
	var out []string
	for _, e := range Expectations {
		at, ok := injected[e.Fault]
		if !ok {
			out = append(out, fmt.Sprintf("%s: not injected", e.Fault))
			continue
		}
		var miss []string
		for _, k := range e.Own {
			got, ok := received[k]
			switch {
			case !ok:
				miss = append(miss, k.String())
			case got.Before(at):
				miss = append(miss, fmt.Sprintf("%s (it arrived at %s, before the fault)", k, got.Format("15:04:05")))
			case got.Sub(at) > bound:
				miss = append(miss, fmt.Sprintf("%s within %s (it took %s)", k, bound, got.Sub(at).Round(time.Second)))
			}
		}
		for _, k := range e.Shared {
			if _, ok := received[k]; !ok {
				miss = append(miss, k.String()+" (shared with another fault)")
			}
		}
		if len(miss) > 0 {
			out = append(out, fmt.Sprintf("%s (injected %s) did not raise %s", e.Fault, at.Format("15:04:05"), strings.Join(miss, ", ")))
		}
	}
	return out
}

// Unexpected lists the received alerts no fault explains.
func Unexpected(received map[AlertKey]time.Time) []string {
	explained := ExplainedAlerts()
	var out []string
	for k := range received {
		if _, ok := explained[k]; !ok {
			out = append(out, k.String())
		}
	}
	sort.Strings(out)
	return out
}
