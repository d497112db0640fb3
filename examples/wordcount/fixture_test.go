package wordcount_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// TestFixture runs testdata/lines.txt (one message per line) through a
// wordcount shard and compares the stored counts with testdata/counts.txt
// (written by hand: tokens are split on any whitespace, and are case- and
// punctuation-sensitive).
func TestFixture(t *testing.T) {
	raw, err := os.ReadFile("testdata/lines.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	want := readCounts(t, "testdata/counts.txt")
	if d := shardtest.DiffCounts(wordcount.Count(lines), want); d != "" {
		t.Fatalf("the model disagrees with the fixture: %s", d)
	}

	e := shardtest.NewCluster(t, memory.NewBuilder(), wordcount.App())
	e.TxnMaxMessages = 2
	spec := shardtest.WordcountSpec("wordcount-0000", 0, 0)
	e.PutSpec(spec)
	e.Publish(0, lines...)
	n := e.StartNode("n", t.TempDir())
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	if d := shardtest.DiffCounts(e.Counts(n, spec), want); d != "" {
		t.Fatalf("shard counts differ from testdata/counts.txt: %s", d)
	}
}

func readCounts(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			t.Fatalf("%s:%d: want \"token count\", got %q", path, line, sc.Text())
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		out[fields[0]] = n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
