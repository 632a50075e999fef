package reconcile

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/httpjson"
)

// Handler serves /api/v1/reconcile?job=N: the last run of job N as JSON
// (the Result: job, times, counts, and findings with key, kind, authority
// version, target version and outbox state). job may be left out when one
// job is configured. It answers 400 for a missing or unknown job and 404
// before the job's first run has ended.
func (s *Scheduler) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		job := req.URL.Query().Get("job")
		names := s.Jobs()
		if job == "" && len(names) == 1 {
			job = names[0]
		}
		if s.job(job) == nil {
			msg := fmt.Sprintf("unknown reconcile job %q; configured jobs: %s", job, strings.Join(names, ", "))
			if job == "" {
				msg = "missing ?job=NAME; configured jobs: " + strings.Join(names, ", ")
			}
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": msg})
			return
		}
		last := s.Last(job)
		if last == nil {
			httpjson.Write(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("reconcile job %q has not finished a run yet", job)})
			return
		}
		httpjson.Write(w, http.StatusOK, last)
	})
}
