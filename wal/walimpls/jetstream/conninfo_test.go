package jetstream_test

import (
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// TestConnectionInfo: the opener reports the server it is connected to,
// and that it is not connected once the server is gone.
func TestConnectionInfo(t *testing.T) {
	srv := natstest.StartServer(t, embednats.Config{})
	o := buildOpener(t, jetstream.Config{URL: srv.URL(), Namespace: freshPrefix()})
	ci, ok := o.(walimpls.ConnectionInfo)
	if !ok {
		t.Fatal("the jetstream opener does not implement walimpls.ConnectionInfo")
	}
	if !ci.Connected() || ci.ConnectedURL() != srv.URL() {
		t.Fatalf("connected %v to %q, want true and %q", ci.Connected(), ci.ConnectedURL(), srv.URL())
	}
	srv.Shutdown()
	waitfor.Until(t, 10*time.Second, "the opener to see the server shut down", func() (bool, string) {
		return !ci.Connected(), "still connected"
	})
	if u := ci.ConnectedURL(); u != "" {
		t.Errorf("ConnectedURL %q while disconnected, want \"\"", u)
	}
}
