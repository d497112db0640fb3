package writebatch

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderLen is the length of a rep's header: the sequence number (fixed64)
// and the record count (fixed32), little-endian.
const HeaderLen = 12

// ErrCorrupt is wrapped by the errors for a rep that does not parse.
var ErrCorrupt = errors.New("corrupt write batch")

// ErrUnsupported is wrapped by the error for a record of a type this
// package does not read.
var ErrUnsupported = errors.New("unsupported write batch record")

// Kind is what a record does.
type Kind uint8

// The kinds of record a Reader yields (see the package doc for their tags).
const (
	Put          Kind = iota + 1 // set Key to Value
	Delete                       // delete Key
	SingleDelete                 // delete Key, written at most once since its last delete
	DeleteRange                  // delete the keys from Key up to Value (exclusive)
	Merge                        // merge the operand Value into Key
	LogData                      // Value is a blob for the WAL, not a write
	Noop                         // no fields, not a write
)

var kindNames = [...]string{
	Put: "put", Delete: "delete", SingleDelete: "single-delete",
	DeleteRange: "delete-range", Merge: "merge", LogData: "log-data", Noop: "noop",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// counted reports whether RocksDB counts a record of kind k in the header.
func (k Kind) counted() bool { return k != LogData && k != Noop }

// RocksDB's record tags (ValueType in db/dbformat.h).
const (
	tagDeletion         = 0x0
	tagValue            = 0x1
	tagMerge            = 0x2
	tagLogData          = 0x3
	tagCFDeletion       = 0x4
	tagCFValue          = 0x5
	tagCFMerge          = 0x6
	tagSingleDeletion   = 0x7
	tagCFSingleDeletion = 0x8
	tagNoop             = 0xD
	tagCFRangeDeletion  = 0xE
	tagRangeDeletion    = 0xF
)

// unsupportedTags names the RocksDB record types a Reader rejects, for its
// error.
var unsupportedTags = map[byte]string{
	0x9:  "kTypeBeginPrepareXID",
	0xA:  "kTypeEndPrepareXID",
	0xB:  "kTypeCommitXID",
	0xC:  "kTypeRollbackXID",
	0x10: "kTypeColumnFamilyBlobIndex",
	0x11: "kTypeBlobIndex",
	0x12: "kTypeBeginPersistedPrepareXID",
	0x13: "kTypeBeginUnprepareXID",
	0x14: "kTypeDeletionWithTimestamp",
	0x15: "kTypeCommitXIDAndTimestamp",
	0x16: "kTypeWideColumnEntity",
	0x17: "kTypeColumnFamilyWideColumnEntity",
}

// Sequence is the sequence number in rep's header (0 until RocksDB wrote
// the batch). rep must hold a header.
func Sequence(rep []byte) uint64 { return binary.LittleEndian.Uint64(rep[:8]) }

// Count is the record count in rep's header. rep must hold a header.
func Count(rep []byte) uint32 { return binary.LittleEndian.Uint32(rep[8:HeaderLen]) }
