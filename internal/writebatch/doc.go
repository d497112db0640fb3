// Package writebatch reads and extends the serialized form of a RocksDB
// WriteBatch (its "rep", grocksdb's WriteBatch.Data()) in Go, without a cgo
// call per record. It is the one place that knows the format: package shard
// reads the open and in-flight transactions' batches through it (the
// overlay Get reads through), and package recoverylog appends the applied
// position to a replayed transaction's batch with it.
//
// # Format
//
// A rep is a 12-byte header — the sequence number (fixed64) and the count
// of records (fixed32), both little-endian — followed by the records, back
// to back. A record is a tag byte and its fields: for the column-family
// variants of a tag first cf, the column family id (a varint32), then the
// others, each a varint32 length and that many bytes. The tags read here
// (RocksDB's ValueType, in db/dbformat.h):
//
//	tag  RocksDB name                       Kind          fields after the tag
//	0x1  kTypeValue                         Put           key, value
//	0x5  kTypeColumnFamilyValue             Put           cf, key, value
//	0x0  kTypeDeletion                      Delete        key
//	0x4  kTypeColumnFamilyDeletion          Delete        cf, key
//	0x7  kTypeSingleDeletion                SingleDelete  key
//	0x8  kTypeColumnFamilySingleDeletion    SingleDelete  cf, key
//	0xF  kTypeRangeDeletion                 DeleteRange   begin, end
//	0xE  kTypeColumnFamilyRangeDeletion     DeleteRange   cf, begin, end
//	0x2  kTypeMerge                         Merge         key, operand
//	0x6  kTypeColumnFamilyMerge             Merge         cf, key, operand
//	0x3  kTypeLogData                       LogData       blob
//	0xD  kTypeNoop                          Noop          (none)
//
// LogData and Noop are not in the header's count; every other record is.
// The variants without a column family id are in the default column family
// (id 0); a Reader reports the id and leaves the choice of which families
// to accept to the caller.
//
// Every other tag — the two-phase-commit markers (0x9–0xC, 0x12, 0x13),
// blob indexes (0x10, 0x11), timestamps (0x14, 0x15) and wide-column
// entities (0x16, 0x17) among them — is an error wrapping ErrUnsupported
// that names the tag and the byte offset of its record. Such a record is
// never skipped: the length of one of an unknown type is unknown, and one
// of a known type left unread would be a write the caller misses. A rep
// that does not parse — shorter than its header, a truncated record, a
// varint that is truncated or does not fit 32 bits (RocksDB drops such
// bits; it never writes them), a count that disagrees with the records — is
// an error wrapping ErrCorrupt that names what is wrong and where.
//
// # Use
//
// A Reader yields the records of a rep in order without allocating; their
// keys and values alias the rep. It can follow a batch that is still being
// written (Extend): RocksDB only appends to a batch's rep until it is
// cleared or rolled back, so a Reader continues after the last record it
// read.
//
// AppendPut adds a Put in the default column family to a rep, in place when
// the rep has PutLen bytes of spare capacity, and counts it in the header —
// the same bytes RocksDB's WriteBatch::Put appends.
package writebatch
