package writebatch_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/writebatch"
)

// TestDataDriven runs testdata/*:
//
//   - build: the ops, one a line, applied to a grocksdb WriteBatch (an
//     append-put through AppendPut, the batch then reloaded from the rep
//     with WriteBatchFrom); prints what a Reader reads from its rep. It
//     fails unless the rep equals the one grocksdb builds from the same ops
//     with Put for append-put, reading it as it grows gives the same
//     records, and RocksDB's database after writing it holds what the
//     records say.
//   - decode: a rep in hex (# comments); prints what a Reader reads and
//     what RocksDB says when asked to write it.
//   - follow: ops on one grocksdb WriteBatch (clear, save-point and
//     rollback too; several on a line separated by ";"); prints what a
//     Reader following the batch reads after each line.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "build":
				return runBuild(t, d.Input)
			case "decode":
				return runDecode(t, d.Input)
			case "follow":
				return runFollow(t, d.Input)
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func runBuild(t *testing.T, input string) string {
	r := openRocks(t)
	wb, ref := grocksdb.NewWriteBatch(), grocksdb.NewWriteBatch()
	defer func() { wb.Destroy() }() // wb is replaced by an append-put
	defer ref.Destroy()
	var follow writebatch.Reader
	var followed []string
	for _, line := range strings.Split(input, "\n") {
		o := parseOp(t, line)
		if o.name == "append-put" {
			rep, err := writebatch.AppendPut(slices.Clone(wb.Data()), o.args[0], o.args[1])
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			wb.Destroy()
			wb = grocksdb.WriteBatchFrom(rep)
		} else {
			r.apply(wb, o)
		}
		r.apply(ref, o)
		if err := follow.Extend(wb.Data()); err != nil {
			t.Fatalf("after %q: %v", line, err)
		}
		for follow.Next() {
			followed = append(followed, describe(current(&follow)))
		}
		if err := follow.Err(); err != nil {
			t.Fatalf("reading the batch as it grows, after %q: %v", line, err)
		}
	}
	rep := slices.Clone(wb.Data())
	if !bytes.Equal(rep, ref.Data()) {
		t.Fatalf("the rep differs from the one grocksdb builds:\n got %x\nwant %x", rep, ref.Data())
	}
	records, out, err := read(rep, true)
	if err != nil {
		t.Fatalf("reading a rep grocksdb built: %v\n%s", err, out)
	}
	var whole []string
	for _, rec := range records {
		whole = append(whole, describe(rec))
	}
	if !slices.Equal(whole, followed) {
		t.Fatalf("read as it grew:\n%s\nread whole:\n%s", strings.Join(followed, "\n"), strings.Join(whole, "\n"))
	}
	if err := r.write(rep); err != nil {
		t.Fatalf("RocksDB rejects the rep: %v", err)
	}
	if got, want := r.contents(t), model(records); !reflect.DeepEqual(got, want) {
		t.Fatalf("the database holds %v, the records say %v", got, want)
	}
	return out
}

func runDecode(t *testing.T, input string) string {
	var digits strings.Builder
	for _, line := range strings.Split(input, "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	rep, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	_, out, _ := read(rep, false)
	verdict := "ok"
	if err := openRocks(t).write(rep); err != nil {
		verdict = err.Error()
	}
	return out + "rocksdb: " + verdict + "\n"
}

func runFollow(t *testing.T, input string) string {
	r := openRocks(t)
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	var follow writebatch.Reader
	var out strings.Builder
	for _, line := range strings.Split(input, "\n") {
		for _, o := range strings.Split(line, ";") {
			switch o = strings.TrimSpace(o); o {
			case "clear":
				wb.Clear()
			case "save-point":
				wb.SetSavePoint()
			case "rollback":
				if err := wb.RollbackToSavePoint(); err != nil {
					t.Fatalf("rollback: %v", err)
				}
			default:
				r.apply(wb, parseOp(t, o))
			}
		}
		var got []string
		if err := follow.Extend(wb.Data()); err == nil {
			for follow.Next() {
				got = append(got, fmt.Sprintf("@%d %s", follow.Offset(), describe(current(&follow))))
			}
		}
		if err := follow.Err(); err != nil {
			got = append(got, "error: "+err.Error())
		}
		fmt.Fprintf(&out, "%s: %s\n", line, strings.Join(got, "; "))
	}
	return out.String()
}

// read reads rep whole and describes it: the header, then a line per
// record (with its bytes in hex if withHex), then the error if any.
func read(rep []byte, withHex bool) ([]record, string, error) {
	var b strings.Builder
	if len(rep) >= writebatch.HeaderLen {
		fmt.Fprintf(&b, "header: seq %d, count %d\n", writebatch.Sequence(rep), writebatch.Count(rep))
	}
	var r writebatch.Reader
	r.Reset(rep)
	var records []record
	var offsets []int
	for r.Next() {
		records = append(records, current(&r))
		offsets = append(offsets, r.Offset())
	}
	for i, rec := range records {
		fmt.Fprintf(&b, "@%d %s", offsets[i], describe(rec))
		if withHex {
			end := len(rep)
			if i+1 < len(offsets) {
				end = offsets[i+1]
			}
			fmt.Fprintf(&b, "  | %s", clipped(fmt.Sprintf("% x", rep[offsets[i]:end]), 48))
		}
		b.WriteString("\n")
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	return records, b.String(), r.Err()
}

// record is what a Reader says of the record it read last.
type record struct {
	kind       writebatch.Kind
	cf         uint32
	key, value []byte
}

func current(r *writebatch.Reader) record {
	return record{kind: r.Kind(), cf: r.ColumnFamily(), key: r.Key(), value: r.Value()}
}

// describe is a record in one line: kind, column family if not the
// default one, then its fields quoted (long ones cut, with their length).
func describe(rec record) string {
	s := rec.kind.String()
	if rec.cf != 0 {
		s += fmt.Sprintf(" cf=%d", rec.cf)
	}
	if rec.kind != writebatch.LogData && rec.kind != writebatch.Noop {
		s += " " + quoted(rec.key)
	}
	if rec.kind != writebatch.Delete && rec.kind != writebatch.SingleDelete && rec.kind != writebatch.Noop {
		s += " " + quoted(rec.value)
	}
	return s
}

func quoted(b []byte) string {
	if len(b) <= 16 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q…(%d bytes)", b[:8], len(b))
}

func clipped(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
