// Package libraries proves the outbox presets (internal/config, preset.go)
// on the libraries' own tables: each table is created from the library's
// DDL under testdata/ (its origin named in the file), loaded with seeded
// states the way the library writes them, and every signal the exporter
// reads with only `preset: NAME` is compared with the truth computed in
// SQL from the library's own meaning of its columns.
//
// It holds no code the exporter runs: the presets are configuration, and
// the collector is collectors/outbox's.
package libraries
