package rocksmem

// #include "rocksdb/c.h"
import "C"

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// optionsPtr is the C handle behind a grocksdb Options: its first field,
// unexported (grocksdb v1.7.15 offers no accessor). checkOptionsLayout
// guards the assumption.
func optionsPtr(opts *grocksdb.Options) *C.rocksdb_options_t {
	return *(**C.rocksdb_options_t)(unsafe.Pointer(opts))
}

// checkOptionsLayout fails loudly when grocksdb's Options no longer starts
// with its *C.rocksdb_options_t (another grocksdb version): optionsPtr would
// read something else.
func checkOptionsLayout() error {
	f := reflect.TypeOf(grocksdb.Options{}).Field(0)
	if f.Name != "c" || f.Offset != 0 || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Name() != "_Ctype_struct_rocksdb_options_t" {
		return fmt.Errorf("rocksmem: grocksdb.Options does not start with its *C.rocksdb_options_t (field %s %s at %d): "+
			"this grocksdb version is not the one rocksmem reads (v1.7.15); update layout.go", f.Name, f.Type, f.Offset)
	}
	return nil
}
