package writebatch

import "fmt"

// Reader yields the records of a rep in order:
//
//	var r writebatch.Reader
//	r.Reset(rep)
//	for r.Next() {
//		switch r.Kind() { ... r.Key(), r.Value() ... }
//	}
//	if err := r.Err(); err != nil { ... }
//
// Reading allocates nothing unless it fails. The first error stops r for
// good.
type Reader struct {
	rep     []byte
	off     int    // where the next record starts; 0 until the header was checked
	counted uint32 // records read that the header's count includes
	err     error

	// The record Next read last: its offset, kind, column family, and
	// where its key and value are in rep. The accessors make the slices:
	// Next stores no pointers, and no record struct is copied per record.
	recOff           int
	kind             Kind
	cf               uint32
	keyStart, keyEnd int
	valStart, valEnd int
}

// Reset makes r read rep from its first record.
func (r *Reader) Reset(rep []byte) { *r = Reader{rep: rep} }

// Extend gives r the current rep of the batch it reads: the same batch
// with records appended since (for a zero Reader, any rep, read from its
// start). Next continues after the last record read, so a batch still being
// written is parsed once in all, not once per look.
//
// rep's bytes up to there must be those already read, which holds while
// RocksDB only appends to the batch: clearing it or rolling it back to a
// save point breaks that. A rep shorter than what was read is such a change
// and an error; a changed rep that is not shorter shows only when its
// records or its count stop adding up (Next's error).
func (r *Reader) Extend(rep []byte) error {
	if r.err != nil {
		return r.err
	}
	if len(rep) < r.off {
		r.err = fmt.Errorf("write batch shrank from %d to %d bytes (cleared or rolled back?)", r.off, len(rep))
		return r.err
	}
	r.rep = rep
	return nil
}

// Next reads the next record (see Kind, ColumnFamily, Key, Value). It
// returns false at the end of the rep — where the records must add up to
// the header's count — or on an error (see Err).
func (r *Reader) Next() bool {
	if r.err != nil {
		return false
	}
	if r.off == 0 {
		if len(r.rep) < HeaderLen {
			r.err = fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(r.rep), HeaderLen)
			return false
		}
		r.off = HeaderLen
	}
	b, off := r.rep, r.off
	if off == len(b) {
		if count := Count(b); count != r.counted {
			r.err = fmt.Errorf("%w: header count %d, but the batch holds %d counted records", ErrCorrupt, count, r.counted)
		}
		return false
	}
	tag := b[off]
	var l tagLayout
	if int(tag) < len(layouts) {
		l = layouts[tag]
	}
	if l.kind == 0 {
		r.err = unsupportedError(off, tag)
		return false
	}
	p := off + 1
	var cf uint32
	if l.cf {
		v, n := uvarint32(b[p:])
		if n <= 0 {
			r.err = corruptError(off, l.kind, tag, "column family id: %s", varintProblem(n))
			return false
		}
		cf, p = v, p+n
	}
	// A field is a varint32 length and its bytes; a length under 128 (one
	// byte) is read here, others by field.
	keyStart, keyEnd, valStart, valEnd := p, p, p, p
	if l.key {
		if p < len(b) && b[p] < 0x80 && p+1+int(b[p]) <= len(b) {
			keyStart, keyEnd = p+1, p+1+int(b[p])
		} else if keyStart, keyEnd = field(b, p); keyEnd < 0 {
			r.err = fieldError(b, off, p, l.kind, tag, "key")
			return false
		}
		p = keyEnd
	}
	if l.value {
		if p < len(b) && b[p] < 0x80 && p+1+int(b[p]) <= len(b) {
			valStart, valEnd = p+1, p+1+int(b[p])
		} else if valStart, valEnd = field(b, p); valEnd < 0 {
			r.err = fieldError(b, off, p, l.kind, tag, valueName(l.kind))
			return false
		}
		p = valEnd
	}
	if l.kind.counted() {
		if count := Count(b); r.counted == count {
			r.err = countExceededError(off, l.kind, tag, count)
			return false
		}
		r.counted++
	}
	r.recOff, r.kind, r.cf = off, l.kind, cf
	r.keyStart, r.keyEnd, r.valStart, r.valEnd = keyStart, keyEnd, valStart, valEnd
	r.off = p
	return true
}

