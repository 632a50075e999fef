// Package httpjson writes the JSON answers of the exporter's HTTP APIs,
// the same way for every capability that serves one.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers with status and v as indented JSON. An encoding error
// cannot be reported once the status is written; the values served are
// plain structs that always encode.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
