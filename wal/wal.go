package wal

import (
	"context"
	"errors"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Errors re-exported from walimpls so callers need not import it.
var (
	ErrFenced        = walimpls.ErrFenced
	ErrTruncated     = walimpls.ErrTruncated
	ErrClosed        = walimpls.ErrClosed
	ErrScannerClosed = walimpls.ErrScannerClosed
)

// ErrStaleChain, re-exported: a batch's chain position is stale.
var ErrStaleChain = walimpls.ErrStaleChain

// ErrChannelLost, re-exported: a verifying scanner's channel no longer holds
// its position (ReadOption.Verify); the error is a *LostError.
var ErrChannelLost = walimpls.ErrChannelLost

// LostError, re-exported: what a verifying scanner found.
type LostError = walimpls.LostError

// CheckPosition, re-exported: nil when Bounds hold a reader's position in
// its incarnation, else a *LostError.
var CheckPosition = walimpls.CheckPosition

// Batch, BatchResult and Marker, re-exported from walimpls: atomic, chained
// batches (see WAL.AppendBatch).
type (
	Batch       = walimpls.Batch
	BatchResult = walimpls.BatchResult
	Marker      = walimpls.Marker
	// Bounds is what a channel holds and which life of it this is.
	Bounds = walimpls.Bounds
)

// ErrTransient wraps a scanner's backend failure that is not final (a lost
// connection, an unanswered request, a server restart): a new scanner from
// the position after the last message read goes on where it stopped.
// Scanner.Error wraps the backend's error with it; a shard restarts its
// replica on it instead of failing (shard/transient.go).
var ErrTransient = errors.New("wal: transient backend failure")

// ErrUpstreamClosed is returned by a MessageHandler when the scanner's
// upstream channel was closed while it waited for a message.
var ErrUpstreamClosed = errors.New("wal: upstream closed")

// DeliverPolicy and its constructors, re-exported from walimpls.
type DeliverPolicy = walimpls.DeliverPolicy

var (
	DeliverAll        = walimpls.DeliverAll
	DeliverLatest     = walimpls.DeliverLatest
	DeliverStartFrom  = walimpls.DeliverStartFrom
	DeliverStartAfter = walimpls.DeliverStartAfter
)

// OpenOption says which channel to open and with which fencing term.
type OpenOption = walimpls.OpenOption

// AppendResult is the outcome of a successful append.
type AppendResult struct {
	// MessageID is the id the backend assigned.
	MessageID message.MessageID
}

// MessageFilter keeps a message (true) or drops it (false) before delivery.
type MessageFilter func(msg *message.ImmutableMessage) bool

// ReadOption configures a Scanner.
type ReadOption struct {
	// Name names the scanner in logs and metrics. (Milvus's ReadOption has
	// VChannel here, which selects a virtual channel of a physical one; a
	// consumerd WAL is one channel, so all the field can do is name the
	// reader, and it is called what it is.)
	Name string
	// DeliverPolicy is where the scanner starts.
	DeliverPolicy DeliverPolicy
	// MessageFilter drops messages for which any filter returns false.
	MessageFilter []MessageFilter
	// MesasgeHandler, when set, receives every message instead of Chan
	// (the misspelling is kept from the seed interface). Nil means Chan delivery.
	MesasgeHandler MessageHandler
	// Verify has Read check that the channel still holds the position the
	// scanner starts after, in Incarnation, and the scanner go on checking
	// whenever the backend sees the channel change under it; a loss fails
	// Read, or stops the scanner, with a *LostError (ErrChannelLost):
	// never a silent skip (walimpls.ReadOption.Verify).
	Verify bool
	// Incarnation is the life of the channel the start position belongs to
	// (Bounds.Incarnation; "": the channel's current one).
	Incarnation string
}

// HandleParam is what a scanner passes to MessageHandler.Handle.
//
// The scanner calls Handle in a loop from its one goroutine. Each call
// carries either a message to deliver (Message != nil, Upstream == nil) or,
// when the handler holds nothing, the upstream to take the next message from
// (Message == nil, Upstream != nil). Messages taken from Upstream have not
// been filtered yet: the scanner applies ReadOption.MessageFilter to
// HandleResult.Incoming and passes the kept ones back as Message.
type HandleParam struct {
	// Ctx is cancelled when the scanner stops (Close, the WAL closing, or the
	// ctx given to Read ending). Handle must return promptly once it is done.
	Ctx context.Context
	// Upstream yields the next message from the backend, in id order; it is
	// closed when the backend scanner stops. Nil when Message is set.
	Upstream <-chan message.ImmutableMessage
	// Message is the next message to deliver, already filtered, or nil. It
	// points into the scanner's storage: valid during the call (copy the
	// message to keep it).
	Message *message.ImmutableMessage
}

// HandleResult is what MessageHandler.Handle reports.
//
// Exactly one step per call: either the held Message was consumed
// (MessageHandled), or a message was taken from Upstream (Incoming), or the
// handler stops the scanner (Error). A call with Message set that returns
// neither MessageHandled nor Error is called again with the same Message.
type HandleResult struct {
	// Incoming is the message the handler took from Upstream; the scanner
	// copies it before the next Handle call (so it may point into the
	// handler's own storage), filters it and, if kept, passes it back as
	// HandleParam.Message. Must be nil when HandleParam.Message was set (the
	// scanner then stops with an error).
	Incoming *message.ImmutableMessage
	// MessageHandled says HandleParam.Message was consumed (delivered); the
	// next call gets Upstream.
	MessageHandled bool
	// Error stops the scanner. Return ErrUpstreamClosed when Upstream is
	// closed (the scanner then reports the backend scanner's error, e.g. one
	// wrapping ErrTruncated) and Ctx.Err() when Ctx is done (the scanner then
	// reports why it was stopped). Any other error is reported as is by the
	// scanner's Error.
	Error error
}

// MessageHandler consumes a scanner's messages itself, one Handle call per
// step, instead of the caller reading Scanner.Chan. The scanner calls Handle
// only from its goroutine and calls Close exactly once, after the last
// Handle, when it stops. ChanMessageHandler is the default: it forwards every
// message to a channel.
type MessageHandler interface {
	Handle(param HandleParam) HandleResult
	Close()
}

// WAL is one open channel, as callers see it.
//
// Appends from one goroutine are stored in call order. Append blocks until the
// message is durable or fails; AppendAsync returns at once and calls cb
// exactly once. Transient backend errors are retried with the one retry
// policy (internal/retry; WithRetry); ErrFenced, ErrClosed, ErrTruncated, a
// cancelled or expired context and errors marked walimpls.Permanent are
// never retried. After ErrFenced or Close the WAL is unavailable: Available
// is closed and every later append fails (with ErrFenced, respectively
// ErrClosed).
//
// Async appends: AppendAsync hands the message to the backend on the
// caller's goroutine (appends of one goroutine are stored in call order) and
// returns. It blocks only for backpressure (the async window is full: then
// until it has drained to three quarters) and then at most until ctx ends.
// cb is called exactly once. Outcomes are reported in the order the appends
// were accepted (for one goroutine, its call order), one at a time, never
// concurrently — whatever order the backend reported them in. cb runs on the
// goroutine that completes the append: normally the backend's reply
// goroutine (for JetStream the connection's, shared by every WAL of the
// connection), after a failure a WAL-owned recovery goroutine, or the
// goroutine of an AppendAsync call whose append completed during its
// hand-off. So cb must not block (it would stall replies), must not call
// Close of the same WAL, and must not call AppendAsync/Append of the same WAL
// (that can wait for room only the blocked goroutine frees). An append
// refused at once — the WAL closed, or fenced with nothing earlier still to
// report — has cb run on the caller's goroutine before AppendAsync returns
// (a refusal because of Close may so come before the outcomes of appends
// still in flight). Append is AppendAsync plus waiting, so sync and async
// appends from one goroutine are stored in call order too.
//
// Retries and order: a fenced WAL (term > 0) gives every append a DedupeID
// when the caller did not, so a retried append whose earlier attempt was
// stored is acknowledged, not stored twice; and what it stores stays a
// prefix of what was accepted: once an append fails for good, every later
// append in flight fails too ("not appended because an earlier append
// failed", wrapping that failure). A term-0 WAL (many concurrent writers)
// stores a retried append twice unless msg.DedupeID is set and the backend
// deduplicates; there an append that failed transiently after a later one was
// already stored is reported as failed, not retried, since a retry would
// store it out of order.
type WAL interface {
	// WALName is the backend's name.
	WALName() string
	// Channel is the channel name.
	Channel() string
	// Append stores msg and returns its id.
	Append(ctx context.Context, msg message.MutableMessage) (*AppendResult, error)
	// AppendAsync stores msg in the background and calls cb with the outcome.
	AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error))
	// Read opens a scanner at opts.DeliverPolicy. The scanner runs until
	// its Close, the WAL's Close (Error wraps ErrClosed), ctx ending (Error
	// wraps ctx.Err()), or a backend failure (e.g. wrapping ErrTruncated when
	// the start position was removed; that may also be returned by Read).
	Read(ctx context.Context, opts ReadOption) (Scanner, error)
	// LastID is the id of the last visible message, or 0. It never goes
	// down while the channel exists (walimpls.WALImpls.LastID).
	LastID(ctx context.Context) (message.MessageID, error)
	// Bounds is what the channel holds now and which life of it this is
	// (walimpls.Bounds): a reader checks with it that the position it
	// recorded is still in the channel.
	Bounds(ctx context.Context) (Bounds, error)
	// Truncate removes every message before id.
	Truncate(ctx context.Context, id message.MessageID) error
	// AppendBatch stores b's messages and marker all or nothing, if the
	// chain's last marker on the channel is b.After; otherwise it fails with
	// ErrStaleChain, storing nothing (walimpls.BatchAppender). Transient
	// errors are retried; a retry whose first attempt landed then fails with
	// ErrStaleChain, so after ErrStaleChain read LastMarker to tell "already
	// there" from "another writer moved the chain". Markers take ids but are
	// never delivered to scanners. Batches are not ordered with pipelined
	// appends of the same WAL. Fails with an error wrapping
	// errors.ErrUnsupported on a backend without batches.
	AppendBatch(ctx context.Context, b Batch) (BatchResult, error)
	// LastMarker is the chain's last marker on the channel (id 0: none).
	LastMarker(ctx context.Context, chain string) (Marker, error)
	// BatchLimits is the most messages a batch holds (0: no batches) and
	// whether batches are atomic (false: stored one by one with dedupe ids,
	// so one cut short is completed by its retry only within the backend's
	// duplicate window).
	BatchLimits() (maxMessages int, atomic bool)
	// Available is closed when the WAL becomes unavailable (closed or fenced).
	Available() <-chan struct{}
	// IsAvailable reports whether Available is still open.
	IsAvailable() bool
	// Close refuses new appends, waits for accepted ones (a retry backoff in
	// progress is cut short with ErrClosed), closes scanners (Error wraps
	// ErrClosed), and releases the backend WAL. Safe to call more than once.
	Close()
}