// Kind is what the record Next read last does.
func (r *Reader) Kind() Kind { return r.kind }

// ColumnFamily is the column family id of the record Next read last: 0 (the
// default family) for a tag without one.
func (r *Reader) ColumnFamily() uint32 { return r.cf }

// Key is the key of the record Next read last: the key written, or
// DeleteRange's first key; empty for LogData and Noop. It aliases the rep,
// capped at its length (appending to it copies).
func (r *Reader) Key() []byte { return r.rep[r.keyStart:r.keyEnd:r.keyEnd] }

// Value is Put's value, Merge's operand, DeleteRange's end key (exclusive)
// or LogData's blob, of the record Next read last; empty for the other
// kinds. It aliases the rep like Key.
func (r *Reader) Value() []byte { return r.rep[r.valStart:r.valEnd:r.valEnd] }

// Offset is the byte offset in the rep of the record Next read last.
func (r *Reader) Offset() int { return r.recOff }

// Err is the error that stopped r, or nil.
func (r *Reader) Err() error { return r.err }

// tagLayout is what follows a tag: an optional column family id, then a
// key and a value, each optional.
type tagLayout struct {
	kind           Kind // 0: unsupported
	cf, key, value bool
}

var layouts = [...]tagLayout{
	tagDeletion:         {kind: Delete, key: true},
	tagCFDeletion:       {kind: Delete, cf: true, key: true},
	tagSingleDeletion:   {kind: SingleDelete, key: true},
	tagCFSingleDeletion: {kind: SingleDelete, cf: true, key: true},
	tagValue:            {kind: Put, key: true, value: true},
	tagCFValue:          {kind: Put, cf: true, key: true, value: true},
	tagMerge:            {kind: Merge, key: true, value: true},
	tagCFMerge:          {kind: Merge, cf: true, key: true, value: true},
	tagRangeDeletion:    {kind: DeleteRange, key: true, value: true},
	tagCFRangeDeletion:  {kind: DeleteRange, cf: true, key: true, value: true},
	tagLogData:          {kind: LogData, value: true},
	tagNoop:             {kind: Noop},
}

// field finds the length-prefixed field at b[p:] and returns where its
// bytes start and end; end is -1 if it does not parse (fieldError says
// why).
func field(b []byte, p int) (start, end int) {
	size, n := uvarint32(b[p:])
	start = p + n
	if n <= 0 || uint64(len(b)-start) < uint64(size) {
		return p, -1
	}
	return start, start + int(size)
}

// fieldError explains why the field at b[p:] of the record at b[off:] does
// not parse.
func fieldError(b []byte, off, p int, kind Kind, tag byte, name string) error {
	size, n := uvarint32(b[p:])
	if n <= 0 {
		return corruptError(off, kind, tag, "%s length: %s", name, varintProblem(n))
	}
	return corruptError(off, kind, tag, "%s of %d bytes, %d bytes left", name, size, len(b)-p-n)
}

func corruptError(off int, kind Kind, tag byte, format string, args ...any) error {
	return fmt.Errorf("%w: record at byte %d: %s (tag 0x%x): %s", ErrCorrupt, off, kind, tag, fmt.Sprintf(format, args...))
}

func countExceededError(off int, kind Kind, tag byte, count uint32) error {
	return corruptError(off, kind, tag, "beyond the header count %d", count)
}

func unsupportedError(off int, tag byte) error {
	name, ok := unsupportedTags[tag]
	if !ok {
		name = "not a RocksDB record type"
	}
	return fmt.Errorf("%w: record at byte %d: type 0x%x (%s)", ErrUnsupported, off, tag, name)
}

func valueName(k Kind) string {
	switch k {
	case DeleteRange:
		return "end key"
	case LogData:
		return "blob"
	default:
		return "value"
	}
}

func varintProblem(n int) string {
	if n < 0 {
		return "varint over 32 bits"
	}
	return "truncated varint"
}

// uvarint32 decodes a varint32 (at most 5 bytes, below 2^32) from the start
// of b and returns it and its length: 0 when b ends inside it, -1 when it
// does not fit 32 bits.
func uvarint32(b []byte) (uint32, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint32(b[0]), 1
	}
	var v uint32
	for i := 0; i < len(b); i++ {
		c := b[i]
		if i == 4 && c > 0x0f {
			return 0, -1
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
