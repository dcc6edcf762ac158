package seed

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// WriteFile writes the manifest as JSON to path, so a later run (another process, another
// day) can verify a collection against it.
func (m *Manifest) WriteFile(path string) error {
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write manifest %s: %w", path, err)
	}
	return nil
}

// ReadManifest reads a manifest written by WriteFile.
func ReadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode manifest %s: %w", path, err)
	}
	return &m, nil
}

// LayoutLines describes the manifest's keys by layout, one line each: the collected
// instances' layouts (location, legacy, ambiguous), then the skipped groups.
func (m *Manifest) LayoutLines() []string {
	var out []string
	for _, layout := range []string{kvcm.LayoutLocation.String(), kvcm.LayoutLegacy.String(), kvcm.LayoutAmbiguous.String()} {
		c, ok := m.Layouts[layout]
		if !ok {
			continue
		}
		switch layout {
		case kvcm.LayoutAmbiguous.String():
			out = append(out, fmt.Sprintf("%-12s %6d keys, %7d locations: both layouts, none may be judged", layout, c.Keys, c.Locations))
		default:
			out = append(out, fmt.Sprintf("%-12s %6d keys, %7d locations, %6d garbage; %d keys lose every location",
				layout, c.Keys, c.Locations, c.Garbage, c.AllGarbage))
		}
	}
	for _, g := range slices.Sorted(maps.Keys(m.Skipped)) {
		c := m.Skipped[g]
		out = append(out, fmt.Sprintf("%-12s %6d keys, %7d locations that look like garbage: a skipped group's", g, c.Keys, c.Locations))
	}
	return out
}
