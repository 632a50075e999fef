package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestGraceFromPublication: grace runs from the moment the pipeline could
// first have applied a change, not from the row's creation: an event
// created long ago and published a moment ago (a relay backlog) is no
// gap yet, and with updated_at an authority row changed a moment ago is
// not judged.
func TestGraceFromPublication(t *testing.T) {
	p := newPair(t, "bigint")
	p.addInSync(t, 1, 10)
	// Created a day ago, published now, not yet indexed: relay backlog.
	p.a.Exec(t, `INSERT INTO messages (id, version, created_at) VALUES (11, 1, now() - interval '1 day')`)
	p.a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at) VALUES (11, 1, now() - interval '1 day', 'PUBLISHED', now())`)
	// The same, published a day ago: a real gap.
	p.add(t, 12, 1, old, "PUBLISHED", 0)
	s := scheduler(t, p.yaml(""), nil)
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings", found(res), []string{"missing_target 12"})

	// Without an outbox, an old row updated a moment ago is not judged
	// when the authority dates its updates.
	p.a.Exec(t, `ALTER TABLE messages ADD COLUMN updated_at timestamptz`)
	p.a.Exec(t, `UPDATE messages SET version = 2, updated_at = now() WHERE id = 3`)
	noOutbox := strings.Replace(p.yaml(""), "    outbox: {name: messages, key: message_id, version: message_version}\n", "", 1)
	dated := strings.Replace(noOutbox, "created_at: created_at}", "created_at: created_at, updated_at: updated_at}", 1)
	s = scheduler(t, dated, nil)
	res, err = s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings with updated_at", found(res), []string{"missing_target 11", "missing_target 12"})
}

// TestUndatedFindingsPersist: where no column dates the change (a
// deletion, an update without updated_at), a finding counts only if it
// still holds grace after it was first seen. The pipeline applying the
// change in the meantime clears it.
func TestUndatedFindingsPersist(t *testing.T) {
	p := newPair(t, "bigint")
	p.addInSync(t, 1, 10)
	p.a.Exec(t, `DELETE FROM messages WHERE id IN (4, 7)`) // deleted a moment ago
	noOutbox := strings.Replace(p.yaml(""), "    outbox: {name: messages, key: message_id, version: message_version}\n", "", 1)
	p.a.Exec(t, `UPDATE messages SET version = 2 WHERE id = 5`) // updated a moment ago, undated

	for _, c := range []struct {
		name    string
		yaml    string
		applied bool
		want    []string
	}{
		// With the outbox, version 2 of 5 has no outbox row: a dated gap.
		{"deletions not applied", p.yaml(""), false, []string{"missing_outbox 5", "orphan_target 4", "orphan_target 7"}},
		{"deletions applied within grace", p.yaml(""), true, []string{"missing_outbox 5"}},
		{"no outbox, not applied", noOutbox, false, []string{"orphan_target 4", "orphan_target 7", "stale_target 5"}},
		{"no outbox, applied within grace", noOutbox, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.b.Exec(t, `INSERT INTO search_index VALUES (4, 1), (7, 1) ON CONFLICT DO NOTHING`)
			p.b.Exec(t, `UPDATE search_index SET version = 1 WHERE message_id = 5`)
			s := scheduler(t, c.yaml, nil)
			held := 0
			s.jobs["search_index"].hooks.beforeConfirm = func() {
				held++
				if c.applied {
					p.b.Exec(t, `DELETE FROM search_index WHERE message_id IN (4, 7)`)
					p.b.Exec(t, `UPDATE search_index SET version = 2 WHERE message_id = 5`)
				}
			}
			res, err := s.Run(context.Background(), "search_index", true)
			if err != nil {
				t.Fatal(err)
			}
			sameLines(t, c.name, found(res), c.want)
			if held != 1 {
				t.Errorf("confirmation ran %d times, want once", held)
			}
		})
	}
}

// TestConfirmationWaitsForGrace: without the test clock, a run holding an
// undated finding ends no sooner than grace after it saw it.
func TestConfirmationWaitsForGrace(t *testing.T) {
	p := newPair(t, "bigint")
	p.add(t, 1, 1, old, "PUBLISHED", 1)
	p.b.Exec(t, `INSERT INTO search_index VALUES (2, 1)`) // its message was deleted
	s := scheduler(t, strings.Replace(p.yaml(""), "grace: 2m", "grace: 1500ms", 1), nil)
	s.jobs["search_index"].hooks.skipWaits = false
	start := time.Now()
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings", found(res), []string{"orphan_target 2"})
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("the run took %v: it confirmed the orphan before grace had passed", took)
	}
}

// TestTimeout: a run that does not end shows in running_seconds while it
// runs, and is cancelled at its timeout as a failed run that says so.
func TestTimeout(t *testing.T) {
	p := newPair(t, "bigint")
	p.add(t, 1, 1, old, "PUBLISHED", 1)
	s := scheduler(t, strings.Replace(p.yaml(""), "grace: 2m", "grace: 2m\n    timeout: 300ms", 1), nil)
	stalled := make(chan struct{})
	// The run can end only by its timeout: it waits for its context.
	s.jobs["search_index"].hooks.stall = func(ctx context.Context) {
		close(stalled)
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			t.Error("the run's context did not end at its timeout")
		}
	}
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = s.Run(context.Background(), "search_index", true)
		done <- err
	}()
	<-stalled
	if d := s.running("search_index"); d <= 0 {
		t.Errorf("running %v during a run, want > 0", d)
	}
	err := <-done
	if err == nil || res == nil || !strings.Contains(res.Error, "the run took longer than its timeout of 300ms") {
		t.Fatalf("run past its timeout: %v, %+v", err, res)
	}
	if d := s.running("search_index"); d != 0 {
		t.Errorf("running %v after the run, want 0", d)
	}
}

// TestHeldAcrossRuns: scheduled runs hold a finding no column dates and
// report it from the first run grace or more after its first sighting;
// one the pipeline repaired in the meantime is never reported and is
// forgotten.
func TestHeldAcrossRuns(t *testing.T) {
	p := newPair(t, "bigint")
	p.addInSync(t, 1, 10)
	p.a.Exec(t, `DELETE FROM messages WHERE id IN (4, 7)`) // deleted a moment ago
	s := scheduler(t, p.yaml(""), nil)
	js := s.jobs["search_index"]
	js.confirmInRun = false
	var skew time.Duration
	js.clock = func() time.Time { return time.Now().Add(skew) }
	ctx := context.Background()
	run := func(step string, want []string, held int64) {
		t.Helper()
		res, err := s.Run(ctx, "search_index", true)
		if err != nil {
			t.Fatal(err)
		}
		sameLines(t, step, found(res), want)
		if res.Held != held {
			t.Errorf("%s: %d held, want %d", step, res.Held, held)
		}
	}
	run("first sighting", nil, 2)
	skew += time.Minute
	run("within grace of it", nil, 2)
	// The deletion of 7 reaches the target.
	p.b.Exec(t, `DELETE FROM search_index WHERE message_id = 7`)
	skew += time.Minute
	run("grace after it", []string{"orphan_target 4"}, 0)
	if len(js.held) != 1 {
		t.Errorf("held after the full sweep: %v, want 4 alone", js.held)
	}
	// Reported once, it is reported by every run while it persists.
	run("the next run", []string{"orphan_target 4"}, 0)
}
