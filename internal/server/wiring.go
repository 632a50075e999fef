package server

import (
	"net/http"
)

// stuckRows returns the oldest unpublished rows of an outbox for the page.
func (s *Server) stuckRows(r *http.Request, outbox string) ([]StuckView, string) {
	return nil, ""
}

// reconcileFindings returns the first findings of a job's last run.
func (s *Server) reconcileFindings(job string, n int) []FindingView {
	return nil
}
