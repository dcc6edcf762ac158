package natsperm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/natsperm"
	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.>", "a", false},
		{"a.>", "a.b", true},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"$JS.API.STREAM.INFO.S", "$JS.API.STREAM.INFO.S", true},
		{"$JS.API.STREAM.INFO.S", "$JS.API.STREAM.INFO.S2", false},
		{"$JS.API.*.*.KV_B", "$JS.API.STREAM.INFO.KV_B", true},
		{"$JS.API.*.*.KV_B.>", "$JS.API.DIRECT.GET.KV_B.$KV.B.k", true},
		{"$JS.API.*.*.KV_B.>", "$JS.API.STREAM.INFO.KV_B", false},
		{"a.b", "a", false},
	} {
		require.Equal(t, c.want, natsperm.Matches(c.pattern, c.subject), "%s ~ %s", c.pattern, c.subject)
	}
}

func TestParse(t *testing.T) {
	for text, want := range map[string]natsperm.Violation{
		`nats: permissions violation: Permissions Violation for Publish to "$JS.API.STREAM.INFO.X"`:    {Op: natsperm.OpPublish, Subject: "$JS.API.STREAM.INFO.X"},
		`nats: permissions violation: Permissions Violation for Subscription to "_INBOX.abc.*"`:        {Op: natsperm.OpSubscribe, Subject: "_INBOX.abc.*"},
		`nats: permissions violation: Permissions Violation for Subscription to "q.x" using queue "g"`: {Op: natsperm.OpSubscribe, Subject: "q.x"},
		`nats: permissions violation: Permissions Violation for Publish with Reply of "r.1"`:           {Op: natsperm.OpReply, Subject: "r.1"},
	} {
		v, ok := natsperm.Parse(wrap(text), `user "u"`)
		require.True(t, ok, text)
		want.Identity = `user "u"`
		require.Equal(t, want, *v)
		require.ErrorIs(t, v, nats.ErrPermissionViolation)
	}
	_, ok := natsperm.Parse(nats.ErrTimeout, "u")
	require.False(t, ok)
	_, ok = natsperm.Parse(nil, "u")
	require.False(t, ok)
}

// wrap builds the error nats.go hands to the error handler for a server's -ERR text.
func wrap(text string) error {
	return &textErr{text: text}
}

type textErr struct{ text string }

func (e *textErr) Error() string        { return e.text }
func (e *textErr) Is(target error) bool { return target == nats.ErrPermissionViolation }

