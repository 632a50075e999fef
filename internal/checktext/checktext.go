// Package checktext is the one renderer of what `outbox_exporter check`
// found. Every capability (outboxes, reconcile jobs, cdc entries, audits)
// verifies its own part of a configuration and returns a Report; the
// command prints every Report through Write, so a person at a terminal
// reads each part the same way: a heading with its verdict, each item
// marked ok, WARN or FAIL, the notes, then the indexes to create.
package checktext

import (
	"fmt"
	"io"
	"strings"
)

// Item is one thing check verified. An item that holds with a caveat is
// OK and Warn: it does not fail the check.
type Item struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Warn   bool   `json:"warn,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Report is what check found for one part of a configuration.
type Report struct {
	// Heading names the part: "outbox messages (table public.outbox)".
	Heading string
	// OK is the verdict: false when an item failed.
	OK    bool
	Items []Item
	// Notes are advice that does not fail the check.
	Notes []string
	// Statements are the CREATE INDEX statements the part's queries
	// want, each ending in a semicolon.
	Statements []string
}

// Write renders r for a person at a terminal.
func Write(w io.Writer, r Report) {
	verdict := "OK"
	if !r.OK {
		verdict = "NOT OK"
	}
	fmt.Fprintf(w, "%s: %s\n", r.Heading, verdict)
	for _, it := range r.Items {
		mark := "ok  "
		switch {
		case !it.OK:
			mark = "FAIL"
		case it.Warn:
			mark = "WARN"
		}
		fmt.Fprintf(w, "  %s %s", mark, it.What)
		if it.Detail != "" {
			fmt.Fprintf(w, ": %s", it.Detail)
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note %s\n", n)
	}
	if len(r.Statements) > 0 {
		fmt.Fprintln(w, "  create these indexes (they do not block writes):")
		for _, s := range r.Statements {
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
}

// String is Write into a string.
func (r Report) String() string {
	var b strings.Builder
	Write(&b, r)
	return b.String()
}

// Failed is the report of a part whose check could not run at all.
func Failed(heading string, err error) Report {
	return Report{Heading: heading, Items: []Item{{What: "could not check", Detail: err.Error()}}}
}
