package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time (-ldflags "-X github.com/kvcm-gc/kvcm-gc/internal/cli.version=v1.2.3");
// without it the module version and VCS revision recorded by the build are shown.
var version string

// Version describes the build: version, revision (with "+dirty" for a modified tree), Go version.
func Version() string {
	v, rev := version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty && rev != "" {
			rev += "+dirty"
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev != "" {
		v += " " + rev
	}
	return v + " " + runtime.Version()
}

// WriteVersion prints the version line of prog.
func WriteVersion(w io.Writer, prog string) {
	fmt.Fprintf(w, "%s %s\n", prog, Version())
}
