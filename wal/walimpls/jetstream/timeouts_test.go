package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/embednats"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/natsproc"
	"github.com/consumerd/consumerd/internal/natstest"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// An acknowledgement that never comes must not stall the connection: the
// stream here stores appends without acknowledging them (StreamConfig.NoAck,
// which looks to the client like acks lost in a cluster leader change without
// a reconnect). The opener's watchdog fails them, retryably, between one and
// about 1.25 AckTimeout after they were sent, and the connection keeps
// working once acknowledgements flow again.
func TestLostAcksFailAfterAckTimeout(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const ackTimeout = 400 * time.Millisecond
	prefix := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: prefix, AckTimeout: ackTimeout})
	setNoAck := func(channel string, noAck bool) {
		t.Helper()
		tok, err := jetstream.EscapeChannel(channel)
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctxFor(t), prefix+"_"+tok)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.NoAck = noAck
		if _, err := js.UpdateStream(ctxFor(t), cfg); err != nil {
			t.Fatalf("set NoAck=%v on %s: %v", noAck, cfg.Name, err)
		}
	}
	for _, term := range []uint64{0, 3} {
		channel := fmt.Sprintf("lost-acks/%d", term)
		w := openWAL(t, o, channel, term)
		first, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("acked")})
		if err != nil {
			t.Fatal(err)
		}
		setNoAck(channel, true)
		const n = 50
		ctx := ctxFor(t)
		aa := w.(walimpls.AsyncAppender)
		errs := make(chan error, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("lost")},
				func(_ message.MessageID, err error) { errs <- err })
		}
		// Meanwhile another goroutine keeps appending, so the watchdog's
		// CleanupPublisher races with publishes (this test runs under -race).
		var (
			stop, stopped = make(chan struct{}), make(chan struct{})
			extra         sync.WaitGroup
			extraMu       sync.Mutex
			extraStored   int // failed by the watchdog: sent, stored, unacknowledged
			extraBad      error
		)
		go func() {
			defer close(stopped)
			for {
				select {
				case <-stop:
					return
				default:
				}
				extra.Add(1)
				aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("lost too")}, func(_ message.MessageID, err error) {
					extraMu.Lock()
					switch {
					case err != nil && errors.Is(err, njs.ErrJetStreamPublisherClosed):
						extraStored++
					case term > 0 && err != nil && walimpls.IsRetryable(err) && strings.Contains(err.Error(), "outcomes are still in flight"):
						// A fenced writer sends nothing while the outcomes
						// of a failed chain are still coming in.
					default:
						extraBad = fmt.Errorf("concurrent append settled with %v, want an ack-timeout error", err)
					}
					extraMu.Unlock()
					extra.Done()
				})
				time.Sleep(2 * time.Millisecond) // pacing only
			}
		}()
		for i := 0; i < n; i++ {
			select {
			case err := <-errs:
				if err == nil {
					t.Fatalf("term %d: append %d acknowledged by a stream that sends no acks", term, i)
				}
				if !errors.Is(err, njs.ErrJetStreamPublisherClosed) || !walimpls.IsRetryable(err) || !strings.Contains(err.Error(), "ack timeout") {
					t.Fatalf("term %d: append %d failed with %v, want a retryable ack-timeout error", term, i, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("term %d: %d of %d unacknowledged appends still pending after 10s", term, n-i, n)
			}
		}
		// The watchdog fails appends older than AckTimeout, checking every
		// AckTimeout/4; the upper bound leaves room for a loaded -race run.
		if el := time.Since(start); el < ackTimeout || el > 10*ackTimeout {
			t.Fatalf("term %d: unacknowledged appends failed after %v, want between %v and %v", term, el, ackTimeout, 10*ackTimeout)
		}
		close(stop)
		<-stopped
		extraDone := make(chan struct{})
		go func() { extra.Wait(); close(extraDone) }()
		select {
		case <-extraDone:
		case <-time.After(10 * time.Second):
			t.Fatalf("term %d: concurrent appends still pending 10s after they stopped", term)
		}
		if extraBad != nil {
			t.Fatalf("term %d: %v", term, extraBad)
		}
		// Acknowledgements flow again: the same connection appends, after the
		// messages that were stored without an ack.
		setNoAck(channel, false)
		id, err := w.Append(ctx, message.MutableMessage{Payload: []byte("acked again")})
		if err != nil {
			t.Fatalf("term %d: append after acks resumed: %v", term, err)
		}
		if want := first + message.MessageID(n+extraStored) + 1; id != want {
			t.Fatalf("term %d: append after acks resumed got id %d, want %d (after %d+%d stored unacknowledged)", term, id, want, n, extraStored)
		}
	}
}

