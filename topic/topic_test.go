package topic_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/topic"
)

// fnv1a32 is an independent reference of the partitioner's hash.
func fnv1a32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func TestPartitionForGolden(t *testing.T) {
	f, err := os.Open("testdata/partition_for.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows := 0
	for line := 1; sc.Scan(); line++ {
		if strings.HasPrefix(sc.Text(), "#") || sc.Text() == "" {
			continue
		}
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			t.Fatalf("testdata line %d: want 3 tab-separated fields, got %q", line, sc.Text())
		}
		n, err1 := strconv.Atoi(fields[1])
		want, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("testdata line %d: bad numbers in %q", line, sc.Text())
		}
		if got := topic.PartitionFor(fields[0], n); got != want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d (the partitioner changed: keys would be re-routed)", fields[0], n, got, want)
		}
		rows++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows == 0 {
		t.Fatal("no golden rows read")
	}
}

func TestPartitionForMatchesReference(t *testing.T) {
	for i := 0; i < 5000; i++ {
		key := "key-" + strconv.Itoa(i*7919)
		for _, n := range []int{1, 2, 3, 8, 13, 64} {
			want := int(fnv1a32(key) % uint32(n))
			if got := topic.PartitionFor(key, n); got != want {
				t.Fatalf("PartitionFor(%q, %d) = %d, reference %d", key, n, got, want)
			}
		}
	}
	if got := topic.PartitionFor("k", 0); got != 0 {
		t.Fatalf("PartitionFor with 0 partitions = %d, want 0", got)
	}
	if got := topic.PartitionFor("k", -3); got != 0 {
		t.Fatalf("PartitionFor with -3 partitions = %d, want 0", got)
	}
}

func TestPartitionForSpread(t *testing.T) {
	for _, n := range []int{2, 8, 32} {
		const keys = 32000
		counts := make([]int, n)
		for i := 0; i < keys; i++ {
			p := topic.PartitionFor("user-"+strconv.Itoa(i), n)
			if p < 0 || p >= n {
				t.Fatalf("partition %d out of [0,%d)", p, n)
			}
			counts[p]++
		}
		mean := keys / n
		for p, c := range counts {
			if c < mean*8/10 || c > mean*12/10 {
				t.Errorf("%d partitions: partition %d got %d keys, mean %d (more than 20%% off)", n, p, c, mean)
			}
		}
	}
}

func FuzzPartitionFor(f *testing.F) {
	f.Add("hello", 16)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, key string, n int) {
		p := topic.PartitionFor(key, n)
		if n <= 1 {
			if p != 0 {
				t.Fatalf("PartitionFor(%q, %d) = %d, want 0", key, n, p)
			}
			return
		}
		if p < 0 || p >= n {
			t.Fatalf("PartitionFor(%q, %d) = %d out of range", key, n, p)
		}
		if p != topic.PartitionFor(key, n) {
			t.Fatal("not deterministic")
		}
	})
}

func TestChannelNameRoundTrip(t *testing.T) {
	cases := []struct {
		topic string
		part  int
		want  string
	}{
		{"words", 0, "words/0000"},
		{"words", 3, "words/0003"},
		{"a.b_c-D9", 42, "a.b_c-D9/0042"},
		{"t", 9999, "t/9999"},
	}
	for _, c := range cases {
		ch := topic.ChannelName(c.topic, c.part)
		if ch != c.want {
			t.Errorf("ChannelName(%q, %d) = %q, want %q", c.topic, c.part, ch, c.want)
		}
		if got := (topic.Partition{Topic: c.topic, Index: c.part}).Channel(); got != ch {
			t.Errorf("Partition.Channel = %q, want %q", got, ch)
		}
		name, p, err := topic.ParseChannelName(ch)
		if err != nil || name != c.topic || p != c.part {
			t.Errorf("ParseChannelName(%q) = %q, %d, %v; want %q, %d", ch, name, p, err, c.topic, c.part)
		}
	}
}

func TestParseChannelNameRejects(t *testing.T) {
	cases := []struct {
		ch, mention string
	}{
		{"", "no '/'"},
		{"words", "no '/'"},
		{"words/", "fewer than 4 digits"},
		{"words/12", "fewer than 4 digits"},
		{"words/00x1", "not decimal digits"},
		{"words/-001", "not decimal digits"},
		{"words/ 001", "not decimal digits"},
		{"words/10000", "out of range"},
		{"words/00001", "canonical"},
		{"/0001", "empty"},
		{"recovery/shard-1", "not decimal digits"},
		{"a/b/0001", "not one of"},
		{"wörds/0001", "not one of"},
		{"../0001", "not allowed"},
	}
	for _, c := range cases {
		name, p, err := topic.ParseChannelName(c.ch)
		if err == nil {
			t.Errorf("ParseChannelName(%q) = %q, %d; want an error", c.ch, name, p)
			continue
		}
		if !strings.Contains(err.Error(), c.mention) || !strings.Contains(err.Error(), strconv.Quote(c.ch)) && c.ch != "" {
			t.Errorf("ParseChannelName(%q) error %q should name the channel and mention %q", c.ch, err, c.mention)
		}
	}
}

func FuzzChannelName(f *testing.F) {
	f.Add("words", 7)
	f.Add("a-b.c", 9999)
	f.Fuzz(func(t *testing.T, name string, p int) {
		ch := topic.ChannelName(name, p)
		gotName, gotP, err := topic.ParseChannelName(ch)
		valid := ident.Check(name) == nil && p >= 0 && p < topic.MaxPartitions
		if valid != (err == nil) {
			t.Fatalf("ParseChannelName(ChannelName(%q, %d)) error %v, valid input %v", name, p, err, valid)
		}
		if valid && (gotName != name || gotP != p) {
			t.Fatalf("round trip of (%q, %d) gave (%q, %d)", name, p, gotName, gotP)
		}
	})
}

func TestDescriptionValidate(t *testing.T) {
	cases := []struct {
		d       topic.Description
		mention string // empty: valid
	}{
		{topic.Description{Name: "words", Partitions: 4}, ""},
		{topic.Description{Name: "w", Partitions: topic.MaxPartitions}, ""},
		{topic.Description{Name: "", Partitions: 4}, "empty"},
		{topic.Description{Name: "words", Partitions: 0}, "partitions 0 out of range"},
		{topic.Description{Name: "words", Partitions: -1}, "partitions -1"},
		{topic.Description{Name: "words", Partitions: topic.MaxPartitions + 1}, "out of range"},
		{topic.Description{Name: "a/b", Partitions: 1}, "'/'"},
		{topic.Description{Name: "a b", Partitions: 1}, "' '"},
		{topic.Description{Name: strings.Repeat("x", 201), Partitions: 1}, "longer than 200"},
	}
	for _, c := range cases {
		err := c.d.Validate()
		switch {
		case c.mention == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", c.d, err)
		case c.mention != "" && err == nil:
			t.Errorf("%+v: no error, want one mentioning %q", c.d, c.mention)
		case c.mention != "" && !strings.Contains(err.Error(), c.mention):
			t.Errorf("%+v: error %q does not mention %q", c.d, err, c.mention)
		}
	}
}
