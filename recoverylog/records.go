package recoverylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// castagnoli is the CRC32C table used for record and chain checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RecordVersion is the version byte of the record encoding this package writes.
const RecordVersion byte = 1

// Kind is a record's type.
type Kind byte

const (
	// KindTxn is a committed transaction (or one chunk of it).
	KindTxn Kind = 1
	// KindFence marks the start of a new writer's term.
	KindFence Kind = 2
	// KindSnapshot points to a snapshot manifest.
	KindSnapshot Kind = 3
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindTxn:
		return "txn"
	case KindFence:
		return "fence"
	case KindSnapshot:
		return "snapshot"
	default:
		return fmt.Sprintf("kind(%d)", byte(k))
	}
}

const (
	// headerLen is version(1) kind(1) seq(8) prevChecksum(4) term(8).
	headerLen = 1 + 1 + 8 + 4 + 8
	// trailerLen is the CRC32C of everything before it.
	trailerLen = 4
	// maxParts bounds the number of chunks of one transaction (sanity limit
	// for the decoder: 1<<16 chunks of 900 KiB is ~56 GiB).
	maxParts = 1 << 16
	// maxStringLen bounds author and manifest strings.
	maxStringLen = 1 << 16
)

// DefaultChunkSize is the largest WriteBatch slice carried by one Txn
// record. JetStream refuses messages over max_payload (1 MiB by default);
// 900 KiB leaves room for the record header and message headers.
const DefaultChunkSize = 900 << 10

// ErrBadRecord is wrapped by every Decode error.
var ErrBadRecord = errors.New("recoverylog: bad record")

// Record is one decoded recovery-log record.
//
// Every record carries Seq, its index in the chain, and PrevChecksum, the
// chain checksum before it; a record extends the chain at Position p iff
// Seq == p.Seq+1 and PrevChecksum == p.Checksum. Term is the term of the
// writer that authored it (0 for an unfenced writer).
type Record struct {
	Kind         Kind
	Seq          uint64
	PrevChecksum uint32
	Term         uint64

	// Txn: Data is the WriteBatch bytes (batch.Data()), or the Part-th of
	// Parts slices of them. A transaction that fits one record has Part 0,
	// Parts 1.
	Data  []byte
	Part  uint32
	Parts uint32

	// Fence: Author names the new writer (its term is Term).
	Author string

	// Snapshot: Manifest points to the snapshot manifest; Covers is the
	// recovery-log id the snapshot includes (everything up to and including it).
	Manifest string
	Covers   uint64

	// raw is the encoding the record was decoded from (set by Decode); the
	// chain checksum folds it.
	raw []byte
}

// encoded returns the record's encoding: the bytes it was decoded from, or
// a fresh encoding.
func (r *Record) encoded() []byte {
	if r.raw != nil {
		return r.raw
	}
	return r.Encode(nil)
}

// Encode appends the binary encoding of r to dst and returns it.
//
// Layout (version 1, integers big-endian):
//
//	version u8 | kind u8 | seq u64 | prevChecksum u32 | term u64 | body | crc32c u32
//
// body by kind: Txn: part u32 | parts u32 | data (the rest);
// Fence: authorLen u32 | author; Snapshot: covers u64 | manifestLen u32 | manifest.
// The trailing CRC32C (Castagnoli) covers every byte before it.
func (r *Record) Encode(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, RecordVersion, byte(r.Kind))
	dst = binary.BigEndian.AppendUint64(dst, r.Seq)
	dst = binary.BigEndian.AppendUint32(dst, r.PrevChecksum)
	dst = binary.BigEndian.AppendUint64(dst, r.Term)
	switch r.Kind {
	case KindTxn:
		parts := r.Parts
		if parts == 0 {
			parts = 1
		}
		dst = binary.BigEndian.AppendUint32(dst, r.Part)
		dst = binary.BigEndian.AppendUint32(dst, parts)
		dst = append(dst, r.Data...)
	case KindFence:
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Author)))
		dst = append(dst, r.Author...)
	case KindSnapshot:
		dst = binary.BigEndian.AppendUint64(dst, r.Covers)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Manifest)))
		dst = append(dst, r.Manifest...)
	}
	sum := crc32.Checksum(dst[start:], castagnoli)
	return binary.BigEndian.AppendUint32(dst, sum)
}

