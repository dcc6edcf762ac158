package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
)

const natsDir = "nats"

// natsFiles generates the stream and consumer definitions and create.sh from the
// configuration: the same configs subjects.Ensure would create, in the JSON the nats CLI reads
// (`nats stream add --config`, `nats consumer add --config`).
func natsFiles(t *testing.T, c config.Config) map[string][]byte {
	t.Helper()
	names, err := c.Names()
	require.NoError(t, err)
	s := c.Settings()
	require.NoError(t, s.Validate())
	top := names.Topology(s)
	files := map[string][]byte{}
	encode := func(v any) []byte {
		b, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		return append(b, '\n')
	}
	var sh bytes.Buffer
	fmt.Fprintf(&sh, `#!/bin/sh
# Generated from deploy/kubernetes/configmap.yaml by `+"`go generate ./deploy`"+`; do not edit.
#
# Creates kvcm-gc's streams, durable consumers and KV buckets for cluster %q with prefix %q,
# as a NATS user allowed to manage JetStream, for deployments whose stages run with
# jetstream.skip_ensure. Later changes: nats stream edit / nats consumer edit, or a stage run
# once without skip_ensure, which updates what the server allows and names what it refuses.
set -eu
cd "$(dirname "$0")"
`, names.Cluster, names.Prefix)
	for _, sc := range top.Streams {
		file := sc.Name + ".stream.json"
		files[file] = encode(sc)
		fmt.Fprintf(&sh, "nats stream add %s --config %s\n", sc.Name, file)
	}
	for _, sc := range top.Streams {
		cc, ok := top.Consumers[sc.Name]
		if !ok {
			continue
		}
		file := sc.Name + "." + cc.Durable + ".consumer.json"
		files[file] = encode(cc)
		fmt.Fprintf(&sh, "nats consumer add %s %s --config %s\n", sc.Name, cc.Durable, file)
	}
	for _, b := range top.Buckets {
		storage := "file"
		if b.Storage == jetstream.MemoryStorage {
			storage = "memory"
		}
		fmt.Fprintf(&sh, "nats kv add %s --history %d --storage %s --replicas %d", b.Bucket, max(b.History, 1), storage, b.Replicas)
		if b.TTL > 0 {
			fmt.Fprintf(&sh, " --ttl %s", b.TTL)
		}
		fmt.Fprintf(&sh, " --description %s\n", shellQuote(b.Description))
	}
	files["create.sh"] = sh.Bytes()
	return files
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestNATSDefinitions fails when deploy/nats differs from what the code generates from the
// ConfigMap's configuration; `go generate ./deploy` (this test with -update) rewrites it.
func TestNATSDefinitions(t *testing.T) {
	c := deployConfig(t, parseAll(t))
	want := natsFiles(t, c)
	if *update {
		old, _ := filepath.Glob(filepath.Join(natsDir, "*"))
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for name, data := range want {
			mode := os.FileMode(0o644)
			if strings.HasSuffix(name, ".sh") {
				mode = 0o755
			}
			require.NoError(t, os.WriteFile(filepath.Join(natsDir, name), data, mode))
		}
	}
	entries, err := os.ReadDir(natsDir)
	require.NoError(t, err)
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
		data, err := os.ReadFile(filepath.Join(natsDir, e.Name()))
		require.NoError(t, err)
		w, ok := want[e.Name()]
		require.True(t, ok, "%s/%s is not generated from the code: remove it or run go generate ./deploy", natsDir, e.Name())
		require.Equal(t, string(w), string(data), "%s/%s drifted from the code: run go generate ./deploy", natsDir, e.Name())
	}
	var wantNames []string
	for name := range want {
		wantNames = append(wantNames, name)
	}
	slices.Sort(wantNames)
	require.Equal(t, wantNames, have, "run go generate ./deploy")

	// The files decode to the configs Ensure creates (names, subjects, limits, consumers).
	names, err := c.Names()
	require.NoError(t, err)
	top := names.Topology(c.Settings())
	for _, sc := range top.Streams {
		var got jetstream.StreamConfig
		require.NoError(t, json.Unmarshal(want[sc.Name+".stream.json"], &got))
		require.Equal(t, sc, got)
		if cc, ok := top.Consumers[sc.Name]; ok {
			var gotc jetstream.ConsumerConfig
			require.NoError(t, json.Unmarshal(want[sc.Name+"."+cc.Durable+".consumer.json"], &gotc))
			require.Equal(t, cc, gotc)
			require.Equal(t, sc.Subjects, []string{gotc.FilterSubject}, "consumer %s filters its stream's subjects", cc.Durable)
		}
	}
	for _, want := range []string{names.BatchesStream(), names.DeletesStream(), names.EventsStream(), names.StateBucket(), names.LeaseBucket()} {
		require.Contains(t, string(want), "KVCMGC_")
		require.Contains(t, string(natsFiles(t, c)["create.sh"]), want)
	}
}
