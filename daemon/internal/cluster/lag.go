package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
)

// FillLag sets rows' lag: WAL LastID minus the offset the primary reports in
// its /v1/status. Channels that cannot be measured are left out, and a note
// goes to warn.
func FillLag(ctx context.Context, snap allocator.Snapshot, rows []api.ShardRow, opener wal.Opener, hc *http.Client, warn io.Writer) {
	statuses := map[string]*api.StatusResponse{} // by endpoint
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, row := range rows {
		p, ep, ok := shard.PrimaryOf(snap, row.ID)
		if !ok || ep == "" {
			continue
		}
		mu.Lock()
		_, seen := statuses[ep]
		statuses[ep] = nil
		mu.Unlock()
		if seen {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := FetchStatus(ctx, hc, ep)
			if err != nil {
				fmt.Fprintf(warn, "note: lag unknown for shards of %s/%s: %v\n", p.Zone, p.Member, err)
				return
			}
			mu.Lock()
			statuses[ep] = st
			mu.Unlock()
		}()
	}
	wg.Wait()

	lastIDs := map[string]message.MessageID{}
	walOK := opener != nil
	for i, row := range rows {
		_, ep, ok := shard.PrimaryOf(snap, row.ID)
		if !ok {
			continue
		}
		st := statuses[ep]
		if st == nil {
			continue
		}
		for _, r := range st.Replicas {
			if r.Shard != row.ID || r.Slot != 0 {
				continue
			}
			// The primary's own measurement (refreshed about every second)...
			for ch, reported := range r.Lag {
				rows[i].Lag[ch] = reported
			}
			// ... replaced, where possible, by the WAL's last id now minus the
			// offset the primary committed.
			for ch, off := range r.Offsets {
				if !walOK {
					break
				}
				last, seen := lastIDs[ch]
				if !seen {
					var err error
					if last, err = lastID(ctx, opener, ch); err != nil {
						fmt.Fprintf(warn, "note: WAL: %v; showing the lag the primaries report\n", err)
						walOK = false
						break
					}
					lastIDs[ch] = last
				}
				// Not clamped: the WAL was asked after the primary, so a last id
				// below the offset means the channel lost messages (a negative lag).
				rows[i].Lag[ch] = int64(last) - int64(off)
			}
		}
	}
}

func lastID(ctx context.Context, opener wal.Opener, channel string) (message.MessageID, error) {
	w, err := opener.Open(ctx, &wal.OpenOption{Channel: channel})
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", channel, err)
	}
	defer w.Close()
	id, err := w.LastID(ctx)
	if err != nil {
		return 0, fmt.Errorf("last id of %s: %w", channel, err)
	}
	return id, nil
}
