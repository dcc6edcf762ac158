package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

// FileEnv names the configuration file when --config is not given.
const FileEnv = EnvPrefix + "CONFIG"

// Flags is a command line's part of the configuration: --config, --print-config and one flag
// per key. The flags only record what was given; Load applies it last, over the environment
// and the file, whatever the order of the command line.
type Flags struct {
	// File is the configuration file (--config).
	File string
	// Print asks for the effective configuration, secrets hidden, instead of a run.
	Print bool

	given map[string][]string // key name -> texts, in command-line order
}

// AddFlags registers --config, --print-config and a flag per key on fs.
func AddFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{given: map[string][]string{}}
	fs.StringVar(&f.File, "config", "", "YAML configuration file (env "+FileEnv+")")
	fs.BoolVar(&f.Print, "print-config", false, "print the effective configuration (secrets hidden) and exit")
	for _, k := range Keys() {
		fs.Var(&keyFlag{f: f, k: k}, k.Flag(), k.Help)
	}
	return f
}

// keyFlag records the texts given for one key, after checking that each parses.
type keyFlag struct {
	f *Flags
	k Key
}

func (v *keyFlag) String() string { return "" }

func (v *keyFlag) Set(s string) error {
	scratch := Default()
	if err := v.k.Set(&scratch, s); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), v.k.Name+": "))
	}
	v.f.given[v.k.Name] = append(v.f.given[v.k.Name], s)
	return nil
}

// IsBoolFlag lets --dry_run stand for --dry_run=true.
func (v *keyFlag) IsBoolFlag() bool { return v.k.Type == "bool" }

// Load computes the configuration: the defaults, then the file, then the environment, then
// the flags (flag > environment > file > default). It normalises and validates the result;
// every error names the key at fault. getenv is os.LookupEnv outside tests.
func (f *Flags) Load(getenv func(string) (string, bool)) (Config, error) {
	c := Default()
	path := f.File
	if path == "" {
		path, _ = getenv(FileEnv)
	}
	if path != "" {
		if err := LoadFile(&c, path); err != nil {
			return Config{}, err
		}
	}
	var errs []error
	for _, k := range Keys() {
		if text, ok := getenv(k.Env); ok && text != "" {
			if err := k.Set(&c, text); err != nil {
				errs = append(errs, fmt.Errorf("environment %s: %w", k.Env, err))
			}
		}
	}
	for _, k := range Keys() {
		if texts := f.given[k.Name]; len(texts) > 0 {
			if err := k.Set(&c, texts...); err != nil {
				errs = append(errs, fmt.Errorf("flag --%s: %w", k.Flag(), err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if err := c.ReadSecretFiles(); err != nil {
		return Config{}, err
	}
	c.normalize()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ReadSecretFiles sets every secret given as a file (registry.password from
// registry.password_file, nats.token from nats.token_file, …: the keys whose FileOf names
// them) to the file's content, one trailing newline ("\n" or "\r\n") dropped, as a mounted
// Kubernetes Secret or `echo pw > file` leaves it. A secret given both ways, from whatever
// sources, is an error naming both keys: which one would win is not a guess to make
// silently. So is a file that cannot be read, or is empty. The value read is hidden like
// the key's own (--print-config, logs); the file's name is not a secret.
func (c *Config) ReadSecretFiles() error {
	var errs []error
	for _, fk := range Keys() {
		if fk.FileOf == "" {
			continue
		}
		path := fk.field(c).String()
		if path == "" {
			continue
		}
		vk, ok := Lookup(fk.FileOf)
		if !ok {
			return fmt.Errorf("%s: names no key %s", fk.Name, fk.FileOf) // a Config tag's mistake
		}
		v := vk.field(c)
		if v.String() != "" {
			errs = append(errs, fmt.Errorf("%s, %s: both set; give the secret one way", vk.Name, fk.Name))
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fk.Name, err))
			continue
		}
		text := string(data)
		if t, ok := strings.CutSuffix(text, "\r\n"); ok {
			text = t
		} else {
			text = strings.TrimSuffix(text, "\n")
		}
		if text == "" {
			errs = append(errs, fmt.Errorf("%s: %s is empty", fk.Name, path))
			continue
		}
		v.SetString(text)
	}
	return errors.Join(errs...)
}

// normalize fills values that derive from others.
func (c *Config) normalize() {
	if c.Cluster == "" {
		if name, ok := redismeta.ClusterName(c.Registry.URI); ok {
			c.Cluster = name
		}
	}
}

// LoadFile applies a YAML configuration file to c: the keys it sets replace c's values, the
// others stay. An unknown key, a value of the wrong type or a second YAML document is an error
// naming the key and its line.
func LoadFile(c *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("load config %s: %w", path, err)
	}
	if err := decode(c, data); err != nil {
		return fmt.Errorf("load config %s: %w", path, err)
	}
	return nil
}

func decode(c *Config, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	next := *c
	err := dec.Decode(&next)
	switch {
	case errors.Is(err, io.EOF):
		return nil // an empty file sets nothing
	case err != nil:
		return explain(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("line %d: more than one YAML document", extra.Line)
	}
	*c = next
	return nil
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// explain rewrites the decoder's "line N: …" errors to name the key on that line.
func explain(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	var errs []error
	for _, msg := range te.Errors {
		m := lineRE.FindStringSubmatch(msg)
		if m == nil {
			errs = append(errs, errors.New(msg))
			continue
		}
		line, _ := strconv.Atoi(m[1])
		detail := m[2]
		key := keyAtLine(&root, line)
		if strings.Contains(detail, " not found in type ") {
			detail = errUnknownKey.Error()
		}
		if key == "" {
			errs = append(errs, fmt.Errorf("line %d: %s", line, detail))
			continue
		}
		errs = append(errs, fmt.Errorf("%s (line %d): %s", key, line, detail))
	}
	return errors.Join(errs...)
}

// keyAtLine returns the dotted path of the mapping key (or of the value) on a line.
func keyAtLine(n *yaml.Node, line int) string {
	var find func(n *yaml.Node, path string) string
	find = func(n *yaml.Node, path string) string {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if p := find(c, path); p != "" {
					return p
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if k.Line == line || (v.Kind == yaml.ScalarNode && v.Line == line) {
					return p
				}
				if found := find(v, p); found != "" {
					return found
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Kind == yaml.ScalarNode && c.Line == line {
					return p
				}
				if found := find(c, p); found != "" {
					return found
				}
			}
		}
		return ""
	}
	return find(n, "")
}

// Print writes c as YAML with its secrets hidden: what --print-config shows.
func (c Config) Print(w io.Writer) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(c.Redacted()); err != nil {
		return fmt.Errorf("print config: %w", err)
	}
	return enc.Close()
}
