package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

// EnvPrefix starts the environment variable of every key: KVCMGC_<KEY> in upper snake case,
// dots becoming underscores (nats.url → KVCMGC_NATS_URL).
const EnvPrefix = "KVCMGC_"

// Key is one configuration key in its three spellings: the YAML path (sections joined by
// dots), the flag (the same name) and the environment variable.
type Key struct {
	Name string // "scan_interval", "nats.url"
	Env  string // "KVCMGC_SCAN_INTERVAL"
	Help string
	// Type describes the value syntax for --help: bool, int, float, duration, string, list,
	// map, storage.
	Type string
	// Secret is "true" for a value never printed, "uri" for a URI whose credentials are never
	// printed, "" otherwise.
	Secret string
	// FileOf, on a key naming a file that holds a secret (registry.password_file), is the key
	// whose value the file holds (registry.password); see Config.ReadSecretFiles.
	FileOf string

	index []int // field path in Config
}

// Flag is the command-line flag of the key (--<Flag>).
func (k Key) Flag() string { return k.Name }

var (
	durationType = reflect.TypeFor[time.Duration]()
	storageType  = reflect.TypeFor[map[string]StorageOverride]()
)

// Keys lists every key in declaration order.
func Keys() []Key {
	var out []Key
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			idx := append(slices.Clone(index), i)
			if flags == "inline" {
				// A component's keys, at this level of the file.
				walk(f.Type, prefix, idx)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(f.Type, prefix+name+".", idx)
				continue
			}
			full := prefix + name
			var fileOf string
			if of := f.Tag.Get("file"); of != "" {
				fileOf = prefix + of
			}
			out = append(out, Key{
				Name:   full,
				Env:    EnvPrefix + strings.ToUpper(strings.ReplaceAll(full, ".", "_")),
				Help:   f.Tag.Get("help"),
				Type:   typeName(f.Type),
				Secret: f.Tag.Get("secret"),
				FileOf: fileOf,
				index:  idx,
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}

// Lookup returns the key named name.
func Lookup(name string) (Key, bool) {
	for _, k := range Keys() {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == storageType:
		return "storage"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "int"
	case reflect.Float64:
		return "float"
	case reflect.Slice:
		return "list"
	case reflect.Map:
		return "map"
	}
	return "string"
}

func (k Key) field(c *Config) reflect.Value { return reflect.ValueOf(c).Elem().FieldByIndex(k.index) }

// Set applies the texts one source (the flags, or one environment variable) gives for the key
// to c. A scalar takes the last text; a list takes every comma-separated item of every text,
// replacing what c had; a map merges every "name=value" item into what c had, entry by entry.
func (k Key) Set(c *Config, texts ...string) error {
	if len(texts) == 0 {
		return nil
	}
	v := k.field(c)
	t := v.Type()
	last := strings.TrimSpace(texts[len(texts)-1])
	switch {
	case t == durationType:
		d, err := time.ParseDuration(last)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration (e.g. 1s, 250ms, 24h)", k.Name, last)
		}
		v.SetInt(int64(d))
		return nil
	case t == storageType:
		return k.setStorage(v, texts)
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(texts[len(texts)-1])
	case reflect.Bool:
		b, err := strconv.ParseBool(last)
		if err != nil {
			return fmt.Errorf("%s: %q is not a boolean (true or false)", k.Name, last)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return fmt.Errorf("%s: %q is not an integer", k.Name, last)
		}
		v.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a non-negative integer", k.Name, last)
		}
		v.SetUint(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(last, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", k.Name, last)
		}
		v.SetFloat(f)
	case reflect.Slice:
		var items []string
		for _, text := range texts {
			items = append(items, splitList(text)...)
		}
		v.Set(reflect.ValueOf(items))
	case reflect.Map:
		m := maps.Clone(v.Interface().(map[string]string))
		if m == nil {
			m = map[string]string{}
		}
		for _, text := range texts {
			for _, item := range splitList(text) {
				name, val, ok := strings.Cut(item, "=")
				if !ok || name == "" {
					return fmt.Errorf("%s: entry %q is not name=value", k.Name, k.redact(item))
				}
				m[name] = val
			}
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("%s: unsupported type %s", k.Name, t)
	}
	return nil
}

// setStorage merges "name.field=value" items into the storage overrides. Fields: probe,
// delete, sweep, path_map (value from=to; repeat the item for several). A path_map given by one
// source replaces the storage's path_map from sources of lower precedence.
func (k Key) setStorage(v reflect.Value, texts []string) error {
	m := maps.Clone(v.Interface().(map[string]StorageOverride))
	if m == nil {
		m = map[string]StorageOverride{}
	}
	resetPathMap := map[string]bool{}
	for _, text := range texts {
		for _, item := range splitList(text) {
			lhs, val, ok := strings.Cut(item, "=")
			dot := strings.LastIndexByte(lhs, '.')
			if !ok || dot <= 0 {
				return fmt.Errorf("%s: entry %q is not <storage>.<probe|delete|path_map|sweep>=<value>", k.Name, item)
			}
			name, field := lhs[:dot], lhs[dot+1:]
			o := m[name]
			switch field {
			case "probe":
				o.Probe = val
			case "delete":
				b, err := strconv.ParseBool(val)
				if err != nil {
					return fmt.Errorf("%s: entry %q: delete is not a boolean", k.Name, item)
				}
				o.Delete = &b
			case "sweep":
				b, err := strconv.ParseBool(val)
				if err != nil {
					return fmt.Errorf("%s: entry %q: sweep is not a boolean", k.Name, item)
				}
				o.Sweep = b
			case "path_map":
				from, to, ok := strings.Cut(val, "=")
				if !ok {
					return fmt.Errorf("%s: entry %q: path_map is not from=to", k.Name, item)
				}
				if !resetPathMap[name] {
					o.PathMap, resetPathMap[name] = nil, true
				}
				o.PathMap = append(o.PathMap, PathMap{From: from, To: to})
			default:
				return fmt.Errorf("%s: entry %q: unknown field %q (probe, delete, path_map, sweep)", k.Name, item, field)
			}
			m[name] = o
		}
	}
	v.Set(reflect.ValueOf(m))
	return nil
}

// splitList splits a comma-separated list, trimming spaces and dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Format returns the key's value in c as text, with secrets hidden.
func (k Key) Format(c *Config) string {
	v := k.field(c)
	t := v.Type()
	switch {
	case t == durationType:
		return time.Duration(v.Int()).String()
	case t == storageType:
		m := v.Interface().(map[string]StorageOverride)
		var items []string
		for _, name := range slices.Sorted(maps.Keys(m)) {
			o := m[name]
			if o.Probe != "" {
				items = append(items, name+".probe="+o.Probe)
			}
			if o.Delete != nil {
				items = append(items, name+".delete="+strconv.FormatBool(*o.Delete))
			}
			for _, pm := range o.PathMap {
				items = append(items, name+".path_map="+pm.From+"="+pm.To)
			}
			if o.Sweep {
				items = append(items, name+".sweep=true")
			}
		}
		return strings.Join(items, ",")
	}
	switch t.Kind() {
	case reflect.String:
		return k.redact(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		return strings.Join(v.Interface().([]string), ",")
	case reflect.Map:
		m := v.Interface().(map[string]string)
		var items []string
		for _, name := range slices.Sorted(maps.Keys(m)) {
			items = append(items, name+"="+k.redact(m[name]))
		}
		return strings.Join(items, ",")
	}
	return fmt.Sprint(v.Interface())
}

// redact hides a secret value: whole, or the credentials of a URI (every URI of a
// comma-separated list, as nats.url may hold several).
func (k Key) redact(s string) string {
	switch {
	case s == "":
		return s
	case k.Secret == "true":
		return "***"
	case k.Secret == "uri":
		parts := strings.Split(s, ",")
		for i, p := range parts {
			parts[i] = redismeta.Redact(p)
		}
		return strings.Join(parts, ",")
	}
	return s
}

// Redacted returns a deep copy of c whose secrets are hidden, for printing.
func (c Config) Redacted() Config {
	r := c
	r.Prober.ExcludedTypes = slices.Clone(c.Prober.ExcludedTypes)
	r.Storage.Overrides = maps.Clone(c.Storage.Overrides)
	for _, k := range Keys() {
		if k.Secret == "" {
			continue
		}
		v := k.field(&r)
		switch v.Kind() {
		case reflect.String:
			v.SetString(k.redact(v.String()))
		case reflect.Map:
			m := maps.Clone(v.Interface().(map[string]string))
			for name, val := range m {
				m[name] = k.redact(val)
			}
			v.Set(reflect.ValueOf(m))
		}
	}
	return r
}

// errUnknownKey reports a key that Config does not have.
var errUnknownKey = errors.New("unknown key")