// Scanner delivers a channel's messages in id order, after filters.
type Scanner interface {
	// Channel is the channel name.
	Channel() string
	// Chan delivers messages (nil when a MessageHandler was given).
	Chan() <-chan message.ImmutableMessage
	// Error says why the scanner stopped; valid after Done is closed.
	Error() error
	// Done is closed when the scanner has stopped.
	Done() <-chan struct{}
	// Close stops the scanner promptly and waits for it; Error then is
	// ErrScannerClosed unless it had stopped before. Safe to call more than
	// once; returns nil.
	Close() error
}

// Opener opens WALs on one backend connection.
type Opener interface {
	// Open opens a channel with a term (see OpenOption).
	Open(ctx context.Context, opt *OpenOption) (WAL, error)
	// Close closes WALs still open from this Opener (callers should close
	// them first), then the backend connection. Safe to call more than once.
	Close()
}

// OpenerBuilder builds an Opener for a named backend.
type OpenerBuilder interface {
	Name() string
	Build() (Opener, error)
}

// Counter is implemented by every WAL this package returns: Count is the
// number of messages stored on the channel now (after truncation), for
// operators. It fails with an error wrapping errors.ErrUnsupported when the
// backend does not count (walimpls.Counter).
type Counter interface {
	Count(ctx context.Context) (uint64, error)
}

// ServerInfoReporter is implemented by every Opener this package returns:
// ServerInfo is the backend server's version and whether it stores a batch
// atomically (walimpls.ServerInfo); ok is false when the backend does not
// say. A member warns at start when batches are not atomic (outputs are then
// exactly once only within the duplicate window).
type ServerInfoReporter interface {
	ServerInfo() (version string, atomicBatches, ok bool)
}

// ConnectionReporter is implemented by every Opener this package returns:
// Connection is the server URL the backend's connection is on (password
// redacted, "" while disconnected) and whether it is up now
// (walimpls.ConnectionInfo); ok is false when the backend does not say.
// /v1/status reports it.
type ConnectionReporter interface {
	Connection() (url string, connected, ok bool)
}

// ChannelRemover is implemented by every Opener this package returns:
// RemoveChannel deletes a channel and everything on it (walimpls.ChannelRemover;
// errors.ErrUnsupported when the backend cannot). Removing a channel that does
// not exist is not an error.
type ChannelRemover interface {
	RemoveChannel(ctx context.Context, channel string) error
}
