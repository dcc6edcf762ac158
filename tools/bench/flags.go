package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRates reads a comma-separated list of keys per second.
func ParseRates(s string) ([]float64, error) {
	return parseList(s, func(f string) (float64, error) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("rate %q: not a number of keys per second", f)
		}
		return v, nil
	})
}

// parseList reads a comma-separated list, each element parsed by parse; blank elements
// (spaces around the commas, a trailing comma) are skipped.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
