package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// floors is the map of the tree in CONTRIBUTING.md, from the bottom floor up: a package
// imports only packages of lower floors and, on its own floor, those listed before it, unless
// the floor keeps its packages apart (the stages: none imports another). An entry ending in
// "/..." names every package below it. A package of the product the map does not name fails
// the test, so the map and the tree change together.
var floors = []struct {
	entries []string
	apart   bool
}{
	{entries: []string{"internal/..."}},
	{entries: []string{"kvcm"}},
	{entries: []string{"subjects", "backends/guard", "backends/storage", "backends/meta", "backends/meta/redis",
		"backends/guard/redisguard"}},
	{entries: []string{"pipeline"}},
	{entries: []string{"pipeline/scanner", "pipeline/prober", "pipeline/deleter", "pipeline/sweep"}, apart: true},
	{entries: []string{"config", "jsmetrics", "natsembed", "deploy/privileges"}},
	{entries: []string{"app", "ops"}},
	{entries: []string{"cli", "cmd/..."}},
}

// harness is what is not product: it may import anything, and the product imports none of
// it but the seeder and the demo, which `kvcm-gc seed` and `kvcm-gc demo` run.
var (
	harness        = []string{"tools/...", "test", "deploy", "docs"}
	productImports = map[string]bool{"tools/seed": true, "tools/demo": true}
)

// place is where p stands in entries: its floor and its entry's index in the listing, or
// ok false.
func place(p string) (floor, index int, ok bool) {
	i := 0
	for f, row := range floors {
		for _, entry := range row.entries {
			if matches(entry, p) {
				return f, i, true
			}
			i++
		}
	}
	return 0, 0, false
}

func matches(entry, p string) bool {
	if dir, ok := strings.CutSuffix(entry, "/..."); ok {
		return p == dir || strings.HasPrefix(p, dir+"/")
	}
	return p == entry
}

func isHarness(p string) bool {
	for _, entry := range harness {
		if matches(entry, p) {
			return true
		}
	}
	return false
}

// TestImportFloors: no import of the product runs up the floors of CONTRIBUTING.md's map, and
// the product imports no harness but the seeder and the demo.
func TestImportFloors(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	require.NoError(t, err, "go list")
	var bad []string
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, ok := strings.CutPrefix(fields[0], module+"/")
		if !ok || isHarness(pkg) {
			continue
		}
		floor, index, ok := place(pkg)
		if !ok {
			bad = append(bad, pkg+": not on the map")
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			imp, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if isHarness(imp) {
				if !productImports[imp] {
					bad = append(bad, pkg+" imports the harness "+imp)
				}
				continue
			}
			f, i, ok := place(imp)
			switch {
			case !ok:
				bad = append(bad, pkg+" imports "+imp+", which is not on the map")
			case f > floor || (f == floor && i > index):
				bad = append(bad, pkg+" imports "+imp+", which stands above it")
			case f == floor && i != index && floors[f].apart:
				bad = append(bad, pkg+" imports "+imp+", which its floor keeps apart")
			}
		}
	}
	require.Greater(t, checked, 30, "the listing holds the product's packages")
	require.Empty(t, bad, "imports against the map of the tree (CONTRIBUTING.md)")
}
