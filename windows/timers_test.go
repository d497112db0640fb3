package windows

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/linxGnu/grocksdb"
)

// TestTimers runs testdata/timers against a real RocksDB. The open
// transaction is one batch; commit writes it to the database.
//
//	new            empty timers (prefix "tm/") over a fresh database
//	set            input lines "AT KEY": Set each; the writes made
//	delete         input lines "AT KEY": Delete each; the writes made
//	due wm=W       Due(W): the timers fired and the writes made; input
//	               lines act when a timer fires:
//	                 on AT KEY set AT2 KEY2 | on AT KEY delete AT2 KEY2 | on AT KEY fail
//	commit         write the batch to the database; the database must hold
//	               exactly the index's timers, in the index's order
//	list           Len, Next and every timer in order
//	reload         new timers loaded from the database (a new primary)
//	put-raw hex=H  a raw key under the prefix (corruption)
//	dump           the database's keys under the prefix
func TestTimers(t *testing.T) {
	prefix := []byte("tm/")
	var (
		db *testDB
		tm *Timers
		wb *grocksdb.WriteBatch
	)
	t.Cleanup(func() {
		if wb != nil {
			wb.Destroy()
		}
	})
	showKey := func(k []byte) string { return showTimerKey(prefix, k) }
	// writes returns the batch records appended since it had n.
	writes := func(n int) string {
		all := strings.SplitAfter(records(t, wb, showKey), "\n")
		if wb.Count() == n {
			return "(no writes)\n"
		}
		return strings.Join(all[n:], "")
	}
	datadriven.RunTest(t, "testdata/timers", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "new":
			db, tm = openDB(t), NewTimers(prefix)
			if wb != nil {
				wb.Destroy()
			}
			wb = grocksdb.NewWriteBatch()
			if err := tm.Load(db.db, db.ro); err != nil {
				d.Fatalf(t, "load: %v", err)
			}
			return listTimers(tm)
		case "set", "delete":
			n := wb.Count()
			for _, line := range strings.Split(d.Input, "\n") {
				at, key := scanTimer(t, d, line)
				if d.Cmd == "set" {
					tm.Set(wb, at, key)
				} else {
					tm.Delete(wb, at, key)
				}
			}
			return writes(n) + listTimers(tm)
		case "due":
			var wmArg string
			d.ScanArgs(t, "wm", &wmArg)
			wm, err := parseTime(wmArg)
			if err != nil {
				d.Fatalf(t, "wm: %v", err)
			}
			actions := map[string][]string{}
			if d.Input != "" {
				for _, line := range strings.Split(d.Input, "\n") {
					f := strings.Fields(line)
					if len(f) < 4 || f[0] != "on" {
						d.Fatalf(t, "line %q: want on AT KEY ACTION...", line)
					}
					id := f[1] + " " + f[2]
					actions[id] = append(actions[id], strings.Join(f[3:], " "))
				}
			}
			var b strings.Builder
			n := wb.Count()
			err = tm.Due(wb, wm, func(at int64, key []byte) error {
				id := fmtTime(at) + " " + string(key)
				fmt.Fprintf(&b, "fire %s\n", id)
				for _, a := range actions[id] {
					f := strings.Fields(a)
					switch {
					case f[0] == "fail":
						return errors.New("emit failed")
					case len(f) == 3 && f[0] == "set":
						at2, key2 := scanTimer(t, d, f[1]+" "+f[2])
						tm.Set(wb, at2, key2)
					case len(f) == 3 && f[0] == "delete":
						at2, key2 := scanTimer(t, d, f[1]+" "+f[2])
						tm.Delete(wb, at2, key2)
					default:
						d.Fatalf(t, "action %q: want set AT KEY, delete AT KEY or fail", a)
					}
				}
				return nil
			})
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			}
			return b.String() + writes(n) + listTimers(tm)
		case "commit":
			db.commit(t, wb)
			if got, want := dbTimers(t, db, prefix), indexTimers(tm); !slices.Equal(got, want) {
				d.Fatalf(t, "database holds, in key order\n%v\nbut the index holds\n%v", got, want)
			}
			return "ok\n"
		case "list":
			return listTimers(tm)
		case "reload":
			n := NewTimers(prefix)
			if err := n.Load(db.db, db.ro); err != nil {
				return "error: " + err.Error() + "\n"
			}
			tm = n
			return listTimers(tm)
		case "put-raw":
			var h string
			d.ScanArgs(t, "hex", &h)
			k, err := hex.DecodeString(h)
			if err != nil {
				d.Fatalf(t, "hex: %v", err)
			}
			if err := db.db.Put(db.wo, k, nil); err != nil {
				d.Fatalf(t, "put: %v", err)
			}
			return "ok\n"
		case "dump":
			var b strings.Builder
			it := db.db.NewIterator(db.ro)
			defer it.Close()
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				k := it.Key()
				fmt.Fprintf(&b, "%s\n", showKey(k.Data()))
				k.Free()
			}
			return b.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// scanTimer reads "AT KEY" (AT may be min or max).
func scanTimer(t *testing.T, d *datadriven.TestData, s string) (int64, []byte) {
	f := strings.Fields(s)
	if len(f) != 2 {
		d.Fatalf(t, "timer %q: want AT KEY", s)
	}
	at, err := parseTime(f[0])
	if err != nil {
		d.Fatalf(t, "timer %q: %v", s, err)
	}
	return at, []byte(f[1])
}

// showTimerKey shows a database key as prefix|time bytes in hex|key.
func showTimerKey(prefix, k []byte) string {
	if !bytes.HasPrefix(k, prefix) || len(k) < len(prefix)+8 {
		return fmt.Sprintf("%x", k)
	}
	return fmt.Sprintf("%s|%x|%s", prefix, k[len(prefix):len(prefix)+8], k[len(prefix)+8:])
}

// indexTimers is the index's timers in (at, key) order.
func indexTimers(tm *Timers) []string {
	ids := make([]timerID, 0, len(tm.heap))
	for _, x := range tm.heap {
		ids = append(ids, x.timerID)
		if tm.index[x.timerID] != x {
			panic(fmt.Sprintf("timer %v: heap and map disagree", x.timerID))
		}
	}
	if len(tm.index) != len(tm.heap) {
		panic(fmt.Sprintf("index map has %d timers, heap %d", len(tm.index), len(tm.heap)))
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].at != ids[j].at {
			return ids[i].at < ids[j].at
		}
		return ids[i].key < ids[j].key
	})
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmtTime(id.at) + " " + id.key
	}
	return out
}

// dbTimers is the database's timers in key order, decoded independently of
// Timers.Load.
func dbTimers(t *testing.T, db *testDB, prefix []byte) []string {
	t.Helper()
	it := db.db.NewIterator(db.ro)
	defer it.Close()
	var out []string
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		k := it.Key()
		raw := k.Data()[len(prefix):]
		at := int64(binary.BigEndian.Uint64(raw) ^ 1<<63)
		out = append(out, fmtTime(at)+" "+string(raw[8:]))
		k.Free()
	}
	return out
}

func listTimers(tm *Timers) string {
	next, ok := tm.Next()
	s := fmt.Sprintf("len %d", tm.Len())
	if ok {
		s += ", next " + fmtTime(next)
	}
	for _, x := range indexTimers(tm) {
		s += "\n  " + x
	}
	return s + "\n"
}
