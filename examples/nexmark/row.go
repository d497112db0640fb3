package nexmark

import (
	"strconv"
	"strings"
)

// A query's output row is a text line of '|'-separated fields, in the order
// of the query's SELECT, integers in decimal. The app formats it and the
// model formats it with the same code, so the checker compares rows as
// strings (the generator puts no '|' in any field).
type row []byte

func (r row) sep() row {
	if len(r) > 0 {
		r = append(r, '|')
	}
	return r
}

func (r row) int(v int64) row { return strconv.AppendInt(r.sep(), v, 10) }

func (r row) str(s string) row { return append(r.sep(), s...) }

// float formats v in the shortest form that reads back as v.
func (r row) float(v float64) row { return strconv.AppendFloat(r.sep(), v, 'f', -1, 64) }

// Fields splits a row into its fields (for tools that show rows).
func Fields(r string) []string { return strings.Split(r, "|") }
