package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/kube"
)

// step is one command of a console block in the docs: what follows "$ " (with its continued
// lines and here-document) and the lines shown after it, which it must print.
type step struct {
	line    int // of the "$ " line in the section
	command string
	output  []string
}

// consoleSteps parses the ```console blocks of a markdown text into steps. A command goes on
// over lines ending in a backslash and over a here-document up to its delimiter; every other
// line up to the next command or the block's end is its output.
func consoleSteps(text string) []step {
	var steps []step
	lines := strings.Split(text, "\n")
	inConsole := false
	heredoc := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case !inConsole && strings.HasPrefix(l, "```console"):
			inConsole = true
			continue
		case !inConsole:
			continue
		case heredoc == "" && strings.HasPrefix(l, "```"):
			inConsole = false
			continue
		}
		if heredoc != "" {
			s := &steps[len(steps)-1]
			s.command += "\n" + l
			if l == heredoc {
				heredoc = ""
			}
			continue
		}
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			s := step{line: i + 1, command: cmd}
			for strings.HasSuffix(s.command, `\`) && i+1 < len(lines) {
				i++
				s.command += "\n" + lines[i]
			}
			if m := heredocRE.FindStringSubmatch(s.command); m != nil {
				heredoc = m[1]
			}
			steps = append(steps, s)
			continue
		}
		if len(steps) > 0 {
			steps[len(steps)-1].output = append(steps[len(steps)-1].output, l)
		}
	}
	return steps
}

var heredocRE = regexp.MustCompile(`<<-?'?([A-Za-z_]+)'?\s*$`)

// Output that differs from run to run: ages and durations, dates, and the whitespace of
// columns aligned to them.
var (
	durationRE = regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h|d)(\d+(ms|s|m))?\b`)
	dateRE     = regexp.MustCompile(`\b[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\b`)
	spaceRE    = regexp.MustCompile(`\s+`)
)

func normalizeOutput(l string) string {
	l = dateRE.ReplaceAllString(l, "<date>")
	l = durationRE.ReplaceAllString(l, "<t>")
	return strings.TrimSpace(spaceRE.ReplaceAllString(l, " "))
}

// matchOutput reports whether got is what the docs show: line by line after normalizing,
// where a line "…" of the docs stands for any number of lines.
func matchOutput(doc, got []string) bool {
	norm := func(ls []string) []string {
		var out []string
		for _, l := range ls {
			if n := normalizeOutput(l); n != "" {
				out = append(out, n)
			}
		}
		return out
	}
	return matchLines(norm(doc), norm(got))
}

