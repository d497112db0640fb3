package nexmark

import (
	"fmt"
	"slices"
	"strings"
)

// Diff compares a query's output rows with its model's as multisets (a row
// twice in the output and once in the model is a difference: outputs are
// exactly once). It returns "" when they are equal, else a summary naming
// how many rows are missing and extra, with up to maxShown of each.
func Diff(got, want []string) string {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	var missing, extra []string
	i, j := 0, 0
	for i < len(g) || j < len(w) {
		switch {
		case j == len(w) || (i < len(g) && g[i] < w[j]):
			extra = append(extra, g[i])
			i++
		case i == len(g) || w[j] < g[i]:
			missing = append(missing, w[j])
			j++
		default:
			i++
			j++
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows, model %d: %d missing, %d extra (or duplicated)", len(got), len(want), len(missing), len(extra))
	show := func(what string, rows []string) {
		for k, r := range rows {
			if k == maxShown {
				fmt.Fprintf(&b, "\n  … %d more %s", len(rows)-k, what)
				break
			}
			fmt.Fprintf(&b, "\n  %s: %s", what, r)
		}
	}
	show("missing", missing)
	show("extra", extra)
	return b.String()
}

const maxShown = 5
