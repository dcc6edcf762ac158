package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// module is this module's path, the prefix of its packages in go list's output.
const module = "github.com/kvcm-gc/kvcm-gc"

// TestBinariesLinkNoTesting: the production binaries (every command under cmd/) link neither
// the standard testing package nor the harness beyond what the seed and demo commands run
// (the seeder, the demo and the server starters of tools/servers). A test helper imported by
// product code would put testing's flags and its init into every process an SRE runs.
func TestBinariesLinkNoTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/...").Output()
	require.NoError(t, err, "go list -deps")
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"/pipeline", "the listing is of the binaries' dependencies")

	allowed := map[string]bool{module + "/tools/seed": true, module + "/tools/demo": true, module + "/tools/servers": true}
	var bad []string
	for _, p := range deps {
		switch {
		case p == "testing" || strings.HasPrefix(p, "testing/"):
			bad = append(bad, p)
		case strings.HasPrefix(p, module+"/tools/") && !allowed[p]:
			bad = append(bad, p)
		case strings.Contains(p, "testify"):
			bad = append(bad, p)
		}
	}
	require.Empty(t, bad, "packages the production binaries must not link")
}
