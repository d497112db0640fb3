package rocksmem

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// live are the budgets not closed yet; the metrics sum them (a member has
// one; tests may run several members in one process).
var live = &budgets{set: map[*Budget]struct{}{}}

type budgets struct {
	mu  sync.Mutex
	set map[*Budget]struct{}
}

func (l *budgets) add(b *Budget) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set[b] = struct{}{}
}

func (l *budgets) remove(b *Budget) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.set, b)
}

// sum is the stats of every live budget added up.
func (l *budgets) sum() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t Stats
	for b := range l.set {
		s := b.Stats()
		t.CacheCapacity += s.CacheCapacity
		t.CacheUsage += s.CacheUsage
		t.CachePinned += s.CachePinned
		t.WriteBufferLimit += s.WriteBufferLimit
		t.WriteBufferUsage += s.WriteBufferUsage
		t.WriteBufferCharged += s.WriteBufferCharged
	}
	return t
}

// The gauges, read from the live budgets at each scrape.
var (
	descCacheCapacity = prometheus.NewDesc("consumerd_rocksdb_block_cache_capacity_bytes",
		"Capacity of the block cache the shard databases of this process share (--rocksdb.memory): the bound of their block, index, filter and memtable memory.", nil, nil)
	descCacheUsage = prometheus.NewDesc("consumerd_rocksdb_block_cache_usage_bytes",
		"Bytes held by the shared block cache, memtables charged to it included.", nil, nil)
	descCachePinned = prometheus.NewDesc("consumerd_rocksdb_block_cache_pinned_bytes",
		"Bytes of the shared block cache in use by readers (not evictable).", nil, nil)
	descWBLimit = prometheus.NewDesc("consumerd_rocksdb_write_buffer_limit_bytes",
		"Limit of the memtable memory of all shard databases of this process (half the block cache): flushes start near it, writes stall above it.", nil, nil)
	descWBUsage = prometheus.NewDesc("consumerd_rocksdb_write_buffer_usage_bytes",
		"Memtable memory of all shard databases of this process.", nil, nil)
)

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCacheCapacity, descCacheUsage, descCachePinned, descWBLimit, descWBUsage} {
		ch <- d
	}
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	s := live.sum()
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{
		{descCacheCapacity, s.CacheCapacity}, {descCacheUsage, s.CacheUsage}, {descCachePinned, s.CachePinned},
		{descWBLimit, s.WriteBufferLimit}, {descWBUsage, s.WriteBufferUsage},
	} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, float64(m.v))
	}
}

func init() { prometheus.MustRegister(collector{}) }
