package scanner

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestScannerRequires: a scanner missing a collaborator it cannot run without, or given a bad
// configuration, is refused at construction, with what is wrong named.
func TestScannerRequires(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() error
		want []string
	}{
		{"scanner", func() error { _, err := New(DefaultConfig(), Deps{}); return err },
			[]string{"scanner: lease TTL must be > 0"}},
		{"scanner without JetStream", func() error {
			_, err := New(DefaultConfig(), Deps{LeaseTTL: time.Second})
			return err
		}, []string{"scanner: no JetStream context"}},
		{"scanner of a bad configuration", func() error {
			_, err := New(Config{}, Deps{LeaseTTL: time.Second})
			return err
		}, []string{"scan_batch_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testenv.RequireRefused(t, tc.new(), tc.want...) })
	}
}

// TestScannerNilMetrics: a scanner built without metrics counts on a set registered nowhere
// instead of panicking at its first count.
func TestScannerNilMetrics(t *testing.T) {
	s, err := New(DefaultConfig(), Deps{LeaseTTL: time.Second, JS: struct{ jetstream.JetStream }{}})
	require.NoError(t, err)
	require.NotNil(t, s.metrics)
	require.NotPanics(t, func() { s.metrics.opError("publish"); s.metrics.ScanRounds.Inc() })
}
