package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
)

// TestMemberWithAnotherNamespaceIsRefused: the first member records the
// cluster's WAL namespace in etcd; a member of the same cluster (same
// --etcd.prefix) started with another --wal.namespace would use other
// streams, and is refused at once, naming both.
func TestMemberWithAnotherNamespaceIsRefused(t *testing.T) {
	c := newCLI(t)
	c.serve()
	eventually(t, "the first member to join (it records the namespace before)", func() (bool, string) {
		out, errs, _ := c.run("", "members", "list")
		return strings.Contains(out, "m1"), out + errs
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound, not a measurement
	defer cancel()
	var errb bytes.Buffer
	code := Run(ctx, []string{"serve", "--etcd.endpoints", c.etcd, "--wal.url", c.nats, "--wal.namespace", "blue",
		"--data-dir", t.TempDir(), "--http.addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--member.id", "m2", "--snapshot.store", "none"},
		Options{Apps: c.apps, Stderr: &errb, Signals: make(chan os.Signal)})
	want := `the cluster under --etcd.prefix /consumerd keeps its WAL in namespace "consumerd" (/consumerd/wal-namespace), but this member would use "blue": start it with --wal.namespace consumerd`
	if code != 1 || !strings.Contains(errb.String(), want) || ctx.Err() != nil {
		t.Fatalf("serve with another namespace: exit %d (context %v), stderr:\n%s\nwant exit 1 saying %q", code, ctx.Err(), errb.String(), want)
	}
}
