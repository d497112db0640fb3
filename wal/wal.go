package wal

import (
	"context"
	"errors"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// Errors re-exported from walimpls so callers need not import it.
var (
	ErrFenced    = walimpls.ErrFenced
	ErrTruncated = walimpls.ErrTruncated
	ErrClosed    = walimpls.ErrClosed
)

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
	// VChannel names the reader (kept from Milvus, where it selects a virtual
	// channel); here it names the scanner in logs and metrics.
	VChannel string
	// DeliverPolicy is where the scanner starts.
	DeliverPolicy DeliverPolicy
	// MessageFilter drops messages for which any filter returns false.
	MessageFilter []MessageFilter
	// MesasgeHandler, when set, receives every message instead of Chan
	// (the misspelling is kept from the seed interface). Nil means Chan delivery.
	MesasgeHandler MessageHandler
}

// HandleParam is what a scanner passes to MessageHandler.Handle.
type HandleParam struct {
	// Ctx is cancelled when the scanner closes.
	Ctx context.Context
	// Upstream yields the next message from the backend; nil when the handler
	// still holds Message and must consume it before taking another.
	Upstream <-chan message.ImmutableMessage
	// Message is a message not yet consumed by the handler, or nil.
	Message *message.ImmutableMessage
}

// HandleResult is what MessageHandler.Handle reports.
type HandleResult struct {
	// Incoming is a message the handler took from Upstream but has not
	// handled yet; it is passed back as HandleParam.Message next time.
	Incoming *message.ImmutableMessage
	// MessageHandled says HandleParam.Message was consumed.
	MessageHandled bool
	// Error stops the scanner; its Error then reports it. ErrUpstreamClosed
	// and context errors mean the scanner is ending.
	Error error
}

// MessageHandler consumes a scanner's messages itself, one Handle call per
// step, instead of the caller reading Scanner.Chan.
type MessageHandler interface {
	Handle(param HandleParam) HandleResult
	Close()
}

// WAL is one open channel, as callers see it.
//
// Appends from one goroutine are stored in call order. Append blocks until the
// message is durable or fails; AppendAsync returns at once and calls cb
// exactly once, from another goroutine. Transient backend errors are retried
// with backoff; ErrFenced and a cancelled or expired context are never retried.
// After ErrFenced or Close the WAL is unavailable: Available is closed and
// every later append fails.
type WAL interface {
	// WALName is the backend's name.
	WALName() string
	// Channel is the channel name.
	Channel() string
	// Append stores msg and returns its id.
	Append(ctx context.Context, msg message.MutableMessage) (*AppendResult, error)
	// AppendAsync stores msg in the background and calls cb with the outcome.
	AppendAsync(ctx context.Context, msg message.MutableMessage, cb func(*AppendResult, error))
	// Read opens a scanner.
	Read(ctx context.Context, opts ReadOption) (Scanner, error)
	// LastID is the id of the last visible message, or 0.
	LastID(ctx context.Context) (message.MessageID, error)
	// Truncate removes every message before id.
	Truncate(ctx context.Context, id message.MessageID) error
	// Available is closed when the WAL becomes unavailable (closed or fenced).
	Available() <-chan struct{}
	// IsAvailable reports whether Available is still open.
	IsAvailable() bool
	// Close waits for in-flight async appends, closes scanners, and releases the WAL.
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
	// Close stops the scanner and waits for it.
	Close() error
}

// Opener opens WALs on one backend connection.
type Opener interface {
	// Open opens a channel with a term (see OpenOption).
	Open(ctx context.Context, opt *OpenOption) (WAL, error)
	// Close closes the backend connection. Open WALs must be closed first.
	Close()
}

// OpenerBuilder builds an Opener for a named backend.
type OpenerBuilder interface {
	Name() string
	Build() (Opener, error)
}
