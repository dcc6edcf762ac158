package procstat

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHWM(t *testing.T) {
	v, ok := parseStatus("Name:\tx\nVmPeak:\t  900 kB\nVmHWM:\t   1234 kB\nVmRSS:\t 1000 kB\n", "VmHWM:")
	require.True(t, ok)
	require.Equal(t, int64(1234*1024), v)
	for _, bad := range []string{"", "VmRSS: 5 kB\n", "VmHWM: lots kB\n"} {
		_, ok := parseStatus(bad, "VmHWM:")
		require.False(t, ok, bad)
	}
}

func TestParseRSS(t *testing.T) {
	v, ok := parseStatus("Name:\tx\nVmHWM:\t  900 kB\nVmRSS:\t   1234 kB\n", "VmRSS:")
	require.True(t, ok)
	require.Equal(t, int64(1234<<10), v)
	_, ok = parseStatus("VmHWM: 5 kB\n", "VmRSS:")
	require.False(t, ok)
}

func TestPeakOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	var p Peak
	done := make(chan struct{})
	go func() { time.Sleep(30 * time.Millisecond); close(done) }()
	p.Watch(os.Getpid(), 5*time.Millisecond, done)
	require.Greater(t, p.Load(), int64(1<<20), "a Go test binary holds more than 1 MiB")
	_, ok := PeakRSS(-1)
	require.False(t, ok)
}
