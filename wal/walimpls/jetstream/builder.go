package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/natsconn"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// BackendName is the registry name of this backend.
const BackendName = "jetstream"

// Builder builds JetStream openers; each Build makes one NATS connection.
type Builder struct {
	cfg Config
}

var _ walimpls.OpenerBuilderImpls = (*Builder)(nil)

// NewBuilder returns a builder for cfg. Configuration errors are reported by
// Build.
func NewBuilder(cfg Config) *Builder { return &Builder{cfg: cfg} }

// Name is "jetstream".
func (b *Builder) Name() string { return BackendName }

// Build connects to the NATS server(s) in Config.URL and checks that
// JetStream is enabled. Errors name the URL tried.
func (b *Builder) Build() (walimpls.OpenerImpls, error) {
	cfg, err := b.cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.Named("jetstream")
	var maxPayload atomic.Int64
	var self atomic.Pointer[opener] // for the handlers: set once o exists
	nc, err := nats.Connect(cfg.URL, natsconn.Options(cfg.ClientName, cfg.ConnectTimeout, cfg.Security,
		nats.ReconnectHandler(func(c *nats.Conn) {
			maxPayload.Store(c.MaxPayload()) // the new server's limit
			log.Info("reconnected to NATS", "url", c.ConnectedUrl())
			if o := self.Load(); o != nil {
				o.recheckScanners()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("NATS async error", "url", cfg.URL, "error", err)
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w", cfg.URL, err)
	}
	maxPayload.Store(nc.MaxPayload())
	o := &opener{cfg: cfg, nc: nc, log: log, wals: map[*walImpl]struct{}{}, maxPayload: &maxPayload,
		batchSlots: make(chan struct{}, cfg.MaxBatchesInFlight),
		atomic:     AtomicBatchesIn(nc.ConnectedServerVersion()),
		metadata:   versionAtLeast(nc.ConnectedServerVersion(), 2, 10),
		stopWatch:  make(chan struct{}), watchDone: make(chan struct{})}
	self.Store(o)
	if err := o.startFast(); err != nil {
		nc.Close()
		return nil, err
	}
	// A disconnect loses the replies of the appends in flight: fail them
	// (retryably) at once rather than at the ack timeout.
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			log.Warn("disconnected from NATS", "url", cfg.URL, "error", err)
		}
		// What a scanner reads after the reconnect may be another server's
		// or a restored store's: each verifying scanner checks its position
		// before it delivers again.
		o.recheckScanners()
		o.failFast(func(*pending) bool { return true }, func(p *pending) error {
			return fmt.Errorf("jetstream: append to channel %q on %s: %w", p.w.n.channel, cfg.URL, nats.ErrDisconnected)
		})
	})
	// Appends go through the opener's own publisher (publish.go); the
	// JetStream context is for stream management and fence writes.
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: JetStream context on %s: %w", cfg.URL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		if !errors.Is(err, jetstream.ErrJetStreamNotEnabled) && !errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			err = fmt.Errorf("%w: %w", ErrJetStreamUnavailable, err)
		}
		return nil, fmt.Errorf("jetstream: JetStream not available on %s: %w", cfg.URL, err)
	}
	log.Debug("connected", "url", nc.ConnectedUrl(), "max_payload", nc.MaxPayload())
	o.js = js
	go o.watch()
	return o, nil
}

// ErrJetStreamUnavailable marks a Build that reached the server but got no
// JetStream answer in time, as from a cluster still electing its meta
// leader: worth waiting for (a server with JetStream disabled fails
// without it).
var ErrJetStreamUnavailable = errors.New("no answer from JetStream yet")

// opener is one NATS connection; it opens channels (streams).
type opener struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	log hclog.Logger

	mu     sync.Mutex
	closed bool
	wals   map[*walImpl]struct{}
	// truncMu serialises Truncate's read-modify-write of stream metadata
	// within this connection.
	truncMu sync.Mutex
	// fast publishes every append on core NATS (see publish.go).
	fast fastPub
	// batchSlots holds a token per atomic batch in flight
	// (Config.MaxBatchesInFlight).
	batchSlots chan struct{}
	// atomic: the server stores batches atomically (nats-server >= 2.12).
	atomic bool
	// metadata: the server keeps stream metadata (>= 2.10), where Truncate
	// records the truncation point.
	metadata bool
	// maxPayload caches the server's max_payload (refreshed on reconnect),
	// read on every append without taking the connection's lock.
	maxPayload *atomic.Int64
	// epoch is the watchdog's tick count: appends record it when published
	// (see watch).
	epoch     atomic.Uint64
	stopWatch chan struct{} // closed by Close: the watchdog exits
	watchDone chan struct{} // closed when the watchdog has exited
}

