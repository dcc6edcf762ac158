package deploy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// object is one parsed document: a rendered manifest or a deployment file.
type object struct {
	file string
	doc  map[string]any
}

func (o object) kind() string { return str(o.doc, "kind") }
func (o object) name() string { return str(o.doc, "metadata", "name") }

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
