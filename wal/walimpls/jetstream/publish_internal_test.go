package jetstream

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		status  string
		seq     uint64
		fast    bool  // the hand-written parser takes it
		wantErr error // errors.Is target; nil: success
		apiCode jetstream.ErrorCode
	}{
		{name: "plain", data: `{"stream":"s","seq":42}`, seq: 42, fast: true},
		{name: "duplicate", data: `{"stream":"consumerd_a","seq":7,"duplicate":true}`, seq: 7, fast: true},
		{name: "max uint64 via json", data: `{"stream":"s","seq":18446744073709551615}`, seq: 18446744073709551615},
		{name: "domain via json", data: `{"stream":"s","domain":"hub","seq":3}`, seq: 3},
		{name: "escaped stream via json", data: `{"stream":"a\"b","seq":5}`, seq: 5},
		{name: "whitespace via json", data: `{ "stream": "s", "seq": 9 }`, seq: 9},
		{name: "leading zero via json", data: `{"stream":"s","seq":09}`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "api error", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}`,
			apiCode: 10071},
		{name: "missing stream", data: `{"seq":3}`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "garbage", data: `not json`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "truncated", data: `{"stream":"s","seq":`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "no responders", status: "503", wantErr: jetstream.ErrNoStreamResponse},
		{name: "empty", wantErr: jetstream.ErrInvalidJSAck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &nats.Msg{Data: []byte(tc.data)}
			if tc.status != "" {
				m.Header = nats.Header{"Status": []string{tc.status}}
			}
			if _, ok := parsePubAckFast(m.Data); ok != tc.fast {
				t.Errorf("parsePubAckFast(%s) ok=%v, want %v", tc.data, ok, tc.fast)
			}
			seq, err := parsePubAck(m)
			if tc.apiCode != 0 {
				var apiErr *jetstream.APIError
				if !errors.As(err, &apiErr) || apiErr.ErrorCode != tc.apiCode {
					t.Fatalf("parsePubAck(%s) error %v, want API error code %d", tc.data, err, tc.apiCode)
				}
				return
			}
			if tc.wantErr == nil {
				if err != nil || seq != tc.seq {
					t.Fatalf("parsePubAck(%s) = %d, %v; want %d", tc.data, seq, err, tc.seq)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("parsePubAck(%s) error %v, want %v", tc.data, err, tc.wantErr)
			}
		})
	}
}

// The hand-written parser never disagrees with encoding/json: whatever it
// accepts, json decodes to the same sequence.
func FuzzParsePubAckFast(f *testing.F) {
	for _, s := range []string{`{"stream":"s","seq":42}`, `{"stream":"s","seq":1,"duplicate":true}`,
		`{"stream":"s","seq":1,"duplicate":false}`, `{"stream":"","seq":1}`, `{"stream":"s","seq":99999999999999999999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := parsePubAckFast(b)
		if !ok {
			return
		}
		var pa pubAckResponse
		if err := json.Unmarshal(b, &pa); err != nil {
			t.Fatalf("fast parser accepted %q (seq %d) but json rejects it: %v", b, seq, err)
		}
		if pa.Stream == "" || pa.Sequence != seq || pa.Error != nil {
			t.Fatalf("fast parser read %q as seq %d; json as %+v", b, seq, pa)
		}
	})
}
