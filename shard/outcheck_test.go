package shard

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/consumerd/consumerd/wal/message"
)

// TestCheckChain runs testdata/output_chain: what a drainer does with a
// chain on an output partition it opens (checkChain), and which epoch a
// transaction's outputs go on (outboxepoch.go). Commands:
//
//	check own=K epoch=E inc=I [retired] [marker=ID/TXN] [rec=E/ID@I]
//
// own is the shard's last committed txn as the primary started, epoch the
// chain's, inc the channel's incarnation now, marker the chain's last
// marker (id and txn), rec the shard's record of the partition. It prints
// "go on", "go on, reporting: …" or "FAILED: …".
//
//	epochs epoch=E [term=R] [from=F:E,...] spec-term=S txns=T,...
//
// is an outbox state (current epoch E made under reset term R, earlier
// epochs from txn F) and the spec's LogResetTerm S: it prints whether the
// next transaction starts a new epoch, the retired epochs, and each txn's
// epoch.
func TestCheckChain(t *testing.T) {
	datadriven.RunTest(t, "testdata/output_chain", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "check":
			return runCheck(t, d)
		case "epochs":
			return runEpochs(t, d)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func runCheck(t *testing.T, d *datadriven.TestData) string {
	f := chainFound{shard: "s1", channel: "out/0002", retired: d.HasArg("retired")}
	d.ScanArgs(t, "own", &f.ownLast)
	d.ScanArgs(t, "epoch", &f.epoch)
	d.ScanArgs(t, "inc", &f.inc)
	if d.HasArg("marker") {
		var m string
		d.ScanArgs(t, "marker", &m)
		var id uint64
		if _, err := fmt.Sscanf(m, "%d/%d", &id, &f.txn); err != nil {
			d.Fatalf(t, "marker %q: %v", m, err)
		}
		f.marker = message.MessageID(id)
	}
	if d.HasArg("rec") {
		var r string
		d.ScanArgs(t, "rec", &r)
		e, rest, _ := strings.Cut(r, "/")
		id, inc, _ := strings.Cut(rest, "@")
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			d.Fatalf(t, "rec %q: %v", r, err)
		}
		f.rec = chanRecord{epoch: e, id: message.MessageID(n), inc: inc}
	}
	lost, err := checkChain(f)
	switch {
	case err != nil:
		return "FAILED: " + err.Error()
	case lost != "":
		return "go on, reporting: " + lost
	}
	return "go on"
}

func runEpochs(t *testing.T, d *datadriven.TestData) string {
	var st outboxState
	d.ScanArgs(t, "epoch", &st.epoch)
	if d.HasArg("term") {
		d.ScanArgs(t, "term", &st.resetTerm)
	}
	if d.HasArg("from") {
		var fs string
		d.ScanArgs(t, "from", &fs)
		for _, f := range strings.Split(fs, ",") {
			n, e, _ := strings.Cut(f, ":")
			from, err := strconv.ParseUint(n, 10, 64)
			if err != nil {
				d.Fatalf(t, "from %q: %v", f, err)
			}
			st.epochs = append(st.epochs, epochFrom{from, e})
		}
	}
	var spec int64
	d.ScanArgs(t, "spec-term", &spec)
	var txns string
	d.ScanArgs(t, "txns", &txns)
	var out strings.Builder
	fmt.Fprintf(&out, "new epoch next: %v\n", st.needsEpoch(spec))
	var retired []string
	for e, r := range st.retiredEpochs(spec) {
		if r {
			retired = append(retired, e)
		}
	}
	sort.Strings(retired)
	fmt.Fprintf(&out, "retired: %s\n", strings.Join(retired, " "))
	for _, s := range strings.Split(txns, ",") {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			d.Fatalf(t, "txns %q: %v", txns, err)
		}
		fmt.Fprintf(&out, "txn %d: %s\n", n, st.epochOf(n))
	}
	return out.String()
}
