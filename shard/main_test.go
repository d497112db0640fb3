package shard_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// TestMain runs the tests, then checks that every replica left the status
// gauge, and the lag and primary series (each test kills its nodes at
// cleanup), and that no goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := metricsSettled(); err != nil {
			fmt.Fprintln(os.Stderr, "metrics:", err)
			code = 1
		}
		// nats.go v1.55.0: resetPendingAcksOnReconnect may start after the
		// connection closed and wait on a nil channel forever (third party).
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func metricsSettled() error {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "consumerd_shard_status":
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v != 0 {
					return fmt.Errorf("consumerd_shard_status %v = %v after every node stopped", m.GetLabel(), v)
				}
			}
		case "consumerd_shard_source_lag_messages",
			"consumerd_shard_last_commit_timestamp_seconds",
			"consumerd_snapshot_last_success_timestamp_seconds",
			"consumerd_recoverylog_bytes_since_snapshot",
			"consumerd_shard_unpublished_output_transactions":
			if n := len(mf.GetMetric()); n != 0 {
				return fmt.Errorf("%d %s series left after every node stopped", n, mf.GetName())
			}
		}
	}
	return nil
}
