package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kvcm-gc/kvcm-gc/config"
)

// object is one parsed document of a deployment file.
type object struct {
	file string
	doc  map[string]any
}

func (o object) kind() string { return str(o.doc, "kind") }
func (o object) name() string { return str(o.doc, "metadata", "name") }

// parseAll parses every YAML and JSON file under deploy/ (every document of a YAML file) and
// fails on any file it cannot parse; other files (Go, shell, Dockerfile) are left out.
func parseAll(t *testing.T) []object {
	t.Helper()
	var out []object
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			dec := yaml.NewDecoder(bytes.NewReader(data))
			for {
				var doc map[string]any
				err := dec.Decode(&doc)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, "parse %s", path)
				if doc != nil {
					out = append(out, object{file: path, doc: doc})
				}
			}
		case ".json":
			var doc map[string]any
			require.NoError(t, json.Unmarshal(data, &doc), "parse %s", path)
			out = append(out, object{file: path, doc: doc})
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

// find returns the one object of a kind and name.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	var hits []object
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			hits = append(hits, o)
		}
	}
	require.Len(t, hits, 1, "%s %s", kind, name)
	return hits[0]
}

// deployConfig loads the configuration the ConfigMap carries, as a stage would.
func deployConfig(t *testing.T, objs []object) config.Config {
	t.Helper()
	cm := find(t, objs, "ConfigMap", "kvcm-gc-config")
	text := str(cm.doc, "data", "config.yaml")
	require.NotEmpty(t, text)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	c := config.Default()
	require.NoError(t, config.LoadFile(&c, path))
	// The credentials file exists in the pods only (mounted from the Secret; the Deployment
	// test checks the mount): validate the rest against a stand-in.
	creds := c.NATS.CredentialsFile
	if creds != "" {
		c.NATS.CredentialsFile = filepath.Join(t.TempDir(), "nats.creds")
		require.NoError(t, os.WriteFile(c.NATS.CredentialsFile, []byte("stand-in"), 0o600))
	}
	require.NoError(t, c.Validate())
	c.NATS.CredentialsFile = creds
	require.NoError(t, c.Require(config.Needs{Registry: true, NATS: true}))
	return c
}

// Accessors of decoded YAML/JSON trees: a missing step gives the zero value.

func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func num(v any, path ...any) int {
	switch n := get(v, path...).(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return -1
}

func hasPrefixDir(path, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return path == dir || strings.HasPrefix(path, dir+"/")
}
