package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// lazyDrainer returns a drainer started lazily on a memory backend, and a
// func saying whether its run was launched.
func lazyDrainer(t *testing.T, ctx context.Context) (*drainer, wal.Opener, func() bool) {
	t.Helper()
	op, err := wal.NewOpenerBuilder(memory.NewBuilder()).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	d := testDrainer(op, 0)
	d.startLazily(ctx, ptr(listBacklog(nil)))
	launched := make(chan struct{})
	launch := d.launch
	d.launch = func() { close(launched); launch() }
	return d, op, func() bool {
		select {
		case <-launched:
			return true
		default:
			return false
		}
	}
}

// TestDrainerStartsAtFirstOutput: a lazily started drainer holds no
// goroutine while its primary stages nothing (prepare opens a chain
// without one), starts at the first enqueue and publishes it.
func TestDrainerStartsAtFirstOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, op, launched := lazyDrainer(t, ctx)
	if _, _, err := d.prepare(ctx, "out/0000", "e1"); err != nil {
		t.Fatal(err)
	}
	if launched() {
		t.Fatal("the drainer started before any transaction with outputs")
	}
	txns := committedOutputs(2, 2)
	for _, tx := range txns {
		if err := d.enqueue(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	if !launched() {
		t.Fatal("enqueue did not start the drainer")
	}
	waitfor.Until(t, 30*time.Second, "both transactions out", func() (bool, string) {
		return d.published.Load() == 2, fmt.Sprintf("published up to txn %d", d.published.Load())
	})
	cancel()
	d.stopRun()
	if d.err != nil {
		t.Fatal(d.err)
	}
	if got := readChannel(t, op, "out/0000"); len(got) != 2 {
		t.Fatalf("out/0000 holds %v, want one output of each transaction", got)
	}
}

// TestDrainerNeverStartedStops: stopping a drainer that never started
// returns at once and closes the chains prepare opened; none opens after.
func TestDrainerNeverStartedStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	d, _, launched := lazyDrainer(t, ctx)
	if _, _, err := d.prepare(ctx, "out/0000", "e1"); err != nil {
		t.Fatal(err)
	}
	cancel()
	stopped := make(chan struct{})
	go func() { defer close(stopped); d.stopRun() }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopRun of a drainer that never started did not return")
	}
	if launched() {
		t.Fatal("stopRun started the drainer")
	}
	d.mu.Lock()
	open := len(d.chans)
	d.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d chains left open", open)
	}
	if _, _, err := d.prepare(context.Background(), "out/0001", "e1"); !errors.Is(err, errDrainerClosed) {
		t.Fatalf("prepare after stop: %v, want errDrainerClosed", err)
	}
}
