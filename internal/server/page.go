package server

import (
	"net/http"
)

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(`<!doctype html><html><head><title>outbox_exporter</title></head><body><h1>outbox_exporter</h1><p><a href="` + s.opts.TelemetryPath + `">Metrics</a></p></body></html>`))
}
