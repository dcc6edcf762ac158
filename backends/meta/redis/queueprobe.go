package redismeta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
)

// ProbeQueue sends TIME and measures two things: the round trip (rtt, on this host's clock)
// and how long the command took from being sent until the server ran it (oneWay: the server's
// clock at the command less this host's clock at the send). oneWay holds the wait in Redis's
// event loop behind whatever was queued there, which is what a serving request waits too,
// and not the time this process took to read the reply: on a busy scanner host that part of
// a PING's round trip is most of its noise, and it grows with the walk's own work. oneWay also
// holds the network's one way and the two clocks' offset: constant while the clocks hold, so
// only its changes mean anything (the pacer compares it with itself, measured while the walk
// holds). A user without +time gets meta.ErrProbeRefused, and the caller falls back to PING.
func (s *Store) ProbeQueue(ctx context.Context) (rtt, oneWay time.Duration, err error) {
	sent := time.Now()
	cmd := s.c.Time(ctx)
	got := time.Now()
	if err := cmd.Err(); err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return 0, 0, fmt.Errorf("%w: TIME: %w", meta.ErrProbeRefused, err)
		}
		return 0, 0, err
	}
	server := cmd.Val()
	if server.IsZero() {
		return 0, 0, errors.New("TIME answered no time")
	}
	return got.Sub(sent), server.Sub(sent), nil
}

var _ interface {
	ProbeQueue(ctx context.Context) (time.Duration, time.Duration, error)
} = (*Store)(nil)
