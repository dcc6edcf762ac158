// Package version is the identity of a kvcm-gc build: its version, VCS revision and build
// time, and the Go version that built it.
//
// The Makefile sets Version, Revision and BuildTime at link time:
//
//	go build -ldflags "-X github.com/kvcm-gc/kvcm-gc/internal/version.Version=v1.2.3 \
//	  -X github.com/kvcm-gc/kvcm-gc/internal/version.Revision=<commit> \
//	  -X github.com/kvcm-gc/kvcm-gc/internal/version.BuildTime=2006-01-02T15:04:05Z"
//
// A build without them (go build, go install, go run) falls back on what the Go toolchain
// recorded in the binary: the module version and, when it built from a VCS checkout, the
// revision, its time and whether the tree was modified.
package version

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at link time with -ldflags -X (see the package comment); empty means unknown.
var (
	// Version is the release version, e.g. v1.2.3 or the output of git describe.
	Version string
	// Revision is the VCS commit the build was made from.
	Revision string
	// BuildTime is when the binary was built, RFC 3339 in UTC.
	BuildTime string
)

// Unknown stands for what neither the link flags nor the build info tell.
const Unknown = "unknown"

// Info is the identity of the running build.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	BuildTime string `json:"build_time"`
	GoVersion string `json:"go_version"`
}

// Get returns the running build's identity: the link-time values where set, else the build
// info's, else Unknown ("(devel)" for the version of a build outside a module version).
func Get() Info {
	return resolve(Version, Revision, BuildTime, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// resolve merges the link-time values with the build info bi (nil when the binary has none).
func resolve(version, revision, buildTime string, bi *debug.BuildInfo) Info {
	i := Info{Version: version, Revision: revision, BuildTime: buildTime, GoVersion: runtime.Version()}
	if bi != nil {
		if i.Version == "" {
			i.Version = bi.Main.Version
		}
		var vcsRev, vcsTime string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if i.Revision == "" && vcsRev != "" {
			i.Revision = vcsRev
			if modified {
				i.Revision += "-dirty"
			}
		}
		if i.BuildTime == "" {
			// The commit's time: the toolchain records no build time.
			i.BuildTime = vcsTime
		}
	}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	if i.Revision == "" {
		i.Revision = Unknown
	}
	if i.BuildTime == "" {
		i.BuildTime = Unknown
	}
	return i
}

// String is the one-line form, e.g. "v1.2.3 (revision 0123abcd, built 2006-01-02T15:04:05Z, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, built %s, %s)", i.Version, i.Revision, i.BuildTime, i.GoVersion)
}

// LogValue logs the identity as a group: version, revision, build_time, go.
func (i Info) LogValue() slog.Value {
	return slog.GroupValue(slog.String("version", i.Version), slog.String("revision", i.Revision),
		slog.String("build_time", i.BuildTime), slog.String("go", i.GoVersion))
}

// Write prints what `version` and `--version` show: prog and the version, then the revision,
// build time and Go version, one per line.
func (i Info) Write(w io.Writer, prog string) {
	fmt.Fprintf(w, "%s %s\nrevision:   %s\nbuild time: %s\ngo version: %s\n", prog, i.Version,
		i.Revision, i.BuildTime, i.GoVersion)
}

// NewCollector returns the kvcm_gc_build_info gauge: 1, labelled with the build's version,
// revision and Go version, so a dashboard can tell which build every process runs.
func NewCollector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kvcm_gc_build_info",
		Help:        "Always 1; the labels name the build: version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
