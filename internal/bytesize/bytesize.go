// Package bytesize reads and writes sizes in bytes the way flags take them:
// "512MiB", "1GiB", "1.5GiB", "64MB", "1048576".
package bytesize

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// units are the suffixes Parse accepts, case-insensitive: binary (KiB,
// MiB...) and decimal (KB, MB...) multiples, and B.
var units = []struct {
	name string
	mult uint64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// decimal is a number Parse takes with a fraction.
var decimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// Parse reads a size: a non-negative number, possibly with a fraction,
// followed by an optional unit (bytes without one). The error names what
// is wrong and what is accepted.
func Parse(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.name) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.name)), u.mult
			break
		}
	}
	bad := func(why string) error {
		return fmt.Errorf("size %q: %s (write e.g. 512MiB, 1GiB, 1.5GiB or a number of bytes)", s, why)
	}
	if t == "" {
		return 0, bad("no number")
	}
	if n, err := strconv.ParseUint(t, 10, 64); err == nil {
		if n > math.MaxUint64/mult {
			return 0, bad("too large")
		}
		return n * mult, nil
	}
	if strings.HasPrefix(t, "-") {
		return 0, bad("negative")
	}
	if !decimal.MatchString(t) {
		return 0, bad("not a number with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f*float64(mult) >= math.MaxUint64 {
		return 0, bad("too large")
	}
	return uint64(math.Round(f * float64(mult))), nil
}

// Format writes n with the largest binary unit that divides it, else with
// the largest one below it and two decimals: "512MiB", "1.50GiB", "100B".
func Format(n uint64) string {
	names := []string{"TiB", "GiB", "MiB", "KiB"}
	for i, m := range []uint64{1 << 40, 1 << 30, 1 << 20, 1 << 10} {
		if n >= m && n%m == 0 {
			return fmt.Sprintf("%d%s", n/m, names[i])
		}
	}
	for i, m := range []uint64{1 << 40, 1 << 30, 1 << 20, 1 << 10} {
		if n >= m {
			return fmt.Sprintf("%.2f%s", float64(n)/float64(m), names[i])
		}
	}
	return fmt.Sprintf("%dB", n)
}

// Flag is a pflag.Value of a size, read by Parse and shown by Format.
type Flag struct{ P *uint64 }

func (f Flag) String() string {
	if f.P == nil {
		return ""
	}
	return Format(*f.P)
}

// Set parses s into *f.P.
func (f Flag) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*f.P = n
	return nil
}

// Type names the flag's value in --help.
func (Flag) Type() string { return "size" }
