package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteHelp documents every key: its flag, environment variable, type, default and meaning.
// Defaults of secret keys are never shown (they are empty anyway).
func WriteHelp(w io.Writer) {
	def := Default()
	fmt.Fprintf(w, "Configuration keys. Each is a YAML key of the --config file (dots are nesting), a flag\n"+
		"--<key>, and an environment variable %s<KEY> (upper case, dots as underscores).\n"+
		"Precedence: flag > environment > file > default. An empty environment variable is unset.\n"+
		"Lists are comma-separated; maps are name=value items, comma-separated or the flag repeated;\n"+
		"storage.overrides items are <storage>.probe=none|stat, <storage>.delete=true|false,\n"+
		"<storage>.path_map=<from>=<to>, <storage>.sweep=true|false.\n\n", EnvPrefix)
	section := ""
	for _, k := range Keys() {
		if s, _, ok := strings.Cut(k.Name, "."); ok && s != section {
			section = s
			fmt.Fprintf(w, "\n[%s]\n", s)
		}
		d := k.Format(&def)
		if d == "" {
			d = `""`
		}
		fmt.Fprintf(w, "  --%s %s\n      %s\n      default %s; env %s\n", k.Flag(), k.Type, k.Help, d, k.Env)
	}
}
