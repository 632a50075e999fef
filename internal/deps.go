//go:build tools

// Package internal pins modules that parts of the tree use, so that
// `go mod tidy` keeps them while those parts are being built.
package internal

import (
	_ "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/exporter-toolkit/web"
	_ "github.com/prometheus/exporter-toolkit/web/kingpinflag"
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "github.com/twmb/franz-go/pkg/sasl/plain"
	_ "github.com/twmb/franz-go/pkg/sasl/scram"
	_ "golang.org/x/sync/singleflight"
)
