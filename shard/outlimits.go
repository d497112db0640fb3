package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// Output channels belong to topic records in etcd. A primary opens them
// (to stage-check and to publish) only as they exist: a channel whose
// stream is missing is created only while etcd has the topic's record (the
// first output ever to a topic created with `topics create`), never behind
// a deleted record — a shard publishing to a deleted topic fails, naming
// it, and no orphan stream with no record is left for a re-created topic
// to find. One rule, outputOpener, for the drainer and the stage check.

// ErrOutputTopicGone is wrapped by the error of a primary whose output
// topic was deleted (its etcd record and its stream are gone).
var ErrOutputTopicGone = errors.New("an output topic of the shard was deleted")

// outputOpener opens a primary's output channels (see above).
type outputOpener struct {
	wal.Opener
	shard  string
	lookup func(ctx context.Context, name string) (topic.Description, error)
}

// Open opens an existing output channel, or creates it while its topic's
// record exists.
func (o *outputOpener) Open(ctx context.Context, opt *wal.OpenOption) (wal.WAL, error) {
	no := *opt
	no.NoCreate = true
	w, err := o.Opener.Open(ctx, &no)
	if err == nil || !errors.Is(err, wal.ErrNoChannel) {
		return w, err
	}
	name, part, perr := topic.ParseChannelName(opt.Channel)
	if perr != nil {
		return nil, fmt.Errorf("output %s: %w", opt.Channel, perr)
	}
	if o.lookup == nil {
		return nil, fmt.Errorf("output %s: no topic lookup configured (shard.Config.Topics): %w", opt.Channel, err)
	}
	d, lerr := o.lookup(ctx, name)
	switch {
	case errors.Is(lerr, topic.ErrUnknownTopic):
		return nil, &outputGoneError{shard: o.shard, topic: name, partition: part, err: err}
	case lerr != nil:
		return nil, fmt.Errorf("output %s: %w", opt.Channel, lerr)
	case part >= d.Partitions:
		return nil, &outputGoneError{shard: o.shard, topic: name, partition: part,
			err: fmt.Errorf("topic %s has partitions 0..%d now: %w", name, d.Partitions-1, err)}
	}
	return o.Opener.Open(ctx, opt)
}

// outputGoneError is an output channel with neither stream nor topic record.
type outputGoneError struct {
	shard     string
	topic     string
	partition int
	err       error
}

func (e *outputGoneError) Unwrap() []error { return []error{ErrOutputTopicGone, e.err} }

func (e *outputGoneError) Error() string {
	return fmt.Sprintf("output topic %s (partition %d) of shard %s: %v: etcd has no record of the topic and its stream does not exist (deleted with 'consumerd topics delete'?); "+
		"the shard's committed outputs to it are not published and its stream is not created again. "+
		"Create the topic again ('consumerd topics create --name %s --partitions N') and run 'consumerd shards unassign --failed --shard %s', "+
		"or list the pending outputs with 'consumerd shards outputs --shard %s' and drop them with --drop TXN --yes (%v)",
		e.topic, e.partition, e.shard, ErrOutputTopicGone, e.topic, e.shard, e.shard, e.err)
}

// outputLimits checks a staged message against its output channel's limits
// (wal.MessageChecker): the WAL is asked once per partition per primary,
// each message is then checked locally. A message the channel can never
// take is refused to the app at stage time, naming the limit, instead of
// being committed and failing the shard when published.
type outputLimits struct {
	opener wal.Opener // an outputOpener
	wals   map[string]wal.WAL
}

// check opens ch once (then keeps it) and checks msg against its limits.
func (l *outputLimits) check(ctx context.Context, ch string, msg *message.MutableMessage) error {
	w, ok := l.wals[ch]
	if !ok {
		var err error
		if w, err = l.opener.Open(ctx, &wal.OpenOption{Channel: ch}); err != nil {
			return fmt.Errorf("open output %s to check its limits: %w", ch, err)
		}
		if l.wals == nil {
			l.wals = map[string]wal.WAL{}
		}
		l.wals[ch] = w
	}
	mc, ok := w.(wal.MessageChecker)
	if !ok {
		return nil
	}
	if err := mc.CheckMessage(msg); err != nil {
		return fmt.Errorf("output %s can never take this message, so it is not staged: %w", ch, err)
	}
	return nil
}

// checkLimits refuses msg, unstaged, when part's channel can never take it.
func (p *txnPublisher) checkLimits(part topic.Partition, msg *message.MutableMessage) error {
	if p.limits == nil {
		return nil
	}
	if err := p.limits.check(p.sh.ctx, p.part(part).channel, msg); err != nil {
		return fmt.Errorf("publish to %s: %w", part, err)
	}
	return nil
}

// close closes the WALs opened for checks.
func (l *outputLimits) close() {
	for _, w := range l.wals {
		w.Close()
	}
	l.wals = nil
}

// publishError is a drainer's failure to publish a transaction's outputs to
// a partition. Its text names the shard, the output, the transactions and
// the backend's error and, when retrying cannot help, the operator's ways
// out.
type publishError struct {
	shard    string
	channel  string
	from, to uint64 // the transactions of the batch
	err      error
}

func (e *publishError) Unwrap() error { return e.err }

func (e *publishError) Error() string {
	txns := fmt.Sprintf("txn %d", e.from)
	if e.to != e.from {
		txns = fmt.Sprintf("txns %d..%d", e.from, e.to)
	}
	what := e.channel
	if name, part, err := topic.ParseChannelName(e.channel); err == nil {
		what = fmt.Sprintf("topic %s partition %d", name, part)
	}
	head := fmt.Sprintf("shard %s: publishing %s's outputs to %s: %v", e.shard, txns, what, e.err)
	if isTransient(e.err) || errors.Is(e.err, wal.ErrFenced) || errors.Is(e.err, context.Canceled) {
		return head
	}
	return head + fmt.Sprintf(". The outputs are committed and stay pending: every primary meets the same refusal. "+
		"Remove the cause (e.g. raise the stream's limit) and run 'consumerd shards unassign --failed --shard %s', "+
		"or list the pending outputs with 'consumerd shards outputs --shard %s' and drop the refused one with --drop TXN:INDEX --yes",
		e.shard, e.shard)
}
