package recoverylog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{Kind: KindTxn, Seq: 1, PrevChecksum: 0, Term: 0, Data: []byte("batch-bytes"), Part: 0, Parts: 1},
		{Kind: KindTxn, Seq: 9, PrevChecksum: 0xdeadbeef, Term: 7, Data: []byte{}, Part: 2, Parts: 3},
		{Kind: KindFence, Seq: 2, PrevChecksum: 1, Term: 42, Author: "zone-a/member-1"},
		{Kind: KindFence, Seq: 3, PrevChecksum: 2, Term: 43, Author: ""},
		{Kind: KindSnapshot, Seq: 4, PrevChecksum: 3, Term: 43, Manifest: "snapshots/s1/000012.json", Covers: 1234},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		enc := r.Encode([]byte("prefix"))
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatalf("Encode dropped dst prefix")
		}
		got, err := Decode(enc[len("prefix"):])
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		got.raw = nil
		if got.Data == nil && r.Data != nil {
			got.Data = []byte{}
		}
		if !reflect.DeepEqual(*got, r) {
			t.Fatalf("round trip of %v:\n got %+v\nwant %+v", r.Kind, *got, r)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := (&Record{Kind: KindFence, Seq: 5, Term: 1, Author: "me"}).Encode(nil)
	reseal := func(b []byte) []byte {
		b = append([]byte(nil), b[:len(b)-4]...)
		return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	mutate := func(f func(b []byte) []byte) []byte {
		b := f(append([]byte(nil), good[:len(good)-4]...))
		return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	txn := func(part, parts uint32) []byte {
		b := (&Record{Kind: KindTxn, Seq: 1, Parts: 1, Data: []byte("x")}).Encode(nil)
		b = b[:len(b)-4]
		binary.BigEndian.PutUint32(b[headerLen:], part)
		binary.BigEndian.PutUint32(b[headerLen+4:], parts)
		return reseal(append(b, 0, 0, 0, 0))
	}
	flipped := append([]byte(nil), good...)
	flipped[12] ^= 0x40
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"short", good[:10], "shorter than"},
		{"version", mutate(func(b []byte) []byte { b[0] = 9; return b }), "unknown version 9"},
		{"bitflip", flipped, "checksum mismatch"},
		{"kind", mutate(func(b []byte) []byte { b[1] = 77; return b }), "unknown kind 77"},
		{"seq0", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[2:], 0); return b }), "seq 0"},
		{"author length", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[headerLen:], 1000); return b }), "fence author length 1000"},
		{"trailing", mutate(func(b []byte) []byte { return append(b, 'x') }), "trailing bytes"},
		{"parts0", txn(0, 0), "parts 0 out of range"},
		{"part>=parts", txn(3, 3), "part 3 not below parts 3"},
		{"snapshot short", reseal(append([]byte{RecordVersion, byte(KindSnapshot), 0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 12+3+4)...)), "lacks covered id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode(tc.in)
			if err == nil {
				t.Fatalf("decoded %+v, want error %q", r, tc.want)
			}
			if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrBadRecord containing %q", err, tc.want)
			}
		})
	}
}

func TestChainChecksumDependsOnPrev(t *testing.T) {
	enc := (&Record{Kind: KindTxn, Seq: 1, Parts: 1, Data: []byte("d")}).Encode(nil)
	a, b := ChainChecksum(0, enc), ChainChecksum(1, enc)
	if a == b {
		t.Fatalf("chain checksum ignores its predecessor: %08x", a)
	}
	if want := crc32.Update(0, castagnoli, enc[:len(enc)-4]); a != want {
		t.Fatalf("chain checksum %08x, want CRC32C fold %08x", a, want)
	}
}

func TestPositionAndOffsetCodec(t *testing.T) {
	p := Position{Seq: 1 << 40, Checksum: 0xabcdef01, LogID: 77, Term: 9}
	got, err := DecodePosition(EncodePosition(p))
	if err != nil || got != p {
		t.Fatalf("position round trip: %v %v", got, err)
	}
	if _, err := DecodePosition([]byte{1, 2}); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("short position: %v", err)
	}
	bad := EncodePosition(p)
	bad[0] = 2
	if _, err := DecodePosition(bad); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("bad version: %v", err)
	}
	if got := string(OffsetKey("words/0003")); got != "\x00consumerd/offset/words/0003" {
		t.Fatalf("OffsetKey = %q", got)
	}
	if got := Channel("wc-1"); got != "recovery/wc-1" {
		t.Fatalf("Channel = %q", got)
	}
}

// FuzzDecode checks Decode never panics, and that whatever it accepts
// re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(r.Encode(nil))
	}
	chunks, _ := EncodeTxn(Position{Seq: 3, Checksum: 4}, 2, bytes.Repeat([]byte("z"), 50), 20)
	for _, c := range chunks {
		f.Add(c)
	}
	f.Add([]byte{})
	f.Add([]byte{RecordVersion})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			if r != nil || !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v with record %v", err, r)
			}
			return
		}
		if re := r.Encode(nil); !bytes.Equal(re, b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, re)
		}
		// A decoded record must be safe to feed to the FSM in any state.
		NewFSM(Position{Seq: r.Seq - 1, Checksum: r.PrevChecksum}).Step(r, 1)
	})
}