// Open opens (creating if needed, unless opt.NoCreate) the channel's stream and, for a term > 0,
// fences lower terms (see the package doc).
func (o *opener) Open(ctx context.Context, opt *walimpls.OpenOption) (_ walimpls.WALImpls, err error) {
	if opt == nil {
		return nil, errors.New("jetstream: Open: nil OpenOption")
	}
	n, err := channelNames(o.cfg.Namespace, opt.Channel)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("jetstream: open channel %q: %w", opt.Channel, walimpls.ErrClosed)
	}
	// Creating a replicated stream and fencing it take several round trips
	// through the cluster's leaders: the whole Open has 3 AckTimeouts, each
	// look-up RequestTimeout (ensureStream).
	ctx, end := o.requestWithin(ctx, 3*o.cfg.AckTimeout)
	defer end(&err)
	st, err := o.ensureStream(ctx, n, opt.NoCreate)
	if err != nil {
		return nil, err
	}
	w := newWAL(o, n, st, opt.Term)
	if opt.Term > 0 {
		if err := w.fence(ctx); err != nil {
			w.Close()
			return nil, err
		}
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		w.Close()
		return nil, fmt.Errorf("jetstream: open channel %q: %w", opt.Channel, walimpls.ErrClosed)
	}
	o.wals[w] = struct{}{}
	o.mu.Unlock()
	return w, nil
}

// ensureStream looks up the channel's stream, creating it when missing
// (unless noCreate: then a missing stream is walimpls.ErrNoChannel).
func (o *opener) ensureStream(ctx context.Context, n names, noCreate bool) (jetstream.Stream, error) {
	for attempt := 0; attempt < 3; attempt++ {
		st, err := o.lookupStream(ctx, n)
		if err == nil {
			if err := checkSubjects(st.CachedInfo(), n); err != nil {
				return nil, err
			}
			return st, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("jetstream: look up stream %s for channel %q on %s: %w", n.stream, n.channel, o.cfg.URL, err)
		}
		if noCreate {
			return nil, fmt.Errorf("jetstream: channel %q: stream %s does not exist on %s: %w", n.channel, n.stream, o.cfg.URL, walimpls.ErrNoChannel)
		}
		storage := jetstream.FileStorage
		if o.cfg.MemoryStorage {
			storage = jetstream.MemoryStorage
		}
		st, err = o.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        n.stream,
			Description: "consumerd WAL channel " + n.channel,
			Subjects:    []string{n.data, n.fence, n.marks + ".*"},
			// Atomic batches (batch.go), where the server has them.
			AllowAtomicPublish: o.atomic,
			Retention:          jetstream.LimitsPolicy,
			Storage:            storage,
			Replicas:           o.cfg.Replicas,
			Duplicates:         o.cfg.DuplicateWindow,
			// Direct gets may be answered by any replica, which can lag the
			// leader: LastID must cover every acknowledged append and a
			// fence read must never miss a newer term, so replicated
			// streams read through the leader.
			AllowDirect: o.cfg.Replicas == 1,
			Metadata:    map[string]string{metaChannel: n.channel},
		})
		if err == nil {
			o.log.Debug("created stream", "stream", n.stream, "channel", n.channel, "replicas", o.cfg.Replicas)
			if o.cfg.Replicas > 1 {
				if err := o.awaitStream(ctx, n); err != nil {
					return nil, err
				}
			}
			return st, nil
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			continue // created concurrently: look it up again
		}
		return nil, fmt.Errorf("jetstream: create stream %s for channel %q on %s: %w", n.stream, n.channel, o.cfg.URL, err)
	}
	return nil, fmt.Errorf("jetstream: stream %s for channel %q on %s: created concurrently but not found", n.stream, n.channel, o.cfg.URL)
}

// lookupStream is one stream look-up, bounded by RequestTimeout: a look-up
// sent to a server that just died is never answered (the chaos harness
// found a publish stuck on one for its whole --timeout).
func (o *opener) lookupStream(ctx context.Context, n names) (_ jetstream.Stream, err error) {
	ctx, end := o.request(ctx)
	defer end(&err)
	return o.js.Stream(ctx, n.stream)
}