// Term-0 appends in flight per connection are bounded by MaxPending: with
// the stream sending no acks, the append after MaxPending blocks in
// AppendAsync until its context ends; once the watchdog has failed the
// unacknowledged ones, slots are free again.
func TestTermZeroBackpressure(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const maxPending = 3
	prefix := freshPrefix()
	o := buildOpener(t, jetstream.Config{URL: url, Namespace: prefix, MaxPending: maxPending, AckTimeout: 500 * time.Millisecond})
	w := openWAL(t, o, "bp", 0)
	tok, err := jetstream.EscapeChannel("bp")
	if err != nil {
		t.Fatal(err)
	}
	setNoAck := func(noAck bool) {
		t.Helper()
		st, err := js.Stream(ctxFor(t), prefix+"_"+tok)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.NoAck = noAck
		if _, err := js.UpdateStream(ctxFor(t), cfg); err != nil {
			t.Fatalf("set NoAck=%v: %v", noAck, err)
		}
	}
	setNoAck(true)
	aa := w.(walimpls.AsyncAppender)
	errs := make(chan error, maxPending)
	for i := 0; i < maxPending; i++ {
		aa.AppendAsync(ctxFor(t), message.MutableMessage{Payload: []byte("unacked")}, func(_ message.MessageID, err error) { errs <- err })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	blocked := make(chan error, 1)
	aa.AppendAsync(ctx, message.MutableMessage{Payload: []byte("blocked")}, func(_ message.MessageID, err error) { blocked <- err })
	select {
	case err := <-blocked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("append beyond MaxPending: %v, want it to block until its context deadline", err)
		}
	default:
		t.Fatal("append beyond MaxPending returned without settling")
	}
	for i := 0; i < maxPending; i++ {
		select {
		case err := <-errs:
			if !walimpls.IsRetryable(err) || !strings.Contains(err.Error(), "ack timeout") {
				t.Fatalf("unacknowledged append %d: %v, want a retryable ack-timeout error", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d unacknowledged appends still pending after 10s", maxPending-i)
		}
	}
	setNoAck(false)
	if _, err := w.Append(ctxFor(t), message.MutableMessage{Payload: []byte("acked")}); err != nil {
		t.Fatalf("append after the slots were freed: %v", err)
	}
}

// TestRequestTimeoutIsRetryable: with the server gone, a request that gets
// no reply within RequestTimeout fails with a retryable error (the adaptor
// and the shard retry it; the caller's own deadline, in contrast, is final),
// also when the caller's deadline is far away: the chaos harness found a
// publish with a 30 s --timeout stuck in Open for all of it after the
// nats-server it asked was killed.
func TestRequestTimeoutIsRetryable(t *testing.T) {
	srv := natstest.StartServer(t, embednats.Config{})
	o := buildOpener(t, jetstream.Config{URL: srv.URL(), RequestTimeout: 300 * time.Millisecond})
	w := openWAL(t, o, "words/0001", 0)
	srv.Shutdown()
	for name, call := range map[string]func(context.Context) error{
		"LastID":     func(ctx context.Context) error { _, err := w.LastID(ctx); return err },
		"LastMarker": func(ctx context.Context) error { _, err := w.(walimpls.BatchAppender).LastMarker(ctx, "c"); return err },
		"Open": func(ctx context.Context) error {
			_, err := o.Open(ctx, &walimpls.OpenOption{Channel: "words/0002"})
			return err
		},
	} {
		err := call(context.Background())
		if err == nil || !walimpls.IsRetryable(err) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no reply within the request timeout") {
			t.Errorf("%s without a server: %v (retryable %v), want a retryable no-reply error", name, err, walimpls.IsRetryable(err))
		}
		long, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		err = call(long)
		cancel()
		if !walimpls.IsRetryable(err) || time.Since(start) > 30*time.Second {
			t.Errorf("%s within a 1-minute deadline: %v after %s, want a retryable no-reply error after the request timeout", name, err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = call(ctx)
		cancel()
		if walimpls.IsRetryable(err) {
			t.Errorf("%s past the caller's deadline: %v is retryable, want final", name, err)
		}
	}
}

// TestBuildMarksJetStreamNotAnsweringYet: a server that is up but whose
// JetStream cannot answer (one node of a three-node cluster whose peers have
// not come: no meta leader) fails Build with ErrJetStreamUnavailable, which
// `serve` waits out; a server without JetStream fails without it.
func TestBuildMarksJetStreamNotAnsweringYet(t *testing.T) {
	start := func(args ...string) string {
		url, _ := natsproc.StartWith(t, args...)
		return url
	}
	lonely := start("-js", "-sd", t.TempDir(), "--name", "lonely", "--cluster_name", "c",
		"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)),
		"--routes", fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d", freeport.Port(t), freeport.Port(t)))
	_, err := jetstream.NewBuilder(jetstream.Config{URL: lonely, ConnectTimeout: time.Second}).Build()
	if !errors.Is(err, jetstream.ErrJetStreamUnavailable) {
		t.Fatalf("Build on a cluster node without a meta leader: %v, want ErrJetStreamUnavailable", err)
	}
	plain := start()
	_, err = jetstream.NewBuilder(jetstream.Config{URL: plain, ConnectTimeout: time.Second}).Build()
	if err == nil || errors.Is(err, jetstream.ErrJetStreamUnavailable) {
		t.Fatalf("Build on a server without JetStream: %v, want an error that is not ErrJetStreamUnavailable", err)
	}
}
