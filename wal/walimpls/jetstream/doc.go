// Package jetstream is the NATS JetStream WAL backend: it implements the
// walimpls contract, with the optional AsyncAppender, BatchAppender,
// Counter, ChannelRemover and ServerInfo, on
// github.com/nats-io/nats.go/jetstream. The daemon connects it to the
// embedded nats-server (internal/embednats) by default, or to a NATS cluster
// with streams replicated R=3 in production.
//
// # Layout
//
// Each channel is one stream, "<namespace>_<token>", where token is the
// channel name escaped by EscapeChannel (reversible, so distinct channels never
// share a stream). The stream captures three kinds of subjects:
//
//	<namespace>.<token>.data          the channel's messages
//	<namespace>.<token>.fence         fence records (payload and Consumerd-Term header: the term)
//	<namespace>.<token>.mark.<chain>  batch markers of a chain (batch.go; a stream made
//	                                  before batches gains the subject on first use)
//
// The namespace (Config.Namespace) keeps clusters on one NATS apart: the
// daemon derives it from the cluster's etcd prefix with NamespaceOf ("/alpha"
// gives "alpha"; the default "/consumerd" gives "consumerd", the names
// consumerd used before namespaces), or takes --wal.namespace. It is
// [A-Za-z0-9-]+ (ValidNamespace), so the first '_' of a stream name ends it,
// and not OBJ or KV, whose streams are JetStream's own. External tools find a
// cluster's data by name; for namespace NS:
//
//	topic T, partition P     stream NS_<EscapeChannel("T/PPPP")>, subject NS.<token>.data
//	                         e.g. consumerd_words_s0003, consumerd.words_s0003.data
//	recovery log of shard S  stream NS_<EscapeChannel("recovery/S")>, e.g. consumerd_recovery_swordcount-0003
//	snapshots                object store bucket NS-snapshots (stream OBJ_NS-snapshots)
//
// Every stream also records its channel name in its metadata
// ("consumerd.channel") and description.
//
// A MessageID is the JetStream stream sequence of the message. Sequences are
// shared with fence records, so ids are strictly increasing but not
// contiguous; they never go backwards across reconnects or server restarts
// (the file store keeps them). Scanners are ordered consumers filtered on the
// data subject, so they never see fence records or markers; nats.go hands
// them each message through Consume's callback (scanner.go says why not
// Messages). A message's
// payload is the NATS payload unchanged (a key too large for a header
// travels before it, see codec.go); its key and properties travel
// URL-encoded in one Consumerd-Meta header; MutableMessage.DedupeID becomes Nats-Msg-Id, so
// JetStream drops a repeat within Config.DuplicateWindow and acknowledges it
// with the original id.
//
// # Fencing
//
// Open with a term T > 0 reads the latest fence record (term F). If T > F it
// appends a fence record carrying T, conditional on the fence subject's last
// sequence (Nats-Expected-Last-Subject-Sequence), so racing fences are
// totally ordered; if T < F the open succeeds but every append fails with
// ErrFenced; if T == F the writer continues the channel (a reopen).
//
// Appends of a term > 0 are conditional and form a chain: each carries a
// Nats-Msg-Id (the caller's DedupeID — the wal adaptor gives every fenced
// append one — or a generated id) and is conditional on nothing else having
// been stored since its predecessor. On servers with atomic batches (2.12+)
// every link is conditional on the stream's last sequence
// (Nats-Expected-Last-Sequence), the writer predicting one sequence per
// link; a fence there is an atomic batch of the fence record and
// fencePadding copies, more sequences than the writer ever has appends
// without an outcome (maxFencedInFlight), so no link of a superseded writer
// can match a sequence a fence shifted (fenced.go proves it); older fence
// records are purged after each fence. On older servers a link after the
// first is conditional on its predecessor being the last message stored
// (Nats-Expected-Last-Msg-Id) — which nats-server 2.14+ checks on a
// replicated stream only when applying, where a mismatch stops the stream
// taking writes, hence sequences where the server allows padded fences. The
// first append after Open or a resync is conditional on the stream's last
// sequence (the fence's, or the last read). The writer keeps the chain
// itself, so appends pipeline without waiting for each other (the server
// checks them in order; on replicated streams too, before proposing). Any
// record stored by someone else — a newer term's fence, another writer's
// append — breaks the chain, and then every append sent after it is
// rejected as well. So what a fenced writer stores is always a prefix of
// its calls — with one exception on sequence chains: a term-0 append (or a
// batch) on a fenced channel shifts the stream by an unpadded amount, so a
// link sent after the one it displaced can be stored; only the fenced
// writer may append to a fenced channel.
//
// The backend does not retry (fenced.go). Any failure breaks the chain; a
// rejection because the stream moved fails with a retryable error
// (errConflict), and appends handed in while outcomes of earlier ones are
// still on their way fail at once, unsent, also retryably. Once every
// outcome is in, the next append resynchronises — reads the stream's last
// sequence and then the fence term — and fails with ErrFenced if a higher
// term exists, or starts a new chain there. The wal adaptor re-sends the
// failed appends in call order with its one retry policy; a re-send keeps
// its Nats-Msg-Id, so one that was stored although its reply was lost is
// acknowledged as a duplicate with its original sequence (the server checks
// duplicates before the expected last message id).
//
// Term-0 appends (topic publishers) are unconditional: any number of
// concurrent term-0 appenders may share a channel, and fencing applies only to
// writers with a term > 0. A term-0 append on a fenced channel is stored and
// breaks the fenced writer's chain, which then re-sends — but see the
// exception above (consumerd never does this: topic partitions are written
// with term 0, recovery logs only by their fenced primary).
//
// Cost: every fenced append carries the chain headers and a Nats-Msg-Id,
// which the server remembers for Config.DuplicateWindow (about 100 bytes
// each); the chained protocol runs below the rate of unconditional appends,
// in raw nats.go and through this backend alike (BenchmarkAppendFenced
// compares the two in one run). Lower the window for very high fenced append
// rates.
//
// # Acknowledgements
//
// The backend reports each append's outcome as it arrives, on the goroutine
// that learns it, and keeps no queue to order them: the wal adaptor does.
//
// Appends bypass nats.go's async publisher (publish.go): the opener
// publishes them on core NATS with a reply subject of its own,
// "<inbox>.<token>" (one inbox per connection, subscribed once with a
// wildcard; the token counts appends), keeps them in its own table keyed by
// token, and decodes each PubAck with a small hand-written parser of the
// common forms ({"stream":..,"seq":..} with or without "duplicate":true;
// encoding/json for anything else, such as an error reply). Callbacks run on
// that subscription's goroutine (so they must not block). At most
// Config.MaxPending appends are in flight per connection; further ones block
// until a slot frees (or their context ends, or Close gives up on the WAL).
// A no-responders reply (no stream captures the subject yet, e.g. a
// replicated stream just created) fails the append retryably with
// jetstream.ErrNoStreamResponse. A disconnect fails every append in flight
// with nats.ErrDisconnected (retryable; their replies are lost).
//
// The wait for a reply is bounded by one watchdog goroutine per connection
// (watchdog.go; owned by the opener, stopped by Close) rather than a timer
// per append: appends record the watchdog's tick count (AckTimeout/4 per
// tick), and every append that has waited longer than AckTimeout (it fails
// between 1 and about 1.25 AckTimeout after it was sent) fails with a
// retryable error wrapping ErrJetStreamPublisherClosed (the wal adaptor
// retries it; like any append whose outcome is unknown, one that was stored
// may be stored again unless it carries a DedupeID). So a lost reply — a
// cluster leader change without a reconnect — never stalls the connection.
// Replies to appends already failed are ignored.
//
// # Truncation
//
// Truncate(id) records id in the stream metadata ("consumerd.truncated") and
// then purges the data subject below id (fence records stay). Reads starting
// below the recorded point fail with ErrTruncated, and a scanner that was
// behind when a truncation removed positions it had not read yet stops with
// ErrTruncated — never a silent skip.
//
// # Limits
//
// A message larger than the server's max_payload (1 MiB by default) fails
// with a permanent error naming both sizes. Durability of an acknowledged
// append is the server's setting: see embednats.Config.SyncAlways (fsync each
// write) versus the default periodic fsync, and Config.Replicas.
//
// Essential types: Config, Builder (Name "jetstream", Build connects and
// names the URL on failure).
//
// # Why one package
//
// At about 2,700 lines it is above the tree's 2,500-line guideline, on
// purpose: it is one backend behind the walimpls contract, and its parts
// share state the contract deliberately hides. The opener's connection
// (builder.go) owns the reply inbox, the in-flight table publish.go fills
// and the watchdog (watchdog.go) expires; a fenced writer's chain
// (fenced.go) is advanced by appends (append.go) and batches (batch.go) and
// resynchronised from the stream the scanner (scanner.go) reads; the
// stream layout (names.go, codec.go) is what all of them encode. Splitting
// any of these out would export that state to a sibling package for no
// boundary a caller sees; callers see walimpls.
package jetstream
