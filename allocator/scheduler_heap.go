package allocator

// This file holds mheap, the indexed heap the solver keeps members in (per
// zone receivers with room; donors while balancing).

// mheap is an indexed binary heap of member indices ordered by key (load),
// ties by index; a min-heap unless max.
type mheap struct {
	h   []int32
	key []int32
	pos []int32
	max bool
}

func (h *mheap) less(a, b int32) bool {
	ka, kb := h.key[a], h.key[b]
	if ka != kb {
		if h.max {
			return ka > kb
		}
		return ka < kb
	}
	return a < b
}

func (h *mheap) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.pos[h.h[i]] = int32(i)
	h.pos[h.h[j]] = int32(j)
}

func (h *mheap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.h[i], h.h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *mheap) down(i int) bool {
	start := i
	n := len(h.h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.h[r], h.h[l]) {
			c = r
		}
		if !h.less(h.h[c], h.h[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h *mheap) push(m int32) {
	h.h = append(h.h, m)
	h.pos[m] = int32(len(h.h) - 1)
	h.up(len(h.h) - 1)
}

func (h *mheap) remove(m int32) {
	i := int(h.pos[m])
	last := len(h.h) - 1
	if i != last {
		h.swap(i, last)
	}
	h.h = h.h[:last]
	h.pos[m] = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *mheap) fix(m int32) {
	i := int(h.pos[m])
	if !h.down(i) {
		h.up(i)
	}
}

// pushOrFix adds m, or restores its place after its key changed if it is in
// the heap already.
func (h *mheap) pushOrFix(m int32) {
	if h.pos[m] >= 0 {
		h.fix(m)
	} else {
		h.push(m)
	}
}
