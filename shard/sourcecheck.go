package shard

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// A primary reads each source after the offset committed with the state,
// and only while the source's channel still holds that offset in the life
// of the channel it was read in (wal.Bounds.Holds): a channel that was
// removed and created again, went backwards or lost messages the shard had
// not read stops the shard (FAILED, ErrSourceLost) until an operator
// decides, never a silent skip. The decision at takeover is startSource,
// pure; while the primary runs, its verifying scanners check (wal.ReadOption
// .Verify) and a loss they find ends the primary the same way.

// ErrSourceLost is wrapped by the error of a shard stopped because a source
// lost messages it had not read; FAILED texts carry its words, so `shards
// accept-source --lost-source` finds such shards.
var ErrSourceLost = errors.New("a source lost messages the shard has not read")

// sourceStart is where a primary reads a source from.
type sourceStart struct {
	after     message.MessageID // read the messages after this id
	inc       string            // in this life of the channel (what commits record)
	resetTerm uint64            // the source reset applied so far (what commits record)
	// record: commit the offset before reading, so the state holds what
	// was decided here (a reset applied, an incarnation first recorded).
	record bool
	// applied is the spec's reset this start applies (nil: none).
	applied *SourceReset
}

// startSource decides where shard shardID's primary reads a source from: committed is
// the offset the state holds (has: one is held), reset the spec's reset of
// the source (nil: none), b what the channel holds now.
//
//   - A reset newer than the state's (Term above committed.ResetTerm) for
//     the channel's current incarnation applies: read after reset.After,
//     recording the reset with the offset before reading.
//   - No offset held (the shard never read the source): read what the
//     channel holds, from its first message.
//   - Else read after the committed offset if the channel still holds it
//     (an offset of the first format, with no incarnation, is checked on
//     ids alone and recorded with the incarnation before reading).
//
// A position the channel does not hold is a *sourceLostError.
func startSource(shardID string, part topic.Partition, committed recoverylog.SourceOffset, has bool, reset *SourceReset, b wal.Bounds) (sourceStart, error) {
	ch := topic.ChannelName(part.Topic, part.Index)
	if reset != nil && uint64(reset.Term) > committed.ResetTerm && reset.Incarnation == b.Incarnation {
		if err := wal.CheckPosition(ch, message.MessageID(reset.After), reset.Incarnation, b); err != nil {
			return sourceStart{}, &sourceLostError{shard: shardID, part: part, committed: committed, lost: err.(*wal.LostError), reset: reset, resetLost: true}
		}
		return sourceStart{after: message.MessageID(reset.After), inc: b.Incarnation, resetTerm: uint64(reset.Term), record: true, applied: reset}, nil
	}
	if !has {
		return sourceStart{after: max(b.First, 1) - 1, inc: b.Incarnation, resetTerm: committed.ResetTerm}, nil
	}
	if err := wal.CheckPosition(ch, committed.ID, committed.Incarnation, b); err != nil {
		return sourceStart{}, &sourceLostError{shard: shardID, part: part, committed: committed, lost: err.(*wal.LostError), reset: reset}
	}
	return sourceStart{after: committed.ID, inc: b.Incarnation, resetTerm: committed.ResetTerm, record: committed.Incarnation == ""}, nil
}

// sourceLostError is a source that lost messages the shard had not read:
// what the state committed, what the channel holds, and the operator's
// choices. It wraps ErrSourceLost and the *wal.LostError (so
// wal.ErrChannelLost): not transient, the replica fails.
type sourceLostError struct {
	shard     string
	part      topic.Partition
	committed recoverylog.SourceOffset // what the shard's state holds
	lost      *wal.LostError           // the position read, and the channel now
	reset     *SourceReset             // the spec's reset of the source, if any
	resetLost bool                     // the channel lost the reset's position
}

func (e *sourceLostError) Unwrap() []error { return []error{ErrSourceLost, e.lost} }

func (e *sourceLostError) Error() string {
	read := ""
	if e.lost.After != e.committed.ID {
		read = fmt.Sprintf(" and read up to id %d", e.lost.After)
	}
	resetNote := ""
	if r := e.reset; e.resetLost {
		read = ""
		resetNote = fmt.Sprintf(" The spec's source reset (term %d, from %s) reads after id %d, which the channel no longer holds.", r.Term, r.From, r.After)
	} else if r != nil && r.Incarnation != e.lost.Now.Incarnation {
		resetNote = fmt.Sprintf(" The spec's source reset (term %d) is for incarnation %s, not the channel's now.", r.Term, r.Incarnation)
	} else if r != nil && uint64(r.Term) <= e.committed.ResetTerm {
		resetNote = fmt.Sprintf(" The spec's source reset (term %d) was applied before this loss.", r.Term)
	}
	inc := "in incarnation " + e.committed.Incarnation
	if e.committed.Incarnation == "" {
		inc = "(its incarnation not recorded)"
	}
	shard, src := e.shard, fmt.Sprintf("--topic %s --partition %d", e.part.Topic, e.part.Index)
	return fmt.Sprintf(lostSourceHead+": %s. The shard committed offset %d %s%s; "+
		"the channel holds %s.%s The shard stops here rather than skip messages or take others for ones it consumed: "+
		"restore the stream's data and run 'consumerd shards unassign --failed --shard %s', or accept the loss with "+
		"'consumerd shards accept-source --shard %s %s --from start --yes' (read what the channel holds now, from its first message) "+
		"or '--from end' (only what comes after its last message now)",
		e.lost.Channel, e.part.Topic, e.part.Index, e.lost.Reason(), e.committed.ID, inc, read,
		e.lost.Range(), resetNote, shard, shard, src)
}

// asSourceLost turns a source scanner's stop on a lost channel into the
// shard's error, naming what the primary committed (committed) and the
// incarnation it records (inc); other errors are returned as they are.
func asSourceLost(shard string, src *source, committed message.MessageID, err error) error {
	var lost *wal.LostError
	if !errors.As(err, &lost) {
		return err
	}
	return &sourceLostError{shard: shard, part: src.part, lost: lost,
		committed: recoverylog.SourceOffset{ID: committed, Incarnation: src.inc, ResetTerm: src.resetTerm}}
}

// lostSourceHead starts the text of a sourceLostError: LostSourceIn reads it.
var lostSourceHead = "source %s (topic %s, partition %d): " + ErrSourceLost.Error()

// lostSourceRE matches lostSourceHead in a FAILED text.
var lostSourceRE = regexp.MustCompile(`source \S+ \(topic (\S+), partition (\d+)\): ` + regexp.QuoteMeta(ErrSourceLost.Error()))

// LostSourceIn reads, from a FAILED replica's error text, the source that
// lost messages the shard had not read (ok false: the text says no such
// thing). `shards accept-source` uses it to find what to accept.
func LostSourceIn(errText string) (Source, bool) {
	m := lostSourceRE.FindStringSubmatch(errText)
	if m == nil {
		return Source{}, false
	}
	p, err := strconv.Atoi(m[2])
	if err != nil {
		return Source{}, false
	}
	return Source{Topic: m[1], Partition: p}, true
}
