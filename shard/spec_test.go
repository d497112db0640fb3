package shard

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

type specCase struct {
	Name        string          `json:"name"`
	Spec        json.RawMessage `json:"spec"`
	Error       string          `json:"error"`
	Replication int             `json:"replication"`
	Min         string          `json:"min"`
	Max         string          `json:"max"`
}

func loadSpecCases(t *testing.T) []specCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/spec_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []specCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatalf("testdata/spec_cases.json: %v", err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	return cases
}

func TestParseSpecCases(t *testing.T) {
	for _, c := range loadSpecCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			s, err := ParseSpec(c.Spec)
			if c.Error != "" {
				if err == nil {
					t.Fatalf("ParseSpec succeeded, want error containing %q", c.Error)
				}
				if !strings.Contains(err.Error(), c.Error) {
					t.Fatalf("error %q does not contain %q", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			if got := s.DesiredReplication(); got != c.Replication {
				t.Errorf("DesiredReplication = %d, want %d", got, c.Replication)
			}
			if got := s.EffectiveMinTxnDuration().String(); got != c.Min {
				t.Errorf("min = %s, want %s", got, c.Min)
			}
			if got := s.EffectiveMaxTxnDuration().String(); got != c.Max {
				t.Errorf("max = %s, want %s", got, c.Max)
			}
			// Round trip through JSON keeps the spec.
			out, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseSpec(out)
			if err != nil {
				t.Fatalf("reparse %s: %v", out, err)
			}
			if !reflect.DeepEqual(s, back) {
				t.Fatalf("round trip changed the spec:\n%+v\n%+v", s, back)
			}
		})
	}
}

func TestSpecJSONDurationsAreStrings(t *testing.T) {
	s := Spec{ID: "a", App: "b", Sources: []Source{{Topic: "t"}}, MinTxnDuration: Duration(250 * time.Millisecond), MaxTxnDuration: Duration(2 * time.Second)}
	out, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"min_txn_duration":"250ms"`, `"max_txn_duration":"2s"`, `"sources":[{"topic":"t","partition":0}]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
}

func TestDecodeSpec(t *testing.T) {
	it, err := DecodeSpec("wc-7", []byte(`{"app":"wordcount","sources":[{"topic":"words","partition":7}],"future_field":1}`))
	if err != nil {
		t.Fatalf("DecodeSpec: %v", err)
	}
	s, ok := it.(*Spec)
	if !ok {
		t.Fatalf("DecodeSpec returned %T", it)
	}
	if s.ID != "wc-7" || s.Partition() != 7 || it.DesiredReplication() != 1 {
		t.Fatalf("decoded %+v", s)
	}
	if _, err := DecodeSpec("wc-8", []byte(`{"id":"wc-9","app":"a","sources":[{"topic":"w","partition":0}]}`)); err == nil || !strings.Contains(err.Error(), "does not match its key") {
		t.Fatalf("mismatched id: %v", err)
	}
	if _, err := DecodeSpec("wc-8", []byte(`{`)); err == nil || !strings.Contains(err.Error(), `shard spec "wc-8"`) {
		t.Fatalf("bad json: %v", err)
	}
}

func TestSpecPartition(t *testing.T) {
	for _, c := range []struct {
		sources []Source
		want    int
	}{
		{[]Source{{"words", 3}}, 3},
		{[]Source{{"words", 2}, {"clicks", 2}, {"views", 2}}, 2}, // what `shards create` writes
		{[]Source{{"words", 0}, {"words", 1}}, -1},
		{[]Source{{"words", 4}, {"clicks", 4}, {"views", 5}}, -1},
		{nil, -1},
	} {
		s := &Spec{ID: "x", App: "a", Sources: c.sources}
		if got := s.Partition(); got != c.want {
			t.Errorf("Partition of %v = %d, want %d", c.sources, got, c.want)
		}
	}
}

func TestAppSpecsFor(t *testing.T) {
	app := App{Name: "wordcount", Topics: []string{"words"}, NewConsumer: func() Consumer { return nil }}
	specs, err := app.SpecsFor(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 || specs[2].ID != "wordcount-0002" || specs[2].Sources[0] != (Source{Topic: "words", Partition: 2}) || specs[1].HotStandbys != 1 {
		t.Fatalf("specs %+v", specs)
	}
	if _, err := app.SpecsFor(0, 0); err == nil {
		t.Fatal("count 0 accepted")
	}
	bad := App{Name: "x y", Topics: []string{"t"}, NewConsumer: app.NewConsumer}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("bad name: %v", err)
	}
	if err := (App{Name: "x", Topics: []string{"t"}}).Validate(); err == nil || !strings.Contains(err.Error(), "NewConsumer") {
		t.Fatalf("nil NewConsumer: %v", err)
	}
	keyed := App{Name: "kv", Topics: []string{"a", "b"}, KeyedBy: "b", NewConsumer: app.NewConsumer}
	if err := keyed.Validate(); err != nil {
		t.Fatalf("keyed by one of its topics: %v", err)
	}
	keyed.KeyedBy = "c"
	if err := keyed.Validate(); err == nil || err.Error() != `app "kv": keyed by "c": not one of its topics (a, b)` {
		t.Fatalf("keyed by another topic: %v", err)
	}
}

func TestTxnPolicy(t *testing.T) {
	p := txnPolicy{min: 10 * time.Millisecond, max: time.Second, maxBytes: 100, maxMessages: 5}
	cases := []struct {
		elapsed       time.Duration
		bytes, msgs   int
		full, onStall bool
	}{
		{0, 0, 1, false, false},
		{5 * time.Millisecond, 99, 4, false, false},
		{10 * time.Millisecond, 0, 1, false, true},
		{time.Second, 0, 1, true, true},
		{0, 100, 1, true, false},
		{0, 1, 5, true, false},
	}
	for i, c := range cases {
		if got := p.full(c.elapsed, c.bytes, c.msgs); got != c.full {
			t.Errorf("case %d: full = %v, want %v", i, got, c.full)
		}
		if got := p.closeOnStall(c.elapsed); got != c.onStall {
			t.Errorf("case %d: closeOnStall = %v, want %v", i, got, c.onStall)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestSafeCallRecoversPanic(t *testing.T) {
	err := safeCall("Consume", func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "Consume panicked: boom") {
		t.Fatalf("err = %v", err)
	}
	if err := safeCall("Flush", func() error { return errString("x") }); err == nil || err.Error() != "Flush: x" {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParseSpec: any input is either rejected with an error or yields a
// valid spec that survives a JSON round trip unchanged; never a panic.
func FuzzParseSpec(f *testing.F) {
	for _, c := range []string{
		`{"id":"wc-0","app":"wordcount","sources":[{"topic":"words","partition":0}]}`,
		`{"id":"x","app":"a","sources":[{"topic":"w","partition":3}],"hot_standbys":2,"min_txn_duration":"5ms","max_txn_duration":"1m","labels":{"k":"v"}}`,
		`{"id":"x","max_txn_duration":5}`, `[]`, `null`, `{"sources":null}`,
		`{"id":"x","app":"a","sources":[{"topic":"w","partition":0}],"labels":{}}`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := ParseSpec(raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if verr := s.Validate(); verr != nil {
			t.Fatalf("ParseSpec accepted an invalid spec: %v", verr)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseSpec(out)
		if err != nil {
			t.Fatalf("reparse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(s, back) {
			t.Fatalf("round trip changed %+v into %+v", s, back)
		}
	})
}
