package query

import (
	"bytes"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/examples/wordcount"
)

func TestMergeShards(t *testing.T) {
	app := wordcount.App()
	got, err := Merge(app, []string{"s0", "s1", "s2"}, map[string]map[string]string{
		"s0": {"cat": "2", "dog": "1"}, "s1": {"cat": "3"}, "s2": {},
	})
	if err != nil || got["cat"] != "5" || got["dog"] != "1" || len(got) != 2 {
		t.Fatalf("merge = %v, %v", got, err)
	}
	app.Merge = nil
	if _, err := Merge(app, []string{"s0", "s1"}, map[string]map[string]string{"s0": {"k": "1"}, "s1": {"k": "2"}}); err == nil ||
		!strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("want an error naming the key without Merge, got %v", err)
	}
	var buf bytes.Buffer
	if n, _ := WriteKeyValues(&buf, map[string]string{"b": "2", "a": "10"}, false); buf.String() != "a 10\nb 2\n" || n != 0 {
		t.Fatalf("WriteKeyValues: %q, %d ambiguous", buf.String(), n)
	}
	// Keys are bytes: keys differing only in bytes that are not UTF-8 stay
	// apart, sorted by their bytes; --hex-keys shows them unambiguously.
	binary := map[string]string{"a\xffb": "1", "a\xfeb": "2", "a\uFFFDb": "3", "": "4", "a b": "5", "ab": "6"}
	got, err = Merge(wordcount.App(), []string{"s0", "s1"}, map[string]map[string]string{"s0": binary, "s1": {"a\xffb": "9"}})
	if err != nil || len(got) != 6 || got["a\xffb"] != "10" || got["a\xfeb"] != "2" {
		t.Fatalf("merge of binary keys = %q, %v", got, err)
	}
	buf.Reset()
	if n, _ := WriteKeyValues(&buf, binary, false); buf.String() != " 4\na b 5\nab 6\na\uFFFDb 3\na\xfeb 2\na\xffb 1\n" || n != 5 {
		t.Fatalf("WriteKeyValues of binary keys: %q, %d ambiguous, want 5", buf.String(), n)
	}
	buf.Reset()
	if n, _ := WriteKeyValues(&buf, binary, true); buf.String() != " 4\n612062 5\n6162 6\n61efbfbd62 3\n61fe62 2\n61ff62 1\n" || n != 0 {
		t.Fatalf("WriteKeyValues --hex-keys: %q, %d ambiguous", buf.String(), n)
	}
}
