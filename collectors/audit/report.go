package audit

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// Report is the answer of /api/v1/audit?outbox=N: the sampled ids in each
// finding of the last comparison, for repair. It never holds a message
// body: only ids and timestamps.
type Report struct {
	Outbox string  `json:"outbox"`
	Sample float64 `json:"sample"`
	Window string  `json:"window"`
	Grace  string  `json:"grace"`
	// Ready is false while the tailer is still reading the window.
	Ready      bool       `json:"ready"`
	ComparedAt *time.Time `json:"compared_at,omitempty"`
	// Missing lists sampled rows marked published, older than grace,
	// whose id is not on the topics; MissingCount is the true count (the
	// list stops at MaxFindings).
	Missing      []Finding `json:"missing_in_broker"`
	MissingCount int       `json:"missing_in_broker_count"`
	// Unmarked lists sampled unpublished rows whose id is on the topics.
	Unmarked      []Finding `json:"unmarked_in_broker"`
	UnmarkedCount int       `json:"unmarked_in_broker_count"`
	// Dead lists sampled dead rows whose id is on the topics.
	Dead      []Finding `json:"dead_in_broker"`
	DeadCount int       `json:"dead_in_broker_count"`
	// WindowSeconds is the window the comparison judged (see
	// outbox_audit_window_seconds); JudgedFrom is where it began.
	WindowSeconds float64    `json:"window_seconds"`
	JudgedFrom    *time.Time `json:"judged_from,omitempty"`
	// IDMismatch, when set, says the two sides write ids differently;
	// Missing then lists rows that are probably not lost.
	IDMismatch string     `json:"id_mismatch,omitempty"`
	Match      matchStats `json:"match"`
	// Duplicates lists sampled ids seen more than once in the window,
	// including those re-read after a restart.
	Duplicates        []Duplicate `json:"duplicates"`
	DuplicatesOmitted int         `json:"duplicates_omitted"`
	// RereadMalformed counts records without a readable event id that
	// are older than the auditor's start: re-read, not counted in
	// outbox_audit_malformed_records_total.
	RereadMalformed uint64 `json:"reread_malformed_records"`
	// Inversions lists the last order inversions (order.go), with
	// aggregate and sequence configured.
	Inversions []Inversion `json:"order_inversions,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Report returns the last comparison's findings.
func (a *Auditor) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := Report{
		Outbox:            a.name,
		Sample:            a.cfg.Sample,
		Window:            a.cfg.Window.String(),
		Grace:             a.cfg.Grace.String(),
		Ready:             a.ready,
		Missing:           []Finding{},
		Unmarked:          []Finding{},
		Dead:              []Finding{},
		Duplicates:        make([]Duplicate, 0, len(a.dups)),
		DuplicatesOmitted: a.dupsOver,
		RereadMalformed:   a.reread,
		Inversions:        a.order.stats().Last,
	}
	if a.result != nil {
		at := a.result.at.UTC()
		r.ComparedAt = &at
		r.Missing = append(r.Missing, a.result.missing...)
		r.Unmarked = append(r.Unmarked, a.result.unmarked...)
		r.Dead = append(r.Dead, a.result.dead...)
		r.MissingCount, r.UnmarkedCount, r.DeadCount = a.result.nMissing, a.result.nUnmark, a.result.nDead
		r.WindowSeconds = a.result.span.Seconds()
		from := at.Add(-a.result.span)
		r.JudgedFrom = &from
		r.IDMismatch, r.Match = a.result.mismatch, a.result.match
	}
	for _, d := range a.dups {
		r.Duplicates = append(r.Duplicates, *d)
	}
	sort.Slice(r.Duplicates, func(i, j int) bool { return r.Duplicates[i].ID < r.Duplicates[j].ID })
	if a.cmpErr != nil || a.tailErr != nil {
		var msg string
		if a.cmpErr != nil {
			msg = a.cmpErr.Error()
		}
		if a.tailErr != nil {
			if msg != "" {
				msg += "; "
			}
			msg += a.tailErr.Error()
		}
		r.Error = msg
	}
	return r
}

// Handler serves /api/v1/audit?outbox=N as JSON. lookup returns the
// auditor of an outbox, or nil when it has none (a 404).
func Handler(lookup func(outbox string) *Auditor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		name := req.URL.Query().Get("outbox")
		if name == "" {
			httpError(w, http.StatusBadRequest, "the outbox parameter is required")
			return
		}
		a := lookup(name)
		if a == nil {
			httpError(w, http.StatusNotFound, "no audit is configured for outbox "+name)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Report())
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