func matchLines(doc, got []string) bool {
	if len(doc) == 0 {
		return len(got) == 0
	}
	if doc[0] == "…" {
		for i := 0; i <= len(got); i++ {
			if matchLines(doc[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && doc[0] == got[0] && matchLines(doc[1:], got[1:])
}

func TestConsoleSteps(t *testing.T) {
	text := "intro\n```console\n$ kubectl create namespace gc\nnamespace/gc created\n$ helm install a \\\n  b --wait\nNAME: a\n\n" +
		"$ cat > v.yaml <<'EOF'\nx: 1\n$ not a command\nEOF\n```\n```sh\n$ not run\n```\n"
	steps := consoleSteps(text)
	require.Equal(t, []step{
		{line: 3, command: "kubectl create namespace gc", output: []string{"namespace/gc created"}},
		{line: 5, command: "helm install a \\\n  b --wait", output: []string{"NAME: a", ""}},
		{line: 9, command: "cat > v.yaml <<'EOF'\nx: 1\n$ not a command\nEOF"},
	}, steps)

	require.True(t, matchOutput(
		[]string{"NAME READY AGE", "kvcm-gc-deleter 2/2 12s", "…", "LAST DEPLOYED: Mon Jan  5 10:00:00 2026"},
		[]string{"NAME   READY   AGE", "kvcm-gc-deleter   2/2   3m4s", "x", "y", "LAST DEPLOYED: Sun Dec  6 21:40:00 2026"}))
	require.False(t, matchOutput([]string{"kvcm-gc-deleter 2/2 12s"}, []string{"kvcm-gc-deleter 1/2 12s"}))
	require.False(t, matchOutput([]string{"a"}, []string{"a", "b"}))
	require.True(t, matchOutput([]string{"a", "…"}, []string{"a", "b", "c"}))
}

// walkNamespace is the namespace operating.md's walk installs into.
const walkNamespace = "kvcm-gc"

// TestOperatingWalk runs every command of the console blocks of operating.md's "A first
// install, step by step" on the control plane, in order, in a directory that holds the
// chart (deploy/) and the operator's password files, and checks that each prints what the
// guide shows. The storage admin's part, the volume of the values' claim, is done before the
// claim is looked at. Commands whose output comes from kvcm-gc inside a pod (kubectl logs,
// kubectl exec) are outside the console blocks: no container runs here.
func TestOperatingWalk(t *testing.T) {
	section := docSection(t, filepath.Join("..", "docs", "operating.md"), "## A first install, step by step")
	steps := consoleSteps(section)
	require.NotEmpty(t, steps, "the walk has no console block")

	c := controlPlane.Get(t)
	helm := tool(t, "helm")
	kubectl := kube.RequireTools(t).Kubectl

	dir := t.TempDir()
	deployDir, err := filepath.Abs(".")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(deployDir, filepath.Join(dir, "deploy")))
	home := t.TempDir()
	env := append(c.Env(),
		"PATH="+filepath.Dir(helm)+string(filepath.ListSeparator)+filepath.Dir(kubectl)+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	t.Cleanup(func() {
		_, _ = c.Kubectl(context.Background(), nil, "delete", "namespace", walkNamespace, "--wait=false")
		_, _ = c.Kubectl(context.Background(), nil, "delete", "persistentvolume", "kvcm-nfs-01", "--wait=false")
	})

	fromFile := regexp.MustCompile(`--from-file=[^=\s]+=(\S+)`)
	claimMade := false
	for _, s := range steps {
		// The operator's password files: stand-ins.
		for _, m := range fromFile.FindAllStringSubmatch(s.command, -1) {
			p := filepath.Join(dir, m[1])
			if _, err := os.Stat(p); err != nil {
				require.NoError(t, os.WriteFile(p, []byte("stand-in for "+m[1]), 0o600))
			}
		}
		// The storage admin's volume and claim, once the namespace exists.
		if !claimMade && strings.Contains(s.command, "pvc") {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := c.Kubectl(ctx, strings.NewReader(walkClaim), "apply", "-f", "-")
			cancel()
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				out, err := c.Kubectl(context.Background(), nil, "-n", walkNamespace, "get", "pvc", "kvcm-nfs-01", "-o", "jsonpath={.status.phase}")
				return err == nil && string(out) == "Bound"
			}, time.Minute, 200*time.Millisecond)
			claimMade = true
		}

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", s.command)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		cancel()
		require.NoError(t, err, "operating.md walk, line %d: $ %s\n%s%s", s.line, s.command, stdout.String(), stderr.String())
		got := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
		if !matchOutput(s.output, got) {
			t.Fatalf("operating.md walk, line %d: $ %s\nprints:\n%s\nthe guide shows:\n%s", s.line, s.command, stdout.String(), strings.Join(s.output, "\n"))
		}
		t.Logf("line %d, %v: $ %s", s.line, time.Since(start).Round(time.Millisecond), strings.SplitN(s.command, "\n", 2)[0])
	}
}

// walkClaim is the volume and claim of the walk's values (storages.nfs_01), as a storage
// admin makes them. Nothing mounts it: no container runs.
const walkClaim = `apiVersion: v1
kind: PersistentVolume
metadata:
  name: kvcm-nfs-01
spec:
  capacity: {storage: 10Ti}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: /mnt/kvcm/nfs_01}
  claimRef: {namespace: kvcm-gc, name: kvcm-nfs-01}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kvcm-nfs-01
  namespace: kvcm-gc
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: kvcm-nfs-01
  resources:
    requests: {storage: 10Ti}
`