func checkSubjects(info *jetstream.StreamInfo, n names) error {
	if info == nil {
		return nil
	}
	have := map[string]bool{}
	for _, s := range info.Config.Subjects {
		have[s] = true
	}
	if !have[n.data] || !have[n.fence] {
		return fmt.Errorf("jetstream: stream %s exists but does not capture subjects %s and %s (has %v): not a consumerd channel stream for %q",
			n.stream, n.data, n.fence, info.Config.Subjects, n.channel)
	}
	return nil
}

// errNoReply is a request that had no reply within RequestTimeout: the
// server is unreachable or lost it. Unlike the caller's own deadline,
// retryable.
var errNoReply = errors.New("no reply within the request timeout")

// request bounds a request by RequestTimeout (or the caller's earlier
// deadline); see requestWithin.
func (o *opener) request(ctx context.Context) (context.Context, func(err *error)) {
	return o.requestWithin(ctx, o.cfg.RequestTimeout)
}

// requestWithin bounds a request by d (or the caller's earlier deadline).
// end releases it; when the request ran out of d (and not of the caller's
// time) it makes *err a retryable errNoReply, which no longer wraps
// context.DeadlineExceeded.
func (o *opener) requestWithin(ctx context.Context, d time.Duration) (context.Context, func(err *error)) {
	c, cancel := context.WithTimeoutCause(ctx, d, errNoReply)
	return c, func(err *error) {
		if *err != nil && errors.Is(*err, context.DeadlineExceeded) && ctx.Err() == nil && errors.Is(context.Cause(c), errNoReply) {
			*err = fmt.Errorf("%w (%s): %v", errNoReply, d, *err)
		}
		cancel()
	}
}

// recheckScanners asks every verifying scanner of the connection to check
// its position (scanner.requestRecheck); it never blocks on a scanner.
func (o *opener) recheckScanners() {
	o.mu.Lock()
	wals := make([]*walImpl, 0, len(o.wals))
	for w := range o.wals {
		wals = append(wals, w)
	}
	o.mu.Unlock()
	for _, w := range wals {
		w.mu.Lock()
		for s := range w.scanners {
			s.requestRecheck()
		}
		w.mu.Unlock()
	}
}

func (o *opener) forget(w *walImpl) {
	o.mu.Lock()
	delete(o.wals, w)
	o.mu.Unlock()
}

// Close closes WALs still open, then the connection.
func (o *opener) Close() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	open := make([]*walImpl, 0, len(o.wals))
	for w := range o.wals {
		open = append(open, w)
	}
	o.mu.Unlock()
	for _, w := range open {
		o.log.Warn("closing WAL left open at opener Close", "channel", w.n.channel)
		w.Close()
	}
	close(o.stopWatch)
	<-o.watchDone
	o.nc.Close()
}

// RemoveChannel deletes the channel's stream (data and fence records).
func (o *opener) RemoveChannel(ctx context.Context, channel string) (err error) {
	n, err := channelNames(o.cfg.Namespace, channel)
	if err != nil {
		return err
	}
	ctx, end := o.request(ctx)
	defer end(&err)
	if err := o.js.DeleteStream(ctx, n.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("jetstream: remove channel %q (stream %s) on %s: %w", channel, n.stream, o.cfg.URL, err)
	}
	return nil
}

// awaitStream waits until a just-created replicated stream answers appends
// sent through this connection: until its leader is elected and its subjects'
// interest has reached this server, a publish gets no responders. It probes
// with an append that cannot be stored (it expects an impossible last
// sequence), so the stream's rejection is the sign it is ready; retried with
// the one retry policy until ctx ends.
func (o *opener) awaitStream(ctx context.Context, n names) error {
	probe := &nats.Msg{Subject: n.data, Header: nats.Header{jetstream.ExpectedLastSeqHeader: []string{"18446744073709551615"}}}
	err := retry.Policy{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}.Do(ctx, retry.Call{}, func() error {
		reply, err := o.nc.RequestMsgWithContext(ctx, probe)
		if err != nil {
			return err
		}
		if _, err := parsePubAck(reply); err != nil && !isWrongLastSeq(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("jetstream: stream %s for channel %q on %s created but not answering: %w", n.stream, n.channel, o.cfg.URL, err)
	}
	return nil
}
