package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRates reads a comma-separated list of keys per second.
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("rate %q: not a number of keys per second", f)
		}
		out = append(out, v)
	}
	return out, nil
}
