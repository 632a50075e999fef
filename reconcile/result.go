package reconcile

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Finding is one confirmed gap at one key.
type Finding struct {
	Key  string `json:"key"`
	Kind Kind   `json:"kind"`
	// AuthorityVersion is nil when the authority has no row for the key.
	AuthorityVersion *int64 `json:"authority_version"`
	// AuthorityVersionNull is true when the authority's version is NULL.
	AuthorityVersionNull bool `json:"authority_version_null,omitempty"`
	// TargetVersion is nil when the target has no row for the key.
	TargetVersion *int64 `json:"target_version"`
	// TargetVersionNull is true when the target's version is NULL.
	TargetVersionNull bool `json:"target_version_null,omitempty"`
	// TargetRows is the number of target rows of a key held more than
	// once (duplicate_target); the versions above are the highest.
	TargetRows int `json:"target_rows,omitempty"`
	// OutboxState is the state of the outbox row for the authority's
	// version: absent, unpublished, published or dead; empty without an
	// outbox or an authority row.
	OutboxState string `json:"outbox_state,omitempty"`
	// Unconfirmed is true for a finding no column dates that was reported
	// at once (ReportUnconfirmed) rather than read again after grace: the
	// pipeline may still be at work on it.
	Unconfirmed bool `json:"unconfirmed,omitempty"`
}

// Result is one run of one job.
type Result struct {
	Job      string    `json:"job"`
	Full     bool      `json:"full"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Duration is Finished - Started in seconds.
	Duration float64 `json:"duration_seconds"`
	// RowsChecked counts the authority rows judged: old enough and, for a
	// windowed run, within the window.
	RowsChecked int64 `json:"rows_checked"`
	// Chunks counts the key ranges read or summarised.
	Chunks int `json:"chunks"`
	// RangesRead counts the key ranges read row by row: every chunk of a
	// streamed run; the differing buckets of a summarised one, adjacent
	// ones read together.
	RangesRead int `json:"ranges_read"`
	// RowsRead counts the rows (of both sides) read row by row; the rest
	// were decided by range summaries on the servers.
	RowsRead int64 `json:"rows_read"`
	// Rechecked counts the keys that looked like gaps in a chunk and were
	// read again; Gaps holds those the re-check confirmed.
	Rechecked int64 `json:"rechecked"`
	// Gaps is the true count of confirmed gaps of each kind; every kind is
	// present.
	Gaps map[Kind]int64 `json:"gaps"`
	// Findings lists confirmed gaps, at most max_findings of each kind.
	Findings []Finding `json:"findings"`
	// Truncated is true when some kind had more gaps than max_findings.
	Truncated bool `json:"truncated"`
	// Held counts gaps no column dates (a deleted authority row's target
	// row, a target gap of an undated publication) seen for the first
	// time, or again within grace of the first sighting: a later run
	// reports each that persists. They are not in Gaps.
	Held int64 `json:"held"`
	// Unconfirmed counts such gaps beyond the 100,000 a job holds: not
	// held, not in Gaps.
	Unconfirmed int64 `json:"unconfirmed,omitempty"`
	// ReportedUnconfirmed counts the findings no column dates that a run
	// reported at once, marked unconfirmed (ReportUnconfirmed). They are
	// not in Gaps, but they make the reconcile command exit 1.
	ReportedUnconfirmed int64 `json:"reported_unconfirmed,omitempty"`
	// Error says why the run failed; empty when it completed.
	Error string `json:"error,omitempty"`

	kept map[Kind]int
}

func newResult(job string, full bool) *Result {
	r := &Result{Job: job, Full: full, Started: time.Now(), Gaps: map[Kind]int64{}, Findings: []Finding{}, kept: map[Kind]int{}}
	for _, k := range Kinds {
		r.Gaps[k] = 0
	}
	return r
}

// Failed reports whether the run ended with an error.
func (r *Result) Failed() bool { return r.Error != "" }

// TotalGaps is the number of confirmed gaps of every kind.
func (r *Result) TotalGaps() int64 {
	var n int64
	for _, v := range r.Gaps {
		n += v
	}
	return n
}

// Exit codes of `outbox_exporter reconcile`.
const (
	ExitClean = 0
	ExitGaps  = 1
	ExitError = 2
)

// ExitCode is the exit status for the results of one or more runs: 2 if
// any failed (or err is set), else 1 if any found a gap (confirmed or
// reported unconfirmed), else 0.
func ExitCode(err error, results ...*Result) int {
	code := ExitClean
	if err != nil {
		return ExitError
	}
	for _, r := range results {
		switch {
		case r == nil || r.Failed():
			return ExitError
		case r.TotalGaps() > 0 || r.ReportedUnconfirmed > 0:
			code = ExitGaps
		}
	}
	return code
}

// Print writes a run's result as "text" (a summary and a table of
// findings) or "json" (the Result, as /api/v1/reconcile serves it).
func Print(w io.Writer, r *Result, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "text", "":
	default:
		return fmt.Errorf("unknown format %q: use text or json", format)
	}
	scope := "windowed run"
	if r.Full {
		scope = "full sweep"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "reconcile %s: %s started %s, %d rows checked in %.2fs (%d chunks, %d rows read one by one)\n",
		r.Job, scope, r.Started.UTC().Format(time.RFC3339), r.RowsChecked, r.Duration, r.Chunks, r.RowsRead)
	if r.Failed() {
		fmt.Fprintf(tw, "FAILED: %s\n", r.Error)
	}
	for _, k := range Kinds {
		fmt.Fprintf(tw, "  %s\t%d\n", k, r.Gaps[k])
	}
	if len(r.Findings) > 0 {
		fmt.Fprintf(tw, "\nKIND\tKEY\tAUTHORITY VERSION\tTARGET VERSION\tOUTBOX\n")
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\n", f.Kind, f.Key, optVersion(f.AuthorityVersion, f.AuthorityVersionNull),
				optVersion(f.TargetVersion, f.TargetVersionNull)+rowsNote(f.TargetRows), orDash(f.OutboxState), unconfirmedNote(f))
		}
	}
	if r.Held > 0 {
		fmt.Fprintf(tw, "(%d findings no column dates are held: a run grace or more later reports those that persist)\n", r.Held)
	}
	if r.ReportedUnconfirmed > 0 {
		fmt.Fprintf(tw, "(%d findings no column dates are reported at once, UNCONFIRMED: not read again after grace, they may be the pipeline still at work)\n", r.ReportedUnconfirmed)
	}
	if r.Unconfirmed > 0 {
		fmt.Fprintf(tw, "(%d more such findings were not held: over 100,000)\n", r.Unconfirmed)
	}
	if r.Truncated {
		fmt.Fprintf(tw, "(findings capped at max_findings per kind; the counts above are complete)\n")
	}
	return tw.Flush()
}

func optVersion(p *int64, null bool) string {
	if null {
		return "NULL"
	}
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// unconfirmedNote marks a finding reported without being read again after
// grace.
func unconfirmedNote(f Finding) string {
	if f.Unconfirmed {
		return "\tUNCONFIRMED"
	}
	return ""
}

func rowsNote(n int) string {
	if n > 1 {
		return fmt.Sprintf(" (%d rows)", n)
	}
	return ""
}
