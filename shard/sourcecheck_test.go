package shard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// TestStartSource runs testdata/source_start: where a primary reads a
// source from (startSource), given the offset its state committed, the
// spec's source reset and what the channel holds. One command:
//
//	start [committed=N [inc=I] [term=T]] bounds=F..L@I [reset=A@I/T[/from]]
//
// committed absent: the state holds no offset of the source; bounds are the
// channel's first and last ids and incarnation; reset is the spec's reset:
// read after A in incarnation I, term T. It prints where the source is
// read and what is recorded before, or the FAILED text.
func TestStartSource(t *testing.T) {
	part := topic.Partition{Topic: "words", Index: 0}
	datadriven.RunTest(t, "testdata/source_start", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "start" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var committed recoverylog.SourceOffset
		has := d.HasArg("committed")
		if has {
			var id uint64
			d.ScanArgs(t, "committed", &id)
			committed.ID = message.MessageID(id)
		}
		if d.HasArg("inc") {
			d.ScanArgs(t, "inc", &committed.Incarnation)
		}
		if d.HasArg("term") {
			d.ScanArgs(t, "term", &committed.ResetTerm)
		}
		var bs string
		d.ScanArgs(t, "bounds", &bs)
		var b wal.Bounds
		if _, err := fmt.Sscanf(strings.Replace(bs, "@", " ", 1), "%d..%d %s", &b.First, &b.Last, &b.Incarnation); err != nil {
			d.Fatalf(t, "bounds %q: %v", bs, err)
		}
		var reset *SourceReset
		if d.HasArg("reset") {
			var rs string
			d.ScanArgs(t, "reset", &rs)
			reset = &SourceReset{Topic: part.Topic, Partition: part.Index}
			f := strings.FieldsFunc(rs, func(r rune) bool { return r == '@' || r == '/' })
			if len(f) < 3 {
				d.Fatalf(t, "reset %q: want A@I/T[/from]", rs)
			}
			reset.Incarnation = f[1]
			if _, err := fmt.Sscanf(f[0]+" "+f[2], "%d %d", &reset.After, &reset.Term); err != nil {
				d.Fatalf(t, "reset %q: %v", rs, err)
			}
			if len(f) > 3 {
				reset.From = f[3]
			}
		}
		st, err := startSource("wc-0", part, committed, has, reset, b)
		if err != nil {
			if src, ok := LostSourceIn("restarting in 2s: lifecycle: " + err.Error()); !ok || src != (Source{Topic: "words", Partition: 0}) {
				t.Errorf("LostSourceIn does not find words/0000 in %q: %v %v", err, src, ok)
			}
			return "FAILED: " + strings.ReplaceAll(err.Error(), ". ", ".\n") + "\n"
		}
		out := fmt.Sprintf("read after %d of %s, reset term %d", st.after, st.inc, st.resetTerm)
		if st.applied != nil {
			out += fmt.Sprintf("; applies the reset of term %d", st.applied.Term)
		}
		if st.record {
			out += "; records the offset first"
		}
		return out + "\n"
	})
}
