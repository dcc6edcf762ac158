package deploy_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/version"
)

// TestDockerfile: the image links the build's identity into the package that holds it, from
// the VERSION and REVISION build arguments, builds static binaries and runs unprivileged. The
// linker ignores a misspelt -X path silently, so the path is taken from the package itself.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	df := string(data)
	pkg := reflect.TypeFor[version.Info]().PkgPath()
	for _, want := range []string{"ARG VERSION", "ARG REVISION", "pkg=" + pkg + ";",
		"-X $pkg.Version=$VERSION", "-X $pkg.Revision=$REVISION", "-X $pkg.BuildTime=", "CGO_ENABLED=0",
		"-o /out/ ./cmd/...", "USER 65532:65532"} {
		require.Contains(t, df, want)
	}
	// Every binary the chart runs is built into /usr/local/bin.
	require.Contains(t, df, "COPY --from=build /out/ /usr/local/bin/")
	require.False(t, strings.Contains(df, "USER root") || strings.Contains(df, "USER 0"))
}
