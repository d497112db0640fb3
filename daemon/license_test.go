package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// directRequires are the `require` entries of the go.mod at path that are
// not `// indirect`, module path -> version, as `go mod edit -json` reads
// them.
func directRequires(tb testing.TB, path string) map[string]string {
	tb.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", path).Output()
	if err != nil {
		tb.Fatalf("go mod edit -json %s: %v", path, err)
	}
	var mf struct {
		Require []struct {
			Path, Version string
			Indirect      bool
		}
	}
	if err := json.Unmarshal(out, &mf); err != nil {
		tb.Fatalf("go mod edit -json %s: %v", path, err)
	}
	direct := map[string]string{}
	for _, r := range mf.Require {
		if !r.Indirect {
			direct[r.Path] = r.Version
		}
	}
	return direct
}

// readmeLicenseRow is one row of the README's dependency table.
type readmeLicenseRow struct {
	version  string
	licenses []string // SPDX identifiers
}

// readmeLicenses parses the table of section "## License" of the README at
// path: rows "| `module` | version | license[, license...] [(note)] |".
func readmeLicenses(tb testing.TB, path string) map[string]readmeLicenseRow {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## License\n")
	if !ok {
		tb.Fatalf("%s has no \"## License\" section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]readmeLicenseRow{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 3 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		mod := strings.Trim(strings.TrimSpace(cells[0]), "`")
		lic, _, _ := strings.Cut(cells[2], "(")
		var ids []string
		for _, id := range strings.Split(lic, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
		if _, dup := rows[mod]; dup {
			tb.Errorf("%s: module %s listed twice", path, mod)
		}
		rows[mod] = readmeLicenseRow{version: strings.TrimSpace(cells[1]), licenses: ids}
	}
	return rows
}

// licenseMarkers identify a license's text. A file may hold several (a
// project that forked code under other licenses appends theirs).
var licenseMarkers = []struct {
	id      string
	matches func(text string) bool
}{
	{"MIT", func(s string) bool { return strings.Contains(s, "Permission is hereby granted, free of charge") }},
	{"BSD-3-Clause", func(s string) bool {
		return strings.Contains(s, "Redistribution and use in source and binary forms") && strings.Contains(s, "Neither the name")
	}},
	{"BSD-2-Clause", func(s string) bool {
		return strings.Contains(s, "Redistribution and use in source and binary forms") && !strings.Contains(s, "Neither the name")
	}},
	{"Apache-2.0", func(s string) bool {
		return strings.Contains(s, "Apache License") && strings.Contains(s, "Version 2.0")
	}},
	{"MPL-2.0", func(s string) bool { return strings.Contains(s, "Mozilla Public License Version 2.0") }},
	{"ISC", func(s string) bool {
		return strings.Contains(s, "Permission to use, copy, modify, and/or distribute this software")
	}},
}

// moduleLicenses returns the SPDX identifiers of the licenses in the
// LICENSE (or LICENSE.txt, LICENSE.md, COPYING) files at the root of dir,
// sorted.
func moduleLicenses(dir string) ([]string, error) {
	var text strings.Builder
	for _, name := range []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		text.Write(b)
	}
	if text.Len() == 0 {
		return nil, errors.New("no LICENSE file in " + dir)
	}
	var ids []string
	for _, m := range licenseMarkers {
		if m.matches(text.String()) {
			ids = append(ids, m.id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// TestReadmeLicenses checks the README's table of direct dependencies
// against go.mod: every direct `require` is a row with its version, every
// row is a direct require, and each row's licenses are those the module's
// LICENSE file in the module cache holds. It also checks that LICENSE is
// the Apache License 2.0 with the project's copyright line.
func TestReadmeLicenses(t *testing.T) {
	direct := directRequires(t, filepath.Join("..", "go.mod"))
	rows := readmeLicenses(t, filepath.Join("..", "README.md"))
	paths := make([]string, 0, len(direct))
	for mod, version := range direct {
		paths = append(paths, mod)
		row, ok := rows[mod]
		switch {
		case !ok:
			t.Errorf("README.md, section License: direct dependency %s %s of go.mod is not in the table: add the row | `%s` | %s | <its license> |", mod, version, mod, version)
		case row.version != version:
			t.Errorf("README.md, section License: %s is %s in go.mod but %s in the table (check its license again)", mod, version, row.version)
		}
	}
	for mod := range rows {
		if _, ok := direct[mod]; !ok {
			t.Errorf("README.md, section License: %s is in the table but not a direct dependency in go.mod: remove its row", mod)
		}
	}
	sort.Strings(paths)

	// Each module's directory in the module cache, from the go command.
	out, err := exec.Command("go", append([]string{"list", "-m", "-json"}, paths...)...).Output()
	if err != nil {
		t.Fatalf("go list -m -json: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct{ Path, Dir string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -m -json: %v", err)
		}
		row, ok := rows[m.Path]
		if !ok {
			continue
		}
		if m.Dir == "" {
			t.Errorf("%s is not in the module cache (go mod download %s): cannot check its license", m.Path, m.Path)
			continue
		}
		got, err := moduleLicenses(m.Dir)
		if err != nil {
			t.Errorf("%s: %v", m.Path, err)
			continue
		}
		want := append([]string(nil), row.licenses...)
		sort.Strings(want)
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("README.md, section License: %s is %q, but its LICENSE file holds %q", m.Path, strings.Join(row.licenses, ", "), strings.Join(got, ", "))
		}
	}

	lic, err := os.ReadFile(filepath.Join("..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := moduleLicenses(".."); strings.Join(ids, ",") != "Apache-2.0" {
		t.Errorf("LICENSE holds %v, want the Apache License 2.0 alone", ids)
	}
	for _, want := range []string{"TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS", "Copyright 2026 The consumerd Authors"} {
		if !bytes.Contains(lic, []byte(want)) {
			t.Errorf("LICENSE lacks %q (the full Apache-2.0 text with the project's copyright line)", want)
		}
	}
}
