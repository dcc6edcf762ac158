package version

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name                string
		version, rev, built string
		bi                  *debug.BuildInfo
		want                Info
	}{
		{"link flags win", "v1.2.3", "abc", "2026-05-06T07:08:09Z", vcs,
			Info{Version: "v1.2.3", Revision: "abc", BuildTime: "2026-05-06T07:08:09Z"}},
		{"build info", "", "", "", vcs,
			Info{Version: "v0.3.0", Revision: "0123456789abcdef-dirty", BuildTime: "2026-01-02T03:04:05Z"}},
		{"link version, vcs revision", "v1.2.3", "", "", vcs,
			Info{Version: "v1.2.3", Revision: "0123456789abcdef-dirty", BuildTime: "2026-01-02T03:04:05Z"}},
		{"no vcs (-buildvcs=false, go run)", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", Revision: Unknown, BuildTime: Unknown}},
		{"no build info", "", "", "", nil, Info{Version: "(devel)", Revision: Unknown, BuildTime: Unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.GoVersion = runtime.Version()
			require.Equal(t, tc.want, resolve(tc.version, tc.rev, tc.built, tc.bi))
		})
	}
}

func TestWrite(t *testing.T) {
	var b bytes.Buffer
	Info{Version: "v1.2.3", Revision: "abc", BuildTime: "2026-05-06T07:08:09Z", GoVersion: "go1.26.8"}.Write(&b, "kvcm-gc")
	require.Equal(t, "kvcm-gc v1.2.3\nrevision:   abc\nbuild time: 2026-05-06T07:08:09Z\ngo version: go1.26.8\n", b.String())
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	require.Equal(t, "kvcm_gc_build_info", mfs[0].GetName())
	require.Len(t, mfs[0].GetMetric(), 1)
	m := mfs[0].GetMetric()[0]
	require.Equal(t, 1.0, m.GetGauge().GetValue())
	labels := map[string]string{}
	for _, lp := range m.GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	i := Get()
	require.Equal(t, map[string]string{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion}, labels)
}

// TestLinkFlags builds kvcm-gc with the link flags the Makefile passes and runs its
// --version: a misspelt -X path would be ignored silently by the linker.
func TestLinkFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	bin := filepath.Join(t.TempDir(), "kvcm-gc")
	const pkg = "github.com/kvcm-gc/kvcm-gc/internal/version"
	build := exec.Command(goBin, "build", "-o", bin, "-ldflags",
		"-X "+pkg+".Version=v9.8.7 -X "+pkg+".Revision=feedface -X "+pkg+".BuildTime=2026-05-06T07:08:09Z",
		"github.com/kvcm-gc/kvcm-gc/cmd/kvcm-gc")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
		require.Equal(t, "kvcm-gc v9.8.7\nrevision:   feedface\nbuild time: 2026-05-06T07:08:09Z\ngo version: "+runtime.Version()+"\n", string(out), args)
	}
}
