package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/httpjson"
	"github.com/outbox-exporter/outbox_exporter/internal/leader"
)

// standby answers a findings request for task on a replica that does not
// lead it, and reports whether it did: 409 with the leader's name (also
// in the Outbox-Exporter-Leader header), for the caller to ask there. A
// standby's findings are none or stale, from a term it no longer holds.
func standby(w http.ResponseWriter, a *app.App, task string) bool {
	if a.Leader == nil {
		return false
	}
	if _, ok := a.Leader.Lease(task); ok {
		return false
	}
	who := ""
	for _, s := range a.Leader.Status() {
		if s.Task == task {
			who = s.Leader
		}
	}
	msg := fmt.Sprintf("this replica stands by for %s; ask the replica that leads it", task)
	if who == "" {
		msg = fmt.Sprintf("this replica stands by for %s and no replica leads it now", task)
	}
	w.Header().Set("Outbox-Exporter-Leader", who)
	httpjson.Write(w, http.StatusConflict, map[string]string{"error": msg, "task": task, "leader": who})
	return true
}

// serveLeader answers /api/v1/leader: each task, whether this replica
// leads it, and who does.
func (s *Server) serveLeader(w http.ResponseWriter, _ *http.Request) {
	a := s.App()
	if a == nil {
		httpjson.Write(w, http.StatusServiceUnavailable, apiError{errNoApp.Error()})
		return
	}
	if a.Leader == nil {
		httpjson.Write(w, http.StatusOK, map[string]any{"leader_election": false, "tasks": []leader.Status{}})
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"leader_election": true, "tasks": a.Leader.Status()})
}

// jobOf is the reconcile job a request names, or the only one.
func jobOf(r *http.Request, a *app.App) string {
	job := r.URL.Query().Get("job")
	if names := a.Reconcile.Jobs(); job == "" && len(names) == 1 {
		job = names[0]
	}
	return job
}

// standingBy reports whether a runs leader election and leads none of
// its tasks: a replica that only stands by. Unscraped, it need not
// collect by itself to keep its page's trends; see keepFresh.
func standingBy(a *app.App) bool {
	if a == nil || a.Leader == nil {
		return false
	}
	st := a.Leader.Status()
	for _, s := range st {
		if s.Leading {
			return false
		}
	}
	return len(st) > 0
}

// refreshDue reports whether keepFresh collects at now: when the last
// collection is a history step old (nobody scraped since), except on a
// replica that only stands by.
func (s *Server) refreshDue(now time.Time) bool {
	if standingBy(s.App()) {
		return false
	}
	at, ok := s.rec.lastAt()
	return !ok || now.Sub(at) >= historyStep
}

// freshenForPage collects once before a page view at now on a replica
// that stands by when its last collection is a history step old: such a
// replica does not collect by itself when nobody scrapes it (refreshDue),
// so its page collects when somebody looks, and the page's own refresh
// keeps it current while they do.
func (s *Server) freshenForPage(ctx context.Context, now time.Time) {
	if !standingBy(s.App()) {
		return
	}
	if at, ok := s.rec.lastAt(); !ok || now.Sub(at) >= historyStep {
		s.gather(ctx)
	}
}
