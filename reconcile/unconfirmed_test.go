package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// undatedPair is a pair where keys 4 and 7 were deleted from the
// authority a moment ago (undated: held) and key 5 has no outbox row for
// its version 2 (dated: judged at once).
func undatedPair(t *testing.T) *pair {
	p := newPair(t, "bigint")
	p.addInSync(t, 1, 10)
	p.a.Exec(t, `DELETE FROM messages WHERE id IN (4, 7)`)
	p.a.Exec(t, `UPDATE messages SET version = 2 WHERE id = 5`)
	return p
}

// TestHoldNotice: a one-off run that holds findings no column dates says
// how many and until when (grace after the last was seen) before it waits.
func TestHoldNotice(t *testing.T) {
	p := undatedPair(t)
	var notices []HoldNotice
	s := scheduler(t, p.yaml(""), nil, OnHold(func(n HoldNotice) { notices = append(notices, n) }))
	waited := false
	s.jobs["search_index"].hooks.beforeConfirm = func() {
		waited = true
		if len(notices) != 1 {
			t.Errorf("%d notices before the wait, want 1", len(notices))
		}
	}
	start := time.Now()
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings", found(res), []string{"missing_outbox 5", "orphan_target 4", "orphan_target 7"})
	if !waited || len(notices) != 1 {
		t.Fatalf("waited %v, notices %+v: want one notice and one wait", waited, notices)
	}
	n := notices[0]
	if n.Job != "search_index" || n.Findings != 2 || n.Grace != 2*time.Minute {
		t.Errorf("notice %+v, want search_index, 2 findings, grace 2m", n)
	}
	// The run's clock is the wall clock here (its waits are skipped, not
	// its start): the last finding was seen after start.
	if lo := start.Add(2 * time.Minute); n.Until.Before(lo) || n.Until.After(time.Now().Add(2*time.Minute)) {
		t.Errorf("held until %v, want grace after the findings were seen (%v or later)", n.Until, lo)
	}
	for _, f := range res.Findings {
		if f.Unconfirmed {
			t.Errorf("%s %s marked unconfirmed after it was read again", f.Kind, f.Key)
		}
	}
}

// TestReportUnconfirmed: with ReportUnconfirmed the run does not wait: the
// findings no column dates are reported at once, marked unconfirmed in
// the result, its text and its JSON, apart from the confirmed gaps; the
// dated finding is judged as always.
func TestReportUnconfirmed(t *testing.T) {
	p := undatedPair(t)
	notices := 0
	s := scheduler(t, p.yaml(""), nil, ReportUnconfirmed(), OnHold(func(HoldNotice) { notices++ }))
	s.jobs["search_index"].hooks.beforeConfirm = func() { t.Error("the run waited to confirm") }
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings", found(res), []string{"missing_outbox 5", "orphan_target 4", "orphan_target 7"})
	if notices != 0 {
		t.Errorf("%d hold notices, want none: nothing is held", notices)
	}
	for _, f := range res.Findings {
		if want := f.Kind == OrphanTarget; f.Unconfirmed != want {
			t.Errorf("%s %s: unconfirmed %v, want %v", f.Kind, f.Key, f.Unconfirmed, want)
		}
	}
	if res.ReportedUnconfirmed != 2 || res.Gaps[OrphanTarget] != 0 || res.Gaps[MissingOutbox] != 1 {
		t.Errorf("reported unconfirmed %d, gaps %v: want 2 apart from the one confirmed missing_outbox", res.ReportedUnconfirmed, res.Gaps)
	}
	if code := ExitCode(nil, res); code != ExitGaps {
		t.Errorf("exit %d, want %d: unconfirmed findings are findings", code, ExitGaps)
	}
	var text bytes.Buffer
	if err := Print(&text, res, "text"); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, "orphan_target") != strings.HasSuffix(strings.TrimSpace(line), "UNCONFIRMED") {
			t.Errorf("line %q: only orphan_target rows are marked UNCONFIRMED", line)
		}
		if strings.HasPrefix(line, "orphan_target") {
			marked++
		}
	}
	if marked != 2 || !strings.Contains(text.String(), "2 findings no column dates are reported at once, UNCONFIRMED") {
		t.Errorf("text output lacks the marked rows or the summary:\n%s", text.String())
	}
	var js bytes.Buffer
	if err := Print(&js, res, "json"); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range back.Findings {
		if f.Unconfirmed {
			n++
		}
	}
	if n != 2 || back.ReportedUnconfirmed != 2 || !strings.Contains(js.String(), `"unconfirmed": true`) {
		t.Errorf("JSON marks %d findings unconfirmed, reported_unconfirmed %d:\n%s", n, back.ReportedUnconfirmed, js.String())
	}
}
