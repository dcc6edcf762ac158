package redismeta

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// errEmptyExpected: a conditional write needs the bytes it read; an empty expected value
// would match a present-but-empty field, which KVCM treats as absent.
var errEmptyExpected = errors.New("empty expected value")

// ReadBlocks implements meta.Store with one pipeline of HGETALL, one per block.
func (s *Store) ReadBlocks(ctx context.Context, instanceID string, blockKeys []int64) ([]meta.BlockRead, error) {
	out := make([]meta.BlockRead, len(blockKeys))
	if len(blockKeys) == 0 {
		return out, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(blockKeys))
	for i, b := range blockKeys {
		out[i].Entry = meta.Entry{Key: kvcm.BlockKey(instanceID, b), Instance: instanceID, BlockKey: b}
		cmds[i] = pipe.Do(ctx, "hgetall", out[i].Entry.Key)
	}
	if err := execPipeline(ctx, pipe); err != nil {
		return nil, fmt.Errorf("read %d blocks of instance %q: %w", len(blockKeys), instanceID, err)
	}
	for i, cmd := range cmds {
		r := &out[i]
		exists, err := readEntry(cmd, &r.Entry)
		switch {
		case isReply(err):
			r.Err = fmt.Errorf("read %q: %w", r.Entry.Key, err)
		case err != nil:
			return nil, fmt.Errorf("read %d blocks of instance %q: %w", len(blockKeys), instanceID, err)
		case exists && s.wrongDB(r.Entry.Layout):
			r.Err = fmt.Errorf("read %q: a %s-layout key in db %d, where no KVCM of that layout keeps its blocks: %w",
				r.Entry.Key, r.Entry.Layout, s.db, meta.ErrLayout)
		default:
			r.Exists = exists
		}
	}
	return out, nil
}

// CASMany implements meta.Store: one script per write, in one pipeline.
func (s *Store) CASMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]error, error) {
	res, err := s.runMany(ctx, "cas", instanceID, writes)
	if err != nil {
		return nil, err
	}
	return meta.Errs(res), nil
}

// CADMany implements meta.Store: one script per write, in one pipeline.
func (s *Store) CADMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]meta.CADResult, error) {
	return s.runMany(ctx, "cad", instanceID, writes)
}

// script returns the script of a write and its arguments.
func (s *Store) script(op string, w meta.CondWrite) (*redis.Script, []any, error) {
	mode := "keep"
	if s.emptyBlock == meta.EmptyBlockDelete {
		mode = "delete"
	}
	switch w.Layout {
	case kvcm.LayoutLegacy:
		if s.db != 0 {
			return nil, nil, fmt.Errorf("a legacy-layout key in db %d, where no KVCM of that "+
				"layout keeps its blocks: %w", s.db, meta.ErrLayout)
		}
		if op == "cas" {
			if len(w.Next) == 0 {
				return nil, nil, errors.New("empty new __uri__ (use CAD to delete)")
			}
			return casLegacyScript, []any{w.Expected, w.Next}, nil
		}
		return cadLegacyScript, []any{w.Expected, w.Next, mode}, nil
	case kvcm.LayoutLocation:
		if w.Location == "" {
			return nil, nil, errors.New("no location id")
		}
		field := kvcm.LocationField(w.Location)
		if op == "cas" {
			if len(w.Next) == 0 {
				return nil, nil, fmt.Errorf("empty new value of %s (use CAD to delete)", field)
			}
			return casLocationScript, []any{field, w.Expected, w.Next}, nil
		}
		if len(w.Next) != 0 {
			return nil, nil, fmt.Errorf("cad of %s with a new value: a location field is only removed", field)
		}
		return cadLocationScript, []any{field, w.Expected, mode}, nil
	}
	return nil, nil, fmt.Errorf("no conditional write in the %s layout", w.Layout)
}

// runMany checks every write, then sends the valid ones as one pipeline of EVALSHA. Writes
// that answer NOSCRIPT (a restarted server, SCRIPT FLUSH) did not run, and go again as EVAL
// in a second pipeline, which also caches the script: redis.Script.Run's fallback, per item.
func (s *Store) runMany(ctx context.Context, op, instanceID string, writes []meta.CondWrite) ([]meta.CADResult, error) {
	res := make([]meta.CADResult, len(writes))
	keys := make([]string, len(writes))
	scripts := make([]*redis.Script, len(writes))
	args := make([][]any, len(writes))
	send := make([]int, 0, len(writes))
	for i, w := range writes {
		keys[i] = kvcm.BlockKey(instanceID, w.BlockKey)
		var err error
		scripts[i], args[i], err = s.script(op, w)
		switch {
		case s.dryRun:
			// DESIGN §8.8: refused before anything is sent.
			res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], meta.ErrDryRun)
		case len(w.Expected) == 0:
			res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], errEmptyExpected)
		case err != nil:
			res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], err)
		default:
			send = append(send, i)
		}
	}
	for pass := 0; len(send) > 0; pass++ {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.Cmd, len(send))
		for j, i := range send {
			k := []string{keys[i]}
			if pass == 0 {
				cmds[j] = scripts[i].EvalSha(ctx, pipe, k, args[i]...)
			} else {
				cmds[j] = scripts[i].Eval(ctx, pipe, k, args[i]...)
			}
		}
		if err := execPipeline(ctx, pipe); err != nil {
			return nil, fmt.Errorf("%s %d blocks of instance %q: %w", op, len(send), instanceID, err)
		}
		var again []int
		for j, i := range send {
			n, err := cmds[j].Int()
			switch {
			case err == nil && n == 1:
			case err == nil && n == 2:
				res[i].KeyDeleted = true
			case err == nil && n == -1:
				res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], meta.ErrLayout)
			case err == nil:
				res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], meta.ErrConflict)
			case pass == 0 && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, i)
			case isReply(err):
				res[i].Err = fmt.Errorf("%s %q: %w", op, keys[i], err)
			default:
				// No answer for this write: it may have run. Nothing of the batch is certain.
				return nil, fmt.Errorf("%s %d blocks of instance %q: %w", op, len(send), instanceID, err)
			}
		}
		if len(again) > 0 {
			s.log.DebugContext(ctx, "script not loaded, falling back to eval", "op", op, "writes", len(again))
		}
		send = again
	}
	return res, nil
}

// execPipeline runs pipe and returns an error when the pipeline failed as a whole: no
// connection, authentication refused. go-redis then leaves its commands without an error or a
// value, which would read as absent fields; such a pipeline must fail, not look empty. When
// the commands were sent, each carries its own result (a network failure sets it on every
// one) and nil is returned: the caller judges each command.
func execPipeline(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return err
}

// isReply reports whether err is the server's answer to one command (WRONGTYPE, NOPERM,
// OOM, a script's error reply), as opposed to a failure to get an answer at all.
func isReply(err error) bool {
	var rerr redis.Error
	return err != nil && errors.As(err, &rerr)
}
