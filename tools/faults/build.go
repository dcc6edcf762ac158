package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Stage binaries the suite runs.
var stageCommands = []string{"scanner", "prober", "deleter"}

// ModuleRoot returns the directory of the go.mod of the working directory's module.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("find the module: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// LeakyStageBin is the name of the stage command with a planted leak (the soak's test of
// itself), built only when named.
const LeakyStageBin = "leakystage"

// Build builds the named commands of ./cmd (and LeakyStageBin) into dir and returns their paths by name: by
// default the three stage binaries, the sweep's two and nats-server (from the nats-server
// module the project requires), whose processes the cluster scenario kills. The go command's
// build cache makes a repeated build cheap.
func Build(ctx context.Context, dir string, names ...string) (map[string]string, error) {
	if len(names) == 0 {
		names = append(append(slices.Clone(stageCommands), sweepCommands...), natsServerBin)
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	out := map[string]string{}
	for _, n := range names {
		switch n {
		case natsServerBin:
			args = append(args, "github.com/nats-io/nats-server/v2")
		case LeakyStageBin:
			args = append(args, "./tools/faults/cmd/"+n)
		default:
			args = append(args, "./cmd/"+n)
		}
		out[n] = filepath.Join(dir, n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", strings.Join(names, " "), err, stderr.String())
	}
	return out, nil
}
