package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Admin is an operator's JetStream connection to the server at url (what
// the NATS CLI does: delete, purge, re-create or inspect streams under a
// running cluster); the connection closes with t.
func Admin(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream on %s: %v", url, err)
	}
	return js
}
