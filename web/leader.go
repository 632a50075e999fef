package web

import (
	"fmt"
	"net/http"

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