// Decode parses one record. Bad bytes (short, unknown version or kind,
// inconsistent lengths, trailing bytes, checksum mismatch) give an error
// wrapping ErrBadRecord, never a panic. Txn.Data aliases b.
func Decode(b []byte) (*Record, error) {
	if len(b) < headerLen+trailerLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte minimum", ErrBadRecord, len(b), headerLen+trailerLen)
	}
	if b[0] != RecordVersion {
		return nil, fmt.Errorf("%w: unknown version %d (want %d)", ErrBadRecord, b[0], RecordVersion)
	}
	body := b[:len(b)-trailerLen]
	want := binary.BigEndian.Uint32(b[len(b)-trailerLen:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrBadRecord, want, got)
	}
	r := &Record{
		Kind:         Kind(b[1]),
		Seq:          binary.BigEndian.Uint64(b[2:10]),
		PrevChecksum: binary.BigEndian.Uint32(b[10:14]),
		Term:         binary.BigEndian.Uint64(b[14:22]),
		raw:          b,
	}
	if r.Seq == 0 {
		return nil, fmt.Errorf("%w: seq 0 (chain indexes start at 1)", ErrBadRecord)
	}
	p := body[headerLen:]
	switch r.Kind {
	case KindTxn:
		if len(p) < 8 {
			return nil, fmt.Errorf("%w: txn body of %d bytes lacks part/parts", ErrBadRecord, len(p))
		}
		r.Part = binary.BigEndian.Uint32(p[0:4])
		r.Parts = binary.BigEndian.Uint32(p[4:8])
		if r.Parts == 0 || r.Parts > maxParts {
			return nil, fmt.Errorf("%w: txn parts %d out of range [1,%d]", ErrBadRecord, r.Parts, maxParts)
		}
		if r.Part >= r.Parts {
			return nil, fmt.Errorf("%w: txn part %d not below parts %d", ErrBadRecord, r.Part, r.Parts)
		}
		r.Data = p[8:]
	case KindFence:
		s, rest, err := decodeString(p, "fence author")
		if err != nil {
			return nil, err
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("%w: %d trailing bytes after fence author", ErrBadRecord, len(rest))
		}
		r.Author = s
	case KindSnapshot:
		if len(p) < 8 {
			return nil, fmt.Errorf("%w: snapshot body of %d bytes lacks covered id", ErrBadRecord, len(p))
		}
		r.Covers = binary.BigEndian.Uint64(p[:8])
		s, rest, err := decodeString(p[8:], "snapshot manifest")
		if err != nil {
			return nil, err
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("%w: %d trailing bytes after snapshot manifest", ErrBadRecord, len(rest))
		}
		r.Manifest = s
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, b[1])
	}
	return r, nil
}

func decodeString(p []byte, what string) (string, []byte, error) {
	if len(p) < 4 {
		return "", nil, fmt.Errorf("%w: %s length missing", ErrBadRecord, what)
	}
	n := binary.BigEndian.Uint32(p[:4])
	if n > maxStringLen || int(n) > len(p)-4 {
		return "", nil, fmt.Errorf("%w: %s length %d exceeds the %d bytes left (limit %d)", ErrBadRecord, what, n, len(p)-4, maxStringLen)
	}
	return string(p[4 : 4+n]), p[4+n:], nil
}

// ChainChecksum folds a record's encoded bytes into the chain checksum prev:
// the checksum after the record is CRC32C(prev ‖ body), computed as
// crc32.Update(prev, body) where body is the encoding without its trailer.
// Since the body holds prev itself (PrevChecksum), seq and term, two records
// of different branches never share a chain checksum by construction.
func ChainChecksum(prev uint32, encoded []byte) uint32 {
	if len(encoded) < trailerLen {
		return crc32.Update(prev, castagnoli, encoded)
	}
	return crc32.Update(prev, castagnoli, encoded[:len(encoded)-trailerLen])
}

// EncodeTxn encodes a transaction's WriteBatch bytes as one or more Txn
// records continuing the chain at pos: records get seq pos.Seq+1, +2, …
// and each carries the chain checksum after its predecessor. Batches longer
// than chunkSize (DefaultChunkSize when ≤ 0) become ceil(len/chunkSize) chunk
// records (Part i of Parts n) that count only once the last one is read.
// It returns the encoded records and the chain position after the last one
// (LogID and Term unchanged: the caller fills LogID once the log assigned it).
func EncodeTxn(pos Position, term uint64, data []byte, chunkSize int) ([][]byte, Position) {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	parts := (len(data) + chunkSize - 1) / chunkSize
	if parts == 0 {
		parts = 1
	}
	out := make([][]byte, 0, parts)
	for i := 0; i < parts; i++ {
		lo := i * chunkSize
		hi := min(lo+chunkSize, len(data))
		rec := Record{
			Kind: KindTxn, Seq: pos.Seq + 1, PrevChecksum: pos.Checksum, Term: term,
			Data: data[lo:hi], Part: uint32(i), Parts: uint32(parts),
		}
		enc := rec.Encode(make([]byte, 0, headerLen+8+(hi-lo)+trailerLen))
		pos.Seq++
		pos.Checksum = ChainChecksum(pos.Checksum, enc)
		out = append(out, enc)
	}
	return out, pos
}

// encodeNext encodes a single non-Txn record continuing the chain at pos and
// returns it with the position after it.
func encodeNext(pos Position, rec Record) ([]byte, Position) {
	rec.Seq = pos.Seq + 1
	rec.PrevChecksum = pos.Checksum
	enc := rec.Encode(nil)
	pos.Seq++
	pos.Checksum = ChainChecksum(pos.Checksum, enc)
	return enc, pos
}
