package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/httpjson"
	"github.com/outbox-exporter/outbox_exporter/internal/leader"
)

// pageStuckRows is how many rows the page shows per outbox; stuckDefault
// is /api/v1/stuck's limit when none is given (maxStuckLimit caps it);
// pageQueryTime bounds the query the page sends for them.
const (
	pageStuckRows = 5
	stuckDefault  = 20
	pageQueryTime = 2 * time.Second
)

func (s *Server) apiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/stuck", s.serveStuck)
	mux.HandleFunc("GET /api/v1/reconcile", func(w http.ResponseWriter, r *http.Request) {
		a := s.App()
		if a == nil {
			httpjson.Write(w, http.StatusServiceUnavailable, apiError{errNoApp.Error()})
			return
		}
		if job := jobOf(r, a); a.Config.Reconcile[job] != nil && standby(w, a, leader.Task("reconcile", job)) {
			return
		}
		a.Reconcile.Handler().ServeHTTP(w, r)
	})
	auditH := audit.Handler(func(name string) *audit.Auditor {
		if a := s.App(); a != nil {
			return a.Audits[name]
		}
		return nil
	})
	mux.HandleFunc("GET /api/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("outbox")
		if a := s.App(); a != nil && a.Audits[name] != nil && standby(w, a, leader.Task("audit", name)) {
			return
		}
		auditH.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /api/v1/leader", s.serveLeader)
}

// serveStuck answers /api/v1/stuck?outbox=N&limit=K with the oldest
// unpublished rows. It runs one query per outbox at a time (stuckGate):
// another request meanwhile gets 429.
func (s *Server) serveStuck(w http.ResponseWriter, r *http.Request) {
	a := s.App()
	if a == nil {
		httpjson.Write(w, http.StatusServiceUnavailable, apiError{errNoApp.Error()})
		return
	}
	name := r.URL.Query().Get("outbox")
	if name == "" {
		if names := a.OutboxNames(); len(names) == 1 {
			name = names[0]
		} else {
			httpjson.Write(w, http.StatusBadRequest, apiError{fmt.Sprintf("missing ?outbox=NAME; configured outboxes: %v", names)})
			return
		}
	}
	limit := stuckDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxStuckLimit {
			httpjson.Write(w, http.StatusBadRequest, apiError{fmt.Sprintf("limit %q is not a whole number from 1 to %d", v, maxStuckLimit)})
			return
		}
		limit = n
	}
	if _, ok := a.Config.Outboxes[name]; !ok {
		httpjson.Write(w, http.StatusNotFound, apiError{fmt.Sprintf("outbox %q is not configured; configured outboxes: %v", name, a.OutboxNames())})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ScrapeTimeout)
	defer cancel()
	release := s.gate.acquire(ctx, a, name, false)
	if release == nil {
		w.Header().Set("Retry-After", "1")
		httpjson.Write(w, http.StatusTooManyRequests, apiError{fmt.Sprintf("another request is reading the stuck rows of outbox %q; try again in a moment", name)})
		return
	}
	rows, err := a.Stuck(ctx, name, limit)
	release()
	switch {
	case errors.Is(err, app.ErrUnknownOutbox):
		httpjson.Write(w, http.StatusNotFound, apiError{fmt.Sprintf("outbox %q is not configured; configured outboxes: %v", name, a.OutboxNames())})
	case err != nil:
		// A database error may quote row data ("invalid input syntax for
		// type integer: ..."): the answer names only where to look.
		id := errorID()
		s.log.Error("stuck rows", "outbox", name, "error_id", id, "err", err)
		httpjson.Write(w, http.StatusServiceUnavailable, apiError{fmt.Sprintf("stuck rows of outbox %q unavailable; the exporter's log has the error, id %s", name, id)})
	default:
		httpjson.Write(w, http.StatusOK, map[string]any{"outbox": name, "rows": rows})
	}
}

// stuckRows returns the oldest unpublished rows of an outbox for the page.
// It is the page's only query; it waits for the outbox's stuckGate slot
// and runs within pageQueryTime.
func (s *Server) stuckRows(r *http.Request, outbox string) ([]StuckView, string) {
	a := s.App()
	if a == nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageQueryTime)
	defer cancel()
	release := s.gate.acquire(ctx, a, outbox, true)
	if release == nil {
		return nil, "stuck rows unavailable: other requests are reading them; reload the page in a moment"
	}
	rows, err := a.Stuck(ctx, outbox, pageStuckRows)
	release()
	if err != nil {
		id := errorID()
		s.log.Error("stuck rows for the page", "outbox", outbox, "error_id", id, "err", err)
		return nil, "stuck rows unavailable; the exporter's log has the error, id " + id
	}
	out := make([]StuckView, len(rows))
	for i, row := range rows {
		out[i] = StuckView{ID: row.ID, State: row.State.String(), Age: row.AgeSeconds, AgeUnknown: row.AgeUnknown, Attempts: row.Attempts, LastError: row.LastError}
		if o := row.Order; o != nil {
			out[i].Order = fmt.Sprintf("aggregate %s: sequence %s overtaken by %s", o.Aggregate, o.Sequence, o.OvertakenBy)
		}
	}
	return out, ""
}

// reconcileFindings returns the first findings of a job's last run.
func (s *Server) reconcileFindings(job string, n int) []FindingView {
	a := s.App()
	if a == nil {
		return nil
	}
	last := a.Reconcile.Last(job)
	if last == nil {
		return nil
	}
	var out []FindingView
	for _, f := range last.Findings {
		if len(out) == n {
			break
		}
		out = append(out, FindingView{Key: f.Key, Kind: string(f.Kind), AuthorityVersion: fmtVersion(f.AuthorityVersion),
			TargetVersion: fmtVersion(f.TargetVersion), OutboxState: f.OutboxState})
	}
	return out
}

func fmtVersion(v *int64) string {
	if v == nil {
		return "—"
	}
	return strconv.FormatInt(*v, 10)
}
