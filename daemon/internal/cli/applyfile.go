package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
	"sigs.k8s.io/yaml"
)

// parseApplyFile decodes a YAML or JSON list of shard specs. Each entry is
// a spec as stored in etcd, plus an optional `delete: true` that deletes the
// shard of that id (then only id is needed). Errors name the entry and field.
func parseApplyFile(data []byte, apps map[string]shard.App) ([]cluster.SpecEntry, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return nil, fmt.Errorf("no shard specs in file")
	}
	var raws []json.RawMessage
	if js[0] == '{' {
		// A single spec, or {"shards": [...]}.
		var wrap map[string]json.RawMessage
		if err := json.Unmarshal(js, &wrap); err != nil {
			return nil, err
		}
		if list, ok := wrap["shards"]; ok && len(wrap) == 1 {
			if err := json.Unmarshal(list, &raws); err != nil {
				return nil, fmt.Errorf("shards: want a list of shard specs: %w", err)
			}
		} else {
			raws = []json.RawMessage{js}
		}
	} else if err := json.Unmarshal(js, &raws); err != nil {
		return nil, fmt.Errorf("want a list of shard specs: %w", err)
	}
	seen := map[string]int{}
	var out []cluster.SpecEntry
	for i, raw := range raws {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("entry %d: want an object: %w", i, err)
		}
		var id string
		if r, ok := fields["id"]; ok {
			if err := json.Unmarshal(r, &id); err != nil {
				return nil, fmt.Errorf("entry %d: id: want a string", i)
			}
		}
		where := fmt.Sprintf("entry %d (shard %q)", i, id)
		if id == "" {
			where = fmt.Sprintf("entry %d", i)
		}
		del := false
		if r, ok := fields["delete"]; ok {
			if err := json.Unmarshal(r, &del); err != nil {
				return nil, fmt.Errorf("%s: delete: want true or false", where)
			}
			delete(fields, "delete")
		}
		if j, dup := seen[id]; dup && id != "" {
			return nil, fmt.Errorf("%s: id: duplicates entry %d", where, j)
		}
		seen[id] = i
		if del {
			if err := ident.Check(id); err != nil {
				return nil, fmt.Errorf("%s: id: %w", where, err)
			}
			out = append(out, cluster.SpecEntry{ID: id, Delete: true})
			continue
		}
		clean, _ := json.Marshal(fields)
		spec, err := shard.ParseSpec(clean)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := cluster.KnownApp(apps, spec.App); err != nil {
			return nil, fmt.Errorf("%s: app: %w", where, err)
		}
		out = append(out, cluster.SpecEntry{Spec: spec, ID: spec.ID})
	}
	return out, nil
}
