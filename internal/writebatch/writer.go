package writebatch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// PutLen is the number of bytes AppendPut appends for a key and value of
// these lengths.
func PutLen(keyLen, valueLen int) int {
	return 1 + uvarintLen(keyLen) + keyLen + uvarintLen(valueLen) + valueLen
}

// AppendPut appends Put(key, value) in the default column family to rep
// and adds it to the header's count: the bytes RocksDB's WriteBatch::Put
// appends. It writes in place when rep has PutLen spare capacity (rep's
// bytes are then the caller's to give up) and returns the grown rep; a rep
// without the room is left as it was and copied. rep must hold at least a
// header; its records are not checked (RocksDB does when it applies them).
func AppendPut(rep, key, value []byte) ([]byte, error) {
	if len(rep) < HeaderLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(rep), HeaderLen)
	}
	if uint64(len(key)) > math.MaxUint32 || uint64(len(value)) > math.MaxUint32 {
		return nil, fmt.Errorf("put of a %d-byte key and a %d-byte value: over the 4 GiB a varint32 length holds", len(key), len(value))
	}
	rep = append(rep, tagValue)
	rep = binary.AppendUvarint(rep, uint64(len(key)))
	rep = append(rep, key...)
	rep = binary.AppendUvarint(rep, uint64(len(value)))
	rep = append(rep, value...)
	binary.LittleEndian.PutUint32(rep[8:HeaderLen], Count(rep)+1)
	return rep, nil
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}
