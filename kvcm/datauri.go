package kvcm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DataURI is a data-storage URI as KVCM's StandardUri parses it:
// scheme://[userinfo@]host[:port][/path][?k=v&…]. No percent-decoding. The host is the
// storage's global unique name.
type DataURI struct {
	Scheme   string
	UserInfo string
	Host     string
	Port     uint16 // 0 when absent
	Path     string // starts with '/' when present
	// Query is the raw text after the '?' ("" when none): k=v items joined by '&', read by
	// Param as KVCM reads them. It is kept raw, not split into a map: parsing the URIs of a
	// batch is the prober's hottest path, and it needs one or two parameters of each.
	Query string
}

// ParseDataURI parses s; errors wrap ErrBadDataURI.
//
// It follows KVCM's StandardUri::Parse as both KVCM versions (f6aa2b2's parser and the newer
// one) read a URI, and refuses what they read differently (the conformance test checks it
// against both, from the bytes of KVCM's own parsers):
//   - an '@' after the authority, or a second one in it, is refused: f6aa2b2 takes the first
//     '@' anywhere after "://" as the end of the userinfo, the newer parser the last one in
//     the authority;
//   - a '/' in a query with no path before it is refused: f6aa2b2 takes it as the start of
//     the path and then drops the query;
//   - a port KVCM's newer parser refuses (a sign, empty, junk) is refused;
//   - an empty parameter ("a&&b") is skipped; KVCM stores it under the empty name, and
//     nothing reads it.
//
// The port must be a decimal in [0, 65535] (KVCM accepts whatever strtoll accepts: a sign,
// leading spaces); port 0 means absent, as KVCM's ToUriString leaves it out. A repeated
// parameter keeps its last value (KVCM stores params in a std::map). The scheme and the host
// must be non-empty.
func ParseDataURI(s string) (DataURI, error) {
	var u DataURI
	schemeEnd := strings.Index(s, "://")
	if schemeEnd <= 0 {
		return DataURI{}, fmt.Errorf("parse data uri %q: no scheme: %w", s, ErrBadDataURI)
	}
	u.Scheme = s[:schemeEnd]
	rest := s[schemeEnd+3:]

	authEnd := strings.IndexAny(rest, "/?")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	authority := rest[:authEnd]
	rest = rest[authEnd:]

	hostPort := authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		u.UserInfo = authority[:at]
		hostPort = authority[at+1:]
	}
	u.Host = hostPort
	if colon := strings.IndexByte(hostPort, ':'); colon >= 0 {
		u.Host = hostPort[:colon]
		p, ok := parsePort(hostPort[colon+1:])
		if !ok {
			return DataURI{}, fmt.Errorf("parse data uri %q: bad port %q: %w", s, hostPort[colon+1:], ErrBadDataURI)
		}
		u.Port = p
	}
	if u.Host == "" {
		return DataURI{}, fmt.Errorf("parse data uri %q: empty host: %w", s, ErrBadDataURI)
	}

	query := ""
	hasQuery := false
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		query, hasQuery = rest[q+1:], true
		rest = rest[:q]
	}
	u.Path = rest // "" or starts with '/'
	// KVCM's parser before the newer StandardUri took the first '@' anywhere after "://" as
	// the end of the userinfo, and, with a '?' before any '/', the text after a later '/' as
	// the path (dropping every parameter). Blocks of either KVCM version exist, so a URI the
	// two versions read differently is refused: kvcm-gc could not tell which storage and
	// file it names, nor whether it is shared.
	if strings.IndexByte(s[schemeEnd+3+authEnd:], '@') >= 0 || strings.Count(authority, "@") > 1 {
		return DataURI{}, fmt.Errorf("parse data uri %q: '@' after the host (KVCM versions "+
			"disagree on the host): %w", s, ErrBadDataURI)
	}
	if u.Path == "" && strings.IndexByte(query, '/') >= 0 {
		return DataURI{}, fmt.Errorf("parse data uri %q: '/' in a query without a path (KVCM "+
			"versions disagree on the path): %w", s, ErrBadDataURI)
	}
	if hasQuery {
		u.Query = query
	}
	return u, nil
}

func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v > 65535 {
		return 0, false
	}
	return uint16(v), true
}

// Param returns the value of parameter name: the last one when it repeats (KVCM stores params
// in a std::map); ok is false when absent. An item without '=' has the empty value; an empty
// item ("a&&b") is skipped.
func (u DataURI) Param(name string) (value string, ok bool) {
	for q := u.Query; q != ""; {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if kv == "" {
			continue
		}
		if k, v, _ := strings.Cut(kv, "="); k == name {
			value, ok = v, true
		}
	}
	return value, ok
}

// Params returns every parameter with its last value (for logs and tests).
func (u DataURI) Params() map[string]string {
	out := map[string]string{}
	for q := u.Query; q != ""; {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if kv != "" {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
	}
	return out
}

// String writes the URI back as parsed: the raw query as it was, port 0 left out.
// ParseDataURI(u.String()) gives u again. It is for logs and tests; callers that act on a URI
// keep the stored bytes.
func (u DataURI) String() string {
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if u.UserInfo != "" {
		b.WriteString(u.UserInfo)
		b.WriteByte('@')
	}
	b.WriteString(u.Host)
	if u.Port != 0 {
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(u.Port), 10))
	}
	b.WriteString(u.Path)
	if u.Query != "" {
		b.WriteByte('?')
		b.WriteString(u.Query)
	}
	return b.String()
}

// Uint returns a decimal uint64 parameter: ok=false when absent; err when present but not a
// fully consumed decimal (as std::from_chars + full-consumption check).
//
// That means digits only: no sign, no spaces, no "0x", not empty; leading zeros are fine.
// KVCM leaves its target unchanged on such a value (for "size" an uninitialised one), so
// callers must not guess a value either.
func (u DataURI) Uint(name string) (v uint64, ok bool, err error) {
	s, ok := u.Param(name)
	if !ok {
		return 0, false, nil
	}
	if s == "" {
		return 0, true, fmt.Errorf("parse uri param %s: empty: %w", name, ErrBadDataURI)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, true, fmt.Errorf("parse uri param %s=%q: not a decimal: %w", name, s, ErrBadDataURI)
		}
	}
	v, perr := strconv.ParseUint(s, 10, 64)
	if perr != nil {
		return 0, true, fmt.Errorf("parse uri param %s=%q: out of range: %w", name, s, ErrBadDataURI)
	}
	return v, true, nil
}

// Shared reports whether the data object behind this URI may hold other blocks too:
// a "blkid" parameter is present. (Callers also consult the storage's key_count_per_file.)
func (u DataURI) Shared() bool {
	_, ok := u.Param("blkid")
	return ok
}

// SpecBytes is the sum of the size parameters of the spec URIs kvcm-gc can read: what a
// report says a location's data holds. unknown counts the specs whose URI (by ParseDataURI,
// stricter than KVCM) or size does not parse; their bytes are not in total, which saturates.
// KVCM's own account of a location is UsageOf: looser URIs, a sum that wraps, and sizes it
// cannot tell.
func SpecBytes(specs []Spec) (total uint64, unknown int) {
	for _, s := range specs {
		u, err := ParseDataURI(s.URI)
		if err != nil {
			unknown++
			continue
		}
		n, ok, err := u.Uint("size")
		if !ok || err != nil {
			unknown++
			continue
		}
		if total > math.MaxUint64-n {
			total = math.MaxUint64 // saturate: a report, not an account
		} else {
			total += n
		}
	}
	return total, unknown
}
