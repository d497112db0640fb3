package walimpls

import (
	"context"
	"errors"

	"github.com/consumerd/consumerd/wal/message"
)

// ErrFenced is returned by Append on a WAL whose term has been superseded: a
// writer opened the same channel with a higher term. Once an Append of a WAL
// has returned ErrFenced, every later Append of that WAL returns it too.
// Callers must never retry it. A backend may fail the first appends after
// the fence with a retryable error instead (it learns of the fence only when
// it re-reads the channel); a re-send then returns ErrFenced. Either way no
// append of a superseded writer is stored.
var ErrFenced = errors.New("wal: writer fenced by a higher term")

// ErrTruncated is returned (wrapped) by Read, or reported by a scanner's
// Error, when the requested start position was already removed by retention
// or Truncate. It is never a silent skip to the first retained message.
var ErrTruncated = errors.New("wal: start position truncated")

// ErrClosed is returned (wrapped) by operations on a closed WAL or opener.
var ErrClosed = errors.New("wal: closed")

// ErrScannerClosed is what a scanner's Error reports after Close was called on it.
var ErrScannerClosed = errors.New("wal: scanner closed")

// DeliverKind says where a scanner starts.
type DeliverKind int

const (
	// DeliverKindAll starts at the oldest retained message.
	DeliverKindAll DeliverKind = iota
	// DeliverKindLatest delivers only messages appended after the scanner opened.
	DeliverKindLatest
	// DeliverKindStartFrom starts at ID, inclusive.
	DeliverKindStartFrom
	// DeliverKindStartAfter starts after ID, exclusive.
	DeliverKindStartAfter
)

// DeliverPolicy is a scanner's start position. Build one with DeliverAll,
// DeliverLatest, DeliverStartFrom or DeliverStartAfter.
type DeliverPolicy struct {
	Kind DeliverKind
	ID   message.MessageID
}

// DeliverAll starts at the oldest retained message.
func DeliverAll() DeliverPolicy { return DeliverPolicy{Kind: DeliverKindAll} }

// DeliverLatest delivers only messages appended after the scanner opened.
func DeliverLatest() DeliverPolicy { return DeliverPolicy{Kind: DeliverKindLatest} }

// DeliverStartFrom starts at id, inclusive.
func DeliverStartFrom(id message.MessageID) DeliverPolicy {
	return DeliverPolicy{Kind: DeliverKindStartFrom, ID: id}
}

// DeliverStartAfter starts after id, exclusive. DeliverStartAfter(0) (like
// DeliverStartFrom(0)) starts at id 1: the same as DeliverAll on a channel
// never truncated, but on a truncated channel it fails with ErrTruncated
// (the caller asked for messages that are gone), where DeliverAll starts at
// the first retained message.
func DeliverStartAfter(id message.MessageID) DeliverPolicy {
	return DeliverPolicy{Kind: DeliverKindStartAfter, ID: id}
}

// OpenOption says which channel to open and with which term.
type OpenOption struct {
	// Channel is the channel name, e.g. "words/0003" or "recovery/shard-1".
	// Backends map it to a legal name of their own; distinct channel names
	// must map to distinct backend names.
	Channel string
	// Term fences writers. Zero opens an unfenced WAL (readers, topic
	// publishers). A non-zero term higher than any seen on the channel fences
	// every WAL opened with a lower term: from the moment Open returns, none
	// of their appends is stored and they fail with ErrFenced (see ErrFenced
	// for a first retryable failure). Opening with a term lower than the
	// channel's current term succeeds, but its appends fail the same way.
	Term uint64
	// NoCreate opens the channel only if it exists: a missing channel fails
	// Open with an error wrapping ErrNoChannel instead of being created. A
	// writer whose channels belong to a record kept elsewhere (a shard's
	// output topics, recorded in etcd) opens with it, so a channel removed
	// with its record is never created again behind the record's back.
	NoCreate bool
}

// OpenerBuilderImpls builds openers of one backend. It is registered by name.
type OpenerBuilderImpls interface {
	// Name is the backend's registry name, e.g. "jetstream" or "memory".
	Name() string
	// Build creates an opener (a connection to the backend).
	Build() (OpenerImpls, error)
}

// OpenerImpls opens channels of one backend connection.
type OpenerImpls interface {
	// Open opens (creating if needed) the channel named in opt. It is safe to
	// call concurrently and for many channels.
	Open(ctx context.Context, opt *OpenOption) (WALImpls, error)
	// Close releases the connection. WALs opened from it must be closed first.
	Close()
}

