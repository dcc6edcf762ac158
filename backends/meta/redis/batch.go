package redismeta

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

var _ meta.BatchStore = (*Store)(nil)

// GetURIs implements meta.BatchStore with one pipeline of HGET __uri__, one per block.
func (s *Store) GetURIs(ctx context.Context, instanceID string, blockKeys []int64) ([]meta.URIRead, error) {
	out := make([]meta.URIRead, len(blockKeys))
	if len(blockKeys) == 0 {
		return out, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(blockKeys))
	for i, b := range blockKeys {
		cmds[i] = pipe.HGet(ctx, kvcm.BlockKey(instanceID, b), fieldURI)
	}
	if err := execPipeline(ctx, pipe); err != nil {
		return nil, fmt.Errorf("get __uri__ of %d blocks of instance %q: %w", len(blockKeys), instanceID, err)
	}
	for i, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case isReply(err):
			out[i].Err = fmt.Errorf("get __uri__ of %q: %w", cmd.Args()[1], err)
		case err != nil:
			return nil, fmt.Errorf("get __uri__ of %d blocks of instance %q: %w", len(blockKeys), instanceID, err)
		case v != "":
			out[i].URI = []byte(v)
		}
	}
	return out, nil
}

// CASMany implements meta.BatchStore: casScript for every write, in one pipeline.
func (s *Store) CASMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]error, error) {
	return s.runMany(ctx, "cas", casScript, instanceID, writes)
}

// CADMany implements meta.BatchStore: cadScript for every write, in one pipeline.
func (s *Store) CADMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]error, error) {
	return s.runMany(ctx, "cad", cadScript, instanceID, writes)
}

// runMany checks every write as run does, then sends the valid ones as one pipeline of
// EVALSHA. Writes that answer NOSCRIPT (a restarted server, SCRIPT FLUSH) did not run, and go
// again as EVAL in a second pipeline, which also caches the script: redis.Script.Run's
// fallback, per item.
func (s *Store) runMany(ctx context.Context, op string, script *redis.Script, instanceID string, writes []meta.CondWrite) ([]error, error) {
	errs := make([]error, len(writes))
	keys := make([]string, len(writes))
	send := make([]int, 0, len(writes))
	for i, w := range writes {
		keys[i] = kvcm.BlockKey(instanceID, w.BlockKey)
		switch {
		case s.dryRun:
			// DESIGN §8.8: refused before anything is sent.
			errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], meta.ErrDryRun)
		case len(w.Expected) == 0:
			errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], errEmptyExpected)
		case op == "cas" && len(w.Next) == 0:
			errs[i] = fmt.Errorf("cas %q: empty new __uri__ (use CAD to delete)", keys[i])
		default:
			send = append(send, i)
		}
	}
	for pass := 0; len(send) > 0; pass++ {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.Cmd, len(send))
		for j, i := range send {
			args := []string{keys[i]}
			if pass == 0 {
				cmds[j] = script.EvalSha(ctx, pipe, args, writes[i].Expected, writes[i].Next)
			} else {
				cmds[j] = script.Eval(ctx, pipe, args, writes[i].Expected, writes[i].Next)
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
			case err == nil:
				errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], meta.ErrConflict)
			case pass == 0 && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, i)
			case isReply(err):
				errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], err)
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
	return errs, nil
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
