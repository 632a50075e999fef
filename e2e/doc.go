// Package e2e proves the exporter end to end: the demo pipeline under the
// exporter, real Prometheus 2.42 loading the rules `generate` writes, real
// Alertmanager 0.25 delivering to a webhook in the test, every generated
// dashboard query run against Prometheus, and the on-call page rendered in
// headless Chromium. The test is e2e_test.go; this package's non-test
// files hold the decisions it makes (which alert each fault must raise,
// how a rule's for: is shortened, how Grafana substitutes a dashboard's
// variables), each tested without any process running.
package e2e
