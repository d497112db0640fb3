package cmdline

import (
	"encoding/json"
	"io"
	"slices"
)

// CheckOutput checks a listing command's -o: "table" or "json".
func CheckOutput(o string) error {
	if o != "table" && o != "json" {
		return Usagef("-o: %q must be 'table' or 'json'", o)
	}
	return nil
}

// WriteJSON writes v as indented JSON (the -o json of the listings).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// OrDash is s, or "-" for an empty table cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// OneOf reports whether s is one of choices (a flag's allowed values).
func OneOf(choices []string, s string) bool { return slices.Contains(choices, s) }

// CountTrue is how many of bs are true: "give exactly one of" checks.
func CountTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
