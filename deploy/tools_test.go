package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tool returns the path of a tool the deploy tests run (helm, promtool, yq): the one the
// HELM, PROMTOOL or YQ environment variable names (make test sets them to the tools cache
// `make tools` builds), else one on PATH. Without it the test fails when REQUIRE_DEPLOY_TOOLS
// is set (make test sets it, after installing the tools) and is skipped otherwise.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p := os.Getenv(strings.ToUpper(name)); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", strings.ToUpper(name), p, err)
		}
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("REQUIRE_DEPLOY_TOOLS") != "" {
		t.Fatalf("%s is not installed: run `make tools`, then set %s (make -s tools-env prints it)", name, strings.ToUpper(name))
	}
	t.Skipf("%s is not installed (make tools installs it; make test requires it)", name)
	return ""
}

// run runs a tool and fails the test with its output when it fails.
func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}
