package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// Batches (WAL.AppendBatch): the backend's walimpls.BatchAppender, with the
// WAL's retry policy. Retrying is safe because a batch is chained: an
// attempt that landed makes the retry fail with ErrStaleChain.

func (w *walAdaptor) batcher(op string) (walimpls.BatchAppender, error) {
	ba, ok := w.impl.(walimpls.BatchAppender)
	if !ok {
		return nil, fmt.Errorf("wal: %s %q: the %s backend has no batches: %w", op, w.channel, w.backend, errors.ErrUnsupported)
	}
	if err := w.beginOp(op); err != nil {
		return nil, err
	}
	return ba, nil
}

func (w *walAdaptor) AppendBatch(ctx context.Context, b Batch) (BatchResult, error) {
	ba, err := w.batcher("append batch to")
	if err != nil {
		return BatchResult{}, err
	}
	var res BatchResult
	err = w.do(ctx, "append batch to "+w.channel, func() error {
		var err error
		res, err = ba.AppendBatch(ctx, b)
		return err
	})
	if err != nil {
		appendErrorsTotal.WithLabelValues(w.backend, errorReason(err)).Inc()
		return BatchResult{}, fmt.Errorf("wal: append batch of %d to %q (chain %s after %d): %w", len(b.Messages), w.channel, b.Chain, b.After, err)
	}
	w.m.appends.Add(float64(len(b.Messages)))
	var bytes int
	for i := range b.Messages {
		bytes += b.Messages[i].Size()
	}
	w.m.bytes.Add(float64(bytes))
	return res, nil
}

func (w *walAdaptor) LastMarker(ctx context.Context, chain string) (Marker, error) {
	ba, err := w.batcher("last marker of")
	if err != nil {
		return Marker{}, err
	}
	var m Marker
	err = w.do(ctx, "last marker of "+w.channel, func() error {
		var err error
		m, err = ba.LastMarker(ctx, chain)
		return err
	})
	if err != nil {
		return Marker{}, fmt.Errorf("wal: last marker of chain %s on %q: %w", chain, w.channel, err)
	}
	return m, nil
}

func (w *walAdaptor) BatchLimits() (int, bool) {
	ba, ok := w.impl.(walimpls.BatchAppender)
	if !ok {
		return 0, false
	}
	return ba.MaxBatch(), ba.Atomic()
}
