// Package checktext renders what `outbox_exporter check` found for one
// part of a configuration (an outbox, a cdc entry) for a person at a
// terminal, the same way for every part.
package checktext

import (
	"fmt"
	"strings"
)

// Item is one thing check verified.
type Item struct {
	What   string `json:"what"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Render writes the heading with the verdict, each item marked ok or
// FAIL, then the notes (advice that does not fail the check).
func Render(b *strings.Builder, heading string, ok bool, items []Item, notes []string) {
	verdict := "OK"
	if !ok {
		verdict = "NOT OK"
	}
	fmt.Fprintf(b, "%s: %s\n", heading, verdict)
	for _, it := range items {
		mark := "ok  "
		if !it.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(b, "  %s %s", mark, it.What)
		if it.Detail != "" {
			fmt.Fprintf(b, ": %s", it.Detail)
		}
		b.WriteString("\n")
	}
	for _, n := range notes {
		fmt.Fprintf(b, "  note %s\n", n)
	}
}
