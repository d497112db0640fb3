package windows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/shard"
)

// TestTracker runs testdata/tracker against a real RocksDB:
//
//	new sources=(T/P,...) [delay=N] [marked=(T,...)]
//	        a tracker (prefix "w/") over a fresh database, loaded
//	apply   input lines, each applied in turn and followed by Current:
//	          data T/P TS      Observe
//	          mark T/P S/N/T   ObserveMark (T may be min or max)
//	          late T/P TS      Late
//	flush   Flush into a batch: its writes; then the batch is written to
//	        the database, as a commit would
//	reload  a new tracker loaded from the database (a new primary): its
//	        state, which must equal the state as of the last flush
//	put key=K value=V    a raw write under the prefix (corrupt state)
//	state   each input's state and watermark, then Current
func TestTracker(t *testing.T) {
	var (
		db      *testDB
		sources []shard.Source
		delay   int64
		marked  []string
		tr      *Tracker
		// flushed is the state as of the last flush: what a reload must see.
		flushed string
	)
	prefix := []byte("w/")
	load := func() (*Tracker, error) {
		n := NewTracker(prefix, delay, marked...)
		return n, n.load(sources, db.db, db.ro)
	}
	datadriven.RunTest(t, "testdata/tracker", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "new":
			db, sources, delay, marked = openDB(t), nil, 0, nil
			arg, _ := d.Arg("sources")
			for _, v := range arg.Vals {
				p, err := parsePart(v)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				sources = append(sources, shard.Source{Topic: p.Topic, Partition: p.Index})
			}
			d.MaybeScanArgs(t, "delay", &delay)
			if arg, ok := d.Arg("marked"); ok {
				marked = arg.Vals
			}
			var err error
			if tr, err = load(); err != nil {
				d.Fatalf(t, "load: %v", err)
			}
			flushed = trackerState(tr)
			return flushed
		case "apply":
			var b strings.Builder
			for _, line := range strings.Split(d.Input, "\n") {
				fmt.Fprintf(&b, "%s -> %s\n", line, applyTracker(t, d, tr, line))
			}
			return b.String()
		case "flush":
			wb := grocksdb.NewWriteBatch()
			defer wb.Destroy()
			tr.Flush(wb)
			out := records(t, wb, func(k []byte) string { return fmt.Sprintf("%q", k) })
			db.commit(t, wb)
			flushed = trackerState(tr)
			return out + fmt.Sprintf("flushed %s\n", fmtTime(tr.Flushed()))
		case "reload":
			n, err := load()
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			tr = n
			got := trackerState(tr)
			if got != flushed {
				d.Fatalf(t, "reloaded state\n%s\ndiffers from the state as of the last flush\n%s", got, flushed)
			}
			return got
		case "put":
			var k, v string
			d.ScanArgs(t, "key", &k)
			d.ScanArgs(t, "value", &v)
			if err := db.db.Put(db.wo, []byte(k), []byte(v)); err != nil {
				d.Fatalf(t, "put: %v", err)
			}
			return "ok\n"
		case "state":
			return trackerState(tr)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// applyTracker applies one apply line and describes the outcome.
func applyTracker(t *testing.T, d *datadriven.TestData, tr *Tracker, line string) string {
	f := strings.Fields(line)
	if len(f) != 3 {
		d.Fatalf(t, "line %q: want OP T/P ARG", line)
	}
	part, err := parsePart(f[1])
	if err != nil {
		d.Fatalf(t, "line %q: %v", line, err)
	}
	switch f[0] {
	case "data", "late":
		ts, err := parseTime(f[2])
		if err != nil {
			d.Fatalf(t, "line %q: %v", line, err)
		}
		if f[0] == "late" {
			return fmt.Sprintf("late=%v", tr.Late(part, ts))
		}
		tr.Observe(part, ts)
	case "mark":
		m, err := parseTestMark(f[2])
		if err != nil {
			d.Fatalf(t, "line %q: %v", line, err)
		}
		if err := tr.ObserveMark(part, m); err != nil {
			return fmt.Sprintf("error: %v (current %s)", err, fmtTime(tr.Current()))
		}
	default:
		d.Fatalf(t, "line %q: unknown op %q", line, f[0])
	}
	return "current " + fmtTime(tr.Current())
}

// trackerState describes each input and Current.
func trackerState(tr *Tracker) string {
	var b strings.Builder
	for _, in := range tr.order {
		if !in.marked {
			fmt.Fprintf(&b, "%s timed: max-seen %s, mark %s, watermark %s\n", in.part, fmtTime(in.maxSeen), fmtTime(in.markTime), fmtTime(in.watermark(tr.delay)))
			continue
		}
		fmt.Fprintf(&b, "%s marked:", in.part)
		if in.senders == nil {
			b.WriteString(" no marks")
		}
		for i, s := range in.senders {
			if s.heard {
				fmt.Fprintf(&b, " %d:%s", i, fmtTime(s.time))
			} else {
				fmt.Fprintf(&b, " %d:-", i)
			}
		}
		fmt.Fprintf(&b, ", watermark %s\n", fmtTime(in.watermark(tr.delay)))
	}
	fmt.Fprintf(&b, "current %s\n", fmtTime(tr.Current()))
	return b.String()
}