// TestGuard: on a real server, a request to a subject the user may not publish to ends the
// contexts guarding that subject at once, with a Violation naming it and the user, while a
// context guarding other subjects keeps waiting; a refused subscription on the reply inbox
// ends every guarded context. The connection's own error handler still sees every error.
func TestGuard(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.WithNATSAccounts(natsembed.Account{Name: "A", Users: []natsembed.User{
		{Name: "u", Password: "p", Publish: &natsembed.Permission{Allow: []string{"ok.>", "_INBOX_u.>"}}, // it answers itself
			Subscribe: &natsembed.Permission{Allow: []string{"_INBOX_u.>", "ok.>"}}},
		{Name: "v", Password: "p", Publish: &natsembed.Permission{Allow: []string{"ok.>"}},
			Subscribe: &natsembed.Permission{Allow: []string{"ok.>"}}},
	}}))
	seen := make(chan error, 16)
	nc := srv.Conn(t, nats.UserInfo("u", "p"), nats.CustomInboxPrefix("_INBOX_u"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { seen <- err }))
	w := natsperm.Watch(nc, `user "u"`)
	require.Equal(t, `user "u"`, w.Identity())

	other, stopOther := w.Guard(context.Background(), "elsewhere.>")
	defer stopOther()
	ctx, stop := w.Guard(context.Background(), "denied.>")
	defer stop()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	_, err := nc.RequestWithContext(rctx, "denied.x", []byte("?"))
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "ended by the refusal, not the minute")
	err = natsperm.Cause(ctx, err)
	var v *natsperm.Violation
	require.ErrorAs(t, err, &v)
	require.Equal(t, natsperm.Violation{Identity: `user "u"`, Op: natsperm.OpPublish, Subject: "denied.x"}, *v)
	require.EqualError(t, err, `nats permissions violation: user "u" may not publish to "denied.x" (its NATS permissions lack it: docs/security.md)`)
	require.ErrorIs(t, <-seen, nats.ErrPermissionViolation, "the connection's handler still runs")
	require.NoError(t, other.Err(), "a guard of other subjects is untouched")

	// Allowed work goes on, and Cause leaves other errors alone.
	_, err = nc.Subscribe("ok.echo", func(m *nats.Msg) { _ = m.Respond([]byte("!")) })
	require.NoError(t, err)
	octx, stopOK := w.Guard(context.Background(), ">")
	defer stopOK()
	rctx, cancel = context.WithTimeout(octx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "ok.echo", nil)
	require.NoError(t, err)
	require.Equal(t, "!", string(m.Data))
	require.Equal(t, nats.ErrTimeout, natsperm.Cause(octx, nats.ErrTimeout))

	// A refused subscription ends the guards of its subject only.
	_, err = nc.SubscribeSync("other.x")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	select {
	case <-octx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a refused subscription did not end the guard of everything")
	}
	require.ErrorAs(t, context.Cause(octx), &v)
	require.Equal(t, natsperm.Violation{Identity: `user "u"`, Op: natsperm.OpSubscribe, Subject: "other.x"}, *v)
	require.NoError(t, other.Err(), "%v", context.Cause(other))

	// A connection whose reply inbox is refused gets no answer at all: every guard ends.
	nv := srv.Conn(t, nats.UserInfo("v", "p"))
	wv := natsperm.Watch(nv, `user "v"`)
	unrelated, stopUnrelated := wv.Guard(context.Background(), "unrelated")
	defer stopUnrelated()
	rctx, cancel = context.WithTimeout(unrelated, time.Minute)
	defer cancel()
	start = time.Now()
	_, err = nv.RequestWithContext(rctx, "ok.echo", nil)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.ErrorAs(t, natsperm.Cause(unrelated, err), &v)
	require.Equal(t, natsperm.OpSubscribe, v.Op)
	require.True(t, strings.HasPrefix(v.Subject, nats.InboxPrefix), v.Subject)
	require.True(t, errors.Is(context.Cause(unrelated), nats.ErrPermissionViolation))
	later, stopLater := wv.Guard(context.Background(), "unrelated")
	defer stopLater()
	require.Same(t, v, natsperm.Refused(later), "a context guarded after the inbox's refusal ends at once")
}

// TestCause: an error of work ended by a refusal becomes the refusal, keeping what the work
// was doing; other errors, and errors of contexts not ended by a refusal, stay as they are.
func TestCause(t *testing.T) {
	w := natsperm.New(`user "u"`)
	ctx, done := w.Guard(context.Background(), ">")
	defer done()
	require.Equal(t, context.Canceled, natsperm.Cause(ctx, context.Canceled), "not ended by a refusal")
	require.Nil(t, natsperm.Refused(ctx))

	nc := testenv.StartNATS(t).Conn(t)
	w.Attach(nc)
	nc.ErrorHandler()(nc, nil, wrap(`nats: permissions violation: Permissions Violation for Publish to "x.y"`))
	<-ctx.Done()
	v := natsperm.Refused(ctx)
	require.NotNil(t, v)
	require.Equal(t, "x.y", v.Subject)
	for in, want := range map[error]string{
		context.Canceled: v.Error(),
		fmt.Errorf("read checkpoints: %w", context.Canceled):     "read checkpoints: " + v.Error(),
		fmt.Errorf("open stream S: %w", nats.ErrTimeout):         "open stream S: " + v.Error(),
		fmt.Errorf("pause: %w", context.DeadlineExceeded):        "pause: " + v.Error(),
		fmt.Errorf("odd: %w (%s)", context.Canceled, "and more"): v.Error(),
	} {
		got := natsperm.Cause(ctx, in)
		require.EqualError(t, got, want)
		require.ErrorIs(t, got, nats.ErrPermissionViolation)
	}
	require.Nil(t, natsperm.Cause(ctx, nil))
}
