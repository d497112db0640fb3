package recoverylog

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/wal/message"
)

// fsmScenario is one "== name" block of testdata/fsm.txt.
type fsmScenario struct {
	name  string
	lines []fsmLine
}

type fsmLine struct {
	lineNo int
	fields []string
}

func loadFSMScenarios(t *testing.T, path string) []fsmScenario {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var out []fsmScenario
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, ok := strings.CutPrefix(line, "== "); ok {
			out = append(out, fsmScenario{name: name})
			continue
		}
		if len(out) == 0 {
			t.Fatalf("%s:%d: line before the first scenario", path, n)
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, fsmLine{lineNo: n, fields: strings.Fields(line)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func kv(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestFSMScenarios(t *testing.T) {
	scenarios := loadFSMScenarios(t, "testdata/fsm.txt")
	if len(scenarios) < 5 {
		t.Fatalf("only %d scenarios loaded", len(scenarios))
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) { runFSMScenario(t, s) })
	}
}

func runFSMScenario(t *testing.T, s fsmScenario) {
	start := Position{Checksum: 0x5eed}
	states := map[string]Position{}
	raws := map[string][]byte{}
	var fsm *FSM
	var id message.MessageID
	checks := 0
	for _, l := range s.lines {
		where := fmt.Sprintf("line %d (%s)", l.lineNo, strings.Join(l.fields, " "))
		args := kv(l.fields[1:])
		num := func(k string) uint64 {
			v, ok := args[k]
			if !ok {
				return 0
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", where, k, err)
			}
			return n
		}
		switch l.fields[0] {
		case "start":
			if fsm != nil {
				t.Fatalf("%s: start after records", where)
			}
			start.Seq, start.Term = num("seq"), num("term")
			continue
		case "final":
			want, ok := states[l.fields[1]]
			if !ok {
				t.Fatalf("%s: unknown record %q", where, l.fields[1])
			}
			got := fsm.Position()
			if got.Seq != want.Seq || got.Checksum != want.Checksum || got.Term != num("term") {
				t.Fatalf("%s: final position %v, want seq=%d checksum=%08x term=%d", where, got, want.Seq, want.Checksum, num("term"))
			}
			checks++
			continue
		}
		if fsm == nil {
			fsm = NewFSM(start)
			states["start"] = start
		}
		if len(l.fields) < 2 {
			t.Fatalf("%s: want <name> <kind> ...", where)
		}
		name, kind := l.fields[0], l.fields[1]
		var raw []byte
		if kind == "dup" {
			raw = raws[args["of"]]
			if raw == nil {
				t.Fatalf("%s: unknown record %q", where, args["of"])
			}
			states[name] = states[args["of"]]
		} else {
			parent, ok := states[args["after"]]
			if !ok {
				t.Fatalf("%s: unknown parent %q", where, args["after"])
			}
			rec := Record{Seq: parent.Seq + 1, PrevChecksum: parent.Checksum, Term: num("term")}
			if v, ok := args["seq"]; ok {
				k, err := strconv.ParseUint(strings.TrimPrefix(v, "+"), 10, 64)
				if err != nil {
					t.Fatalf("%s: seq: %v", where, err)
				}
				rec.Seq = parent.Seq + k
			}
			switch kind {
			case "txn":
				rec.Kind = KindTxn
				rec.Data = []byte(args["data"])
				rec.Parts = 1
				if p, ok := args["part"]; ok {
					i, n, _ := strings.Cut(p, "/")
					pi, err1 := strconv.Atoi(i)
					pn, err2 := strconv.Atoi(n)
					if err1 != nil || err2 != nil {
						t.Fatalf("%s: bad part %q", where, p)
					}
					rec.Part, rec.Parts = uint32(pi), uint32(pn)
				}
			case "fence":
				rec.Kind = KindFence
				rec.Author = args["author"]
			case "snap":
				rec.Kind = KindSnapshot
				rec.Manifest = "manifest-" + name
				rec.Covers = 99
			default:
				t.Fatalf("%s: unknown kind %q", where, kind)
			}
			raw = rec.Encode(nil)
			states[name] = Position{Seq: rec.Seq, Checksum: ChainChecksum(parent.Checksum, raw)}
			raws[name] = raw
		}
		dec, err := Decode(raw)
		if err != nil {
			t.Fatalf("%s: decode: %v", where, err)
		}
		id++
		step := fsm.Step(dec, id)
		want := args["expect"]
		got := step.Decision.String()
		if step.Decision == Skip {
			got += ":" + string(step.Reason)
		}
		if got != want {
			t.Fatalf("%s: decision %s, want %s", where, got, want)
		}
		if a, ok := args["applied"]; ok && string(step.Data) != a {
			t.Fatalf("%s: applied data %q, want %q", where, step.Data, a)
		}
		if d := int(num("discard")); d != step.Discarded {
			t.Fatalf("%s: discarded %d chunks, want %d", where, step.Discarded, d)
		}
		if step.Decision == Apply {
			if step.Position.LogID != id || step.Position.Seq != states[name].Seq || step.Position.Checksum != states[name].Checksum {
				t.Fatalf("%s: applied position %v, want seq=%d checksum=%08x log_id=%d", where, step.Position, states[name].Seq, states[name].Checksum, id)
			}
		} else if step.Position != fsm.Position() {
			t.Fatalf("%s: step position %v differs from FSM position %v", where, step.Position, fsm.Position())
		}
		checks++
	}
	if checks == 0 {
		t.Fatal("scenario checked nothing")
	}
}

// TestEncodeTxnChunksReplay checks that EncodeTxn's records, fed to a FSM at
// the same start, apply exactly once with the original data and end at the
// position EncodeTxn predicted.
func TestEncodeTxnChunksReplay(t *testing.T) {
	for _, tc := range []struct {
		size, chunk, parts int
	}{
		{0, 10, 1}, {1, 10, 1}, {10, 10, 1}, {11, 10, 2}, {95, 10, 10}, {3 << 20, 0, 4},
	} {
		data := make([]byte, tc.size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		start := Position{Seq: 41, Checksum: 0xfeed, Term: 3}
		recs, end := EncodeTxn(start, 3, data, tc.chunk)
		if len(recs) != tc.parts {
			t.Fatalf("size %d chunk %d: %d records, want %d", tc.size, tc.chunk, len(recs), tc.parts)
		}
		if end.Seq != start.Seq+uint64(tc.parts) {
			t.Fatalf("end seq %d, want %d", end.Seq, start.Seq+uint64(tc.parts))
		}
		f := NewFSM(start)
		for i, raw := range recs {
			r, err := Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			st := f.Step(r, message.MessageID(100+i))
			last := i == len(recs)-1
			if last && st.Decision != Apply || !last && st.Decision != Accumulate {
				t.Fatalf("size %d: record %d decision %v", tc.size, i, st.Decision)
			}
			if last && string(st.Data) != string(data) {
				t.Fatalf("size %d: assembled %d bytes differ from %d original", tc.size, len(st.Data), len(data))
			}
		}
		got := f.Position()
		if got.Seq != end.Seq || got.Checksum != end.Checksum || got.Term != 3 || got.LogID != message.MessageID(100+len(recs)-1) {
			t.Fatalf("size %d: position %v, want %v at log id %d", tc.size, got, end, 100+len(recs)-1)
		}
	}
}