// WALImpls is one open channel of a backend.
type WALImpls interface {
	// WALName is the backend's name.
	WALName() string
	// Channel is the channel name this WAL was opened on.
	Channel() string
	// Append stores msg and returns its id once durable (per the backend's
	// durability setting). Safe to call concurrently: every acknowledged
	// append is read back exactly once, in id order. Returns ErrFenced when
	// the WAL's term was superseded; ctx errors when ctx ends first (the
	// message may or may not have been stored).
	Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error)
	// Read opens a scanner at opt.DeliverPolicy. A start position removed by
	// Truncate or retention fails with an error wrapping ErrTruncated, either
	// from Read or from the scanner's Error.
	Read(ctx context.Context, opt ReadOption) (ScannerImpls, error)
	// LastID is the id of the last message appended and visible to scanners,
	// or 0 if none. Used to tell when a reader has caught up and to compute lag.
	// It never goes down while the channel exists (after a Truncate that
	// removed every message it is the last id removed), so a reader whose
	// position is above LastID knows the channel lost messages.
	LastID(ctx context.Context) (message.MessageID, error)
	// Bounds is what the channel holds now and which life of it this is: a
	// reader checks with it that a position it recorded is still in the
	// channel (Bounds.Holds).
	Bounds(ctx context.Context) (Bounds, error)
	// Truncate removes every message with an id below id. Reads from a removed
	// position then fail with ErrTruncated; DeliverAll starts at id (or the
	// first message after it).
	Truncate(ctx context.Context, id message.MessageID) error
	// Close releases the WAL. Appends after Close fail with an error wrapping
	// ErrClosed. Scanners opened from it are closed.
	Close()
}

// Bounds is what a channel holds now, and which life of it this is.
type Bounds struct {
	// Incarnation names this life of the channel: a channel removed and
	// created again (a stream deleted and re-created, a topic re-created)
	// has another, so a position recorded in one life is never taken for a
	// position in another. It is stable across reopens, restarts and
	// failovers of the backend. "" when the backend cannot tell lives apart.
	Incarnation string
	// First is the id a read of every retained message starts at: the id of
	// the oldest message held, or Last+1 when none is held. Every id below
	// it was removed. A backend whose channels hold records that are not
	// messages (JetStream's fences and markers) may give the id of the
	// oldest record: ids a reader skips are not removed messages.
	First message.MessageID
	// Last is LastID: the id of the last message appended (0: none).
	Last message.MessageID
}

// Holds reports whether a reader that consumed up to id (0: nothing) in
// incarnation inc ("": not recorded) can go on after it without missing a
// message or reading one twice: the channel is the same life (or either
// incarnation is unknown), it did not lose messages at or before id (id <=
// Last), and none after id was removed unread (id+1 >= First). Removals the
// channel's owner made on purpose (Truncate, below a snapshot) are the
// caller's to allow.
func (b Bounds) Holds(id message.MessageID, inc string) bool {
	return (inc == "" || b.Incarnation == "" || inc == b.Incarnation) && id <= b.Last && id+1 >= b.First
}

// ReadOption configures a backend scanner.
type ReadOption struct {
	// Name names the scanner in logs and metrics.
	Name string
	// DeliverPolicy is where the scanner starts.
	DeliverPolicy DeliverPolicy
	// ReadAheadBufferSize bounds the messages buffered ahead of the reader; 0
	// lets the backend choose.
	ReadAheadBufferSize int
	// Verify has the scanner check, whenever the channel may have changed
	// under it, that the channel still holds its position (the id it last
	// delivered, or the one it starts after) in Incarnation
	// (CheckPosition), and stop with a *LostError (ErrChannelLost) instead
	// of delivering past a loss. The wal adaptor checks at the start; a
	// backend checks what it can see while it runs (JetStream: on every
	// gap in the sequences, after its consumer was re-created, after a
	// reconnect). A verifying DeliverAll starts at the first message held.
	Verify bool
	// Incarnation is the life of the channel the position belongs to
	// (Bounds.Incarnation), for Verify. The adaptor fills it in with the
	// channel's current one when the caller leaves it empty.
	Incarnation string
}

// ScannerImpls delivers a channel's messages in id order.
type ScannerImpls interface {
	// Name is the scanner's name from its ReadOption.
	Name() string
	// Chan delivers messages in strictly increasing id order. It is closed
	// when the scanner stops (Close, an error, or the WAL closing).
	Chan() <-chan message.ImmutableMessage
	// Error says why the scanner stopped: ErrScannerClosed after Close, an
	// error wrapping ErrTruncated, ErrClosed, or a backend error. Valid after
	// Done is closed; nil before.
	Error() error
	// Done is closed when the scanner has stopped and Chan is closed.
	Done() <-chan struct{}
	// Close stops the scanner promptly and waits for it to stop. Safe to call
	// more than once. Returns nil.
	Close() error
}
