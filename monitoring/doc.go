// Package monitoring holds the likes service's Prometheus rules
// (alerts.yaml: recording rules for the SLIs and one alert per SLO or
// failure mode, each with a runbook link under docs/runbooks), their
// promtool unit tests (alerts_test.yaml, run by `make test-rules`) and the
// Grafana dashboard (dashboard.json).
//
// The package has no code: its test starts two real regions in a cluster
// and one on the Kafka log (an in-process fake Kafka), scrapes their
// registries after a few writes and reads, and checks that every metric name
// that a dashboard panel or an alert expression uses is one the service
// really exports (or a recording rule of alerts.yaml), so a renamed metric
// cannot silently empty a panel or mute an alert.
package monitoring
