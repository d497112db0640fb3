package allocator

import (
	"strings"
	"testing"
)

func TestDecodeLoadReportRejects(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{`, "load report"},
		{`{"window_ms":0}`, "window_ms 0"},
		{`{"window_ms":1000,"primaries":{"a/b":{"term":3}}}`, `item "a/b"`},
		{`{"window_ms":1000,"primaries":{"s1":{"term":0}}}`, "item s1"},
		{`{"window_ms":1000,"primaries":{"s1":{"term":3,"busy_us_per_s":-1}}}`, "item s1"},
	} {
		if _, err := DecodeLoadReport([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.raw, err, tc.want)
		}
	}
	if _, err := DecodeLoadReport([]byte(`{"window_ms":1000,"primaries":{"s1":{"term":3,"busy_us_per_s":5}}}`)); err != nil {
		t.Errorf("valid report: %v", err)
	}
}

func TestLoadChanged(t *testing.T) {
	repAged := func(term, busy, age int64) LoadReport {
		return LoadReport{WindowMillis: 1000, Primaries: map[string]PrimaryLoad{"s1": {Term: term, BusyMicros: busy, AgeMillis: age}}}
	}
	rep := func(term, busy int64) LoadReport { return repAged(term, busy, 60_000) }
	for _, tc := range []struct {
		name      string
		prev, cur LoadReport
		want      bool
	}{
		{"same", rep(3, 400_000), rep(3, 400_000), false},
		{"a fifth more", rep(3, 400_000), rep(3, 480_000), false},
		{"a third more", rep(3, 400_000), rep(3, 540_000), true},
		{"doubled but under 1% of a core", rep(3, 4_000), rep(3, 8_000), false},
		{"new term", rep(3, 400_000), rep(4, 400_000), true},
		{"primary gone", rep(3, 400_000), LoadReport{WindowMillis: 1000}, true},
		{"first report", LoadReport{}, rep(3, 0), true},
		{"older, still young", repAged(3, 400_000, 1000), repAged(3, 400_000, 4000), false},
		{"led long enough to move", repAged(3, 400_000, 4000), repAged(3, 400_000, 5000), true},
	} {
		if got := LoadChanged(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: LoadChanged %v, want %v", tc.name, got, tc.want)
		}
	}
}
