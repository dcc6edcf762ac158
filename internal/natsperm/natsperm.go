// Package natsperm turns a NATS server's refusal of a publish or a subscription for lack of
// permission into an error of the work that needed it.
//
// The server answers a refused publish with an asynchronous -ERR and drops the message: a
// request (every JetStream API call is one) then waits for a reply that never comes and fails
// as a timeout, and a retry loop retries it for as long as it may. Nothing about waiting
// cures a missing permission. A Watcher sees the -ERR on the connection and ends, at once,
// the contexts guarding the subjects it names, with a *Violation as their cause: the work
// fails with an error naming the subject and the identity that was refused.
package natsperm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// Operations a server refuses.
const (
	OpPublish   = "publish to"
	OpSubscribe = "subscribe to"
	OpReply     = "publish with reply subject"
)

// Violation is a publish or a subscription the server refused for lack of permission.
type Violation struct {
	Identity string // who was refused, as Watch was told (e.g. user "kvcm-gc-scanner")
	Op       string // OpPublish, OpSubscribe or OpReply
	Subject  string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("nats permissions violation: %s may not %s %q (its NATS permissions lack it: docs/security.md)",
		v.Identity, v.Op, v.Subject)
}

// Is makes a Violation match nats.ErrPermissionViolation.
func (v *Violation) Is(target error) bool { return target == nats.ErrPermissionViolation }

// violationRe reads the server's text: `Permissions Violation for Publish to "s"`,
// `... for Subscription to "s"` (maybe `using queue "q"`), `... for Publish with Reply of "s"`.
var violationRe = regexp.MustCompile(
	`Permissions Violation for (Publish to|Subscription to|Publish with Reply of) "([^"]*)"`,
)

// Parse reads the refusal err reports (an asynchronous error of the connection), for identity;
// ok is false for any other error.
func Parse(err error, identity string) (v *Violation, ok bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil, false
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return &Violation{Identity: identity, Op: OpPublish, Subject: "(unknown: " + err.Error() + ")"}, true
	}
	ops := map[string]string{"Publish to": OpPublish, "Subscription to": OpSubscribe, "Publish with Reply of": OpReply}
	op := ops[m[1]]
	return &Violation{Identity: identity, Op: op, Subject: m[2]}, true
}

// Watcher watches one connection for refusals and ends the contexts that guard them.
type Watcher struct {
	identity string
	inbox    string // the connection's reply inbox prefix, with its trailing dot

	mu     sync.Mutex
	guards map[*guard]struct{}
	// noInbox is the refusal of the reply inbox's subscription: no request of the connection
	// gets an answer after it, so it ends every context guarded later too.
	noInbox *Violation
}

type guard struct {
	patterns []string
	cancel   context.CancelCauseFunc
}

// New returns a Watcher of a connection made as identity (e.g. `user "kvcm-gc-scanner"`),
// which names who was refused in the errors; Attach gives it the connection. Contexts can be
// guarded before, so that the work of a command is guarded from its start.
func New(identity string) *Watcher {
	return &Watcher{identity: identity, inbox: nats.InboxPrefix, guards: map[*guard]struct{}{}}
}

// Watch is New and Attach.
func Watch(nc *nats.Conn, identity string) *Watcher {
	w := New(identity)
	w.Attach(nc)
	return w
}

// Attach starts watching nc, calling the error handler it had before for every error as well.
func (w *Watcher) Attach(nc *nats.Conn) {
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = nats.InboxPrefix
	}
	w.mu.Lock()
	w.inbox = strings.TrimSuffix(prefix, ".") + "."
	w.mu.Unlock()
	next := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		w.see(err)
		if next != nil {
			next(c, s, err)
		}
	})
}

// Identity is who the watched connection signed in as.
func (w *Watcher) Identity() string { return w.identity }

// Guard returns a context that ends, with the *Violation as its cause (context.Cause), when
// the server refuses a publish to, or a subscription on, a subject matching one of patterns
// (NATS wildcards: "*" one token, ">" the rest; ">" alone guards everything). A refused
// subscription on the connection's reply inbox ends every guarded context, those guarded
// after it too: no request gets an answer without it. A nil Watcher guards nothing.
func (w *Watcher) Guard(ctx context.Context, patterns ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if w == nil {
		return ctx, func() { cancel(nil) }
	}
	g := &guard{patterns: patterns, cancel: cancel}
	w.mu.Lock()
	if w.noInbox != nil {
		cancel(w.noInbox)
	}
	w.guards[g] = struct{}{}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.guards, g)
		w.mu.Unlock()
		cancel(nil)
	}
}

func (w *Watcher) see(err error) {
	v, ok := Parse(err, w.identity)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	everything := v.Op == OpSubscribe && strings.HasPrefix(v.Subject, w.inbox)
	if everything && w.noInbox == nil {
		w.noInbox = v
	}
	for g := range w.guards {
		if everything || matchesAny(g.patterns, v.Subject) {
			g.cancel(v)
		}
	}
}

// Refused returns the *Violation that ended ctx, or nil when ctx has not ended for one.
func Refused(ctx context.Context) *Violation {
	var v *Violation
	if errors.As(context.Cause(ctx), &v) {
		return v
	}
	return nil
}

// Cause returns, in place of err, the *Violation that ended ctx when ctx ended for one (err is
// then the context's end as the work saw it: canceled, a deadline, a timeout), keeping what
// err said the work was doing ("read checkpoints: <the violation>"); err otherwise.
func Cause(ctx context.Context, err error) error {
	if err == nil || errors.As(err, new(*Violation)) {
		return err
	}
	v := Refused(ctx)
	if v == nil {
		return err
	}
	msg := err.Error()
	for _, end := range []error{context.Canceled, context.DeadlineExceeded, nats.ErrTimeout} {
		if doing, ok := strings.CutSuffix(msg, end.Error()); ok && doing != "" {
			return fmt.Errorf("%s%w", doing, v)
		}
	}
	return v
}

func matchesAny(patterns []string, subject string) bool {
	for _, p := range patterns {
		if Matches(p, subject) {
			return true
		}
	}
	return false
}

// Matches reports whether subject matches the NATS subject pattern ("*" matches one token,
// a final ">" one or more).
func Matches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">" && i == len(pt)-1:
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}
