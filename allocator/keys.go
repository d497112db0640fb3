package allocator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/consumerd/consumerd/internal/ident"
)

// Key layout under the root prefix (DESIGN §5):
//
//	<root>/members/<zone>/<member>
//	<root>/items/<item>
//	<root>/assign/<item>/<zone>/<member>/<slot>
const (
	membersDir = "/members/"
	itemsDir   = "/items/"
	assignDir  = "/assign/"
)

// cleanPrefix strips a trailing slash: "/consumerd/" and "/consumerd" are the same root.
func cleanPrefix(prefix string) string { return strings.TrimRight(prefix, "/") }

// membersPrefix is the key prefix of all member keys.
func membersPrefix(prefix string) string { return cleanPrefix(prefix) + membersDir }

// itemsPrefix is the key prefix of all item keys.
func itemsPrefix(prefix string) string { return cleanPrefix(prefix) + itemsDir }

// assignPrefix is the key prefix of all assignment keys.
func assignPrefix(prefix string) string { return cleanPrefix(prefix) + assignDir }

// MemberKey is <root>/members/<zone>/<id>.
func MemberKey(prefix, zone, id string) string {
	return membersPrefix(prefix) + zone + "/" + id
}

// ItemKey is <root>/items/<id>.
func ItemKey(prefix, id string) string { return itemsPrefix(prefix) + id }

// AssignmentKey is <root>/assign/<item>/<zone>/<member>/<slot>.
func AssignmentKey(prefix string, a Assignment) string {
	return assignPrefix(prefix) + a.Item + "/" + a.Zone + "/" + a.Member + "/" + strconv.Itoa(a.Slot)
}

// parseMemberKey parses <root>/members/<zone>/<id>.
func parseMemberKey(prefix, key string) (zone, id string, err error) {
	return parseZoneMember("member", membersPrefix(prefix), key)
}

// parseZoneMember parses <under><zone>/<member>, a key of a member's own
// (what names the key's kind in errors).
func parseZoneMember(what, under, key string) (zone, id string, err error) {
	rest, ok := strings.CutPrefix(key, under)
	if !ok {
		return "", "", fmt.Errorf("%s key %q: not under %q", what, key, under)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 2 {
		return "", "", fmt.Errorf("%s key %q: want <zone>/<member> after %q", what, key, under)
	}
	for _, p := range parts {
		if err := ident.Check(p); err != nil {
			return "", "", fmt.Errorf("%s key %q: %w", what, key, err)
		}
	}
	return parts[0], parts[1], nil
}

// parseItemKey parses <root>/items/<id>.
func parseItemKey(prefix, key string) (string, error) {
	rest, ok := strings.CutPrefix(key, itemsPrefix(prefix))
	if !ok {
		return "", fmt.Errorf("item key %q: not under %q", key, itemsPrefix(prefix))
	}
	if err := ident.Check(rest); err != nil {
		return "", fmt.Errorf("item key %q: %w", key, err)
	}
	return rest, nil
}

// parseAssignmentKey parses <root>/assign/<item>/<zone>/<member>/<slot> into
// an Assignment with Item, Zone, Member and Slot set.
func parseAssignmentKey(prefix, key string) (Assignment, error) {
	rest, ok := strings.CutPrefix(key, assignPrefix(prefix))
	if !ok {
		return Assignment{}, fmt.Errorf("assignment key %q: not under %q", key, assignPrefix(prefix))
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return Assignment{}, fmt.Errorf("assignment key %q: want <item>/<zone>/<member>/<slot> after %q", key, assignPrefix(prefix))
	}
	for _, p := range parts[:3] {
		if err := ident.Check(p); err != nil {
			return Assignment{}, fmt.Errorf("assignment key %q: %w", key, err)
		}
	}
	slot, err := strconv.Atoi(parts[3])
	if err != nil || slot < 0 || strconv.Itoa(slot) != parts[3] {
		return Assignment{}, fmt.Errorf("assignment key %q: slot %q is not a non-negative integer", key, parts[3])
	}
	return Assignment{Item: parts[0], Zone: parts[1], Member: parts[2], Slot: slot}, nil
}

// decodeMemberSpec decodes and checks a member value.
func decodeMemberSpec(raw []byte) (MemberSpec, error) {
	var s MemberSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		return MemberSpec{}, fmt.Errorf("member spec: %w", err)
	}
	if s.ItemLimit < 0 {
		return MemberSpec{}, fmt.Errorf("member spec: item_limit %d is negative", s.ItemLimit)
	}
	return s, nil
}

// DecodeReplicaStatus decodes and checks an assignment value.
func DecodeReplicaStatus(raw []byte) (ReplicaStatus, error) {
	var s ReplicaStatus
	if err := json.Unmarshal(raw, &s); err != nil {
		return ReplicaStatus{}, fmt.Errorf("replica status: %w", err)
	}
	switch s.State {
	case StateIdle, StateBackfill, StateStandby, StatePrimary, StateFailed:
	default:
		return ReplicaStatus{}, fmt.Errorf("replica status: unknown state %q", s.State)
	}
	return s, nil
}

// DecodeGenericItem is the default Config.DecodeItem: it reads
// {"hot_standbys":k,"disable":b} and ignores other fields.
func DecodeGenericItem(id string, raw []byte) (Item, error) {
	var g genericItem
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("item %s: %w", id, err)
	}
	if g.HotStandbys < 0 {
		return nil, fmt.Errorf("item %s: hot_standbys %d is negative", id, g.HotStandbys)
	}
	return g, nil
}

// MaxErrorLen bounds ReplicaStatus.Error as stored, in bytes: a panic's
// stack must not bloat every watcher's copy of the keyspace.
const MaxErrorLen = 4096

// TruncateError cuts s to at most MaxErrorLen bytes, marking the cut and
// never splitting a UTF-8 sequence (JSON would turn half a character into
// U+FFFD). UpdateStatus applies it to every status it writes; callers that
// also show the text elsewhere apply it too, so both places agree.
func TruncateError(s string) string {
	if len(s) <= MaxErrorLen {
		return s
	}
	const mark = "…(truncated)"
	cut := MaxErrorLen - len(mark)
	for cut > 0 && s[cut]&0xC0 == 0x80 { // s[cut] continues a sequence: cut before its start
		cut--
	}
	return s[:cut] + mark
}
