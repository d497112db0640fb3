package message

import (
	"strings"
	"testing"
)

func TestParseMessageID(t *testing.T) {
	for _, id := range []MessageID{0, 1, 42, 1<<64 - 1} {
		got, err := ParseMessageID(id.String())
		if err != nil || got != id {
			t.Errorf("round trip of %d: %d, %v", uint64(id), got, err)
		}
	}
	for _, bad := range []string{"", "-1", "1.5", "x", "18446744073709551616"} {
		if _, err := ParseMessageID(bad); err == nil || !strings.Contains(err.Error(), "parse message id") {
			t.Errorf("ParseMessageID(%q) error %v, want one naming the input", bad, err)
		}
	}
}

func TestSize(t *testing.T) {
	m := MutableMessage{Key: "ab", Payload: []byte("cde"), Properties: map[string]string{"f": "gh"}, DedupeID: "ij"}
	if got := m.Size(); got != 2+3+3+2 {
		t.Errorf("MutableMessage.Size = %d, want 10", got)
	}
	im := ImmutableMessage{Key: "ab", Payload: []byte("cde"), Properties: map[string]string{"f": "gh"}}
	if got := im.Size(); got != 8 {
		t.Errorf("ImmutableMessage.Size = %d, want 8", got)
	}
}
