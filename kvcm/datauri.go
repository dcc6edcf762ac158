package kvcm

import (
	"fmt"
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
	Params   map[string]string
	// ParamOrder lists the parameter names in the order they appeared.
	ParamOrder []string
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
// parameter keeps its last value (KVCM stores params in a std::map) and its first position in
// ParamOrder. The scheme and the host must be non-empty.
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
		return DataURI{}, fmt.Errorf("parse data uri %q: '@' after the host (KVCM versions disagree on the host): %w", s, ErrBadDataURI)
	}
	if u.Path == "" && strings.IndexByte(query, '/') >= 0 {
		return DataURI{}, fmt.Errorf("parse data uri %q: '/' in a query without a path (KVCM versions disagree on the path): %w", s, ErrBadDataURI)
	}
	if hasQuery {
		u.parseParams(query)
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

func (u *DataURI) parseParams(query string) {
	for query != "" {
		var kv string
		kv, query, _ = strings.Cut(query, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if u.Params == nil {
			u.Params = make(map[string]string, 4)
		}
		if _, seen := u.Params[k]; !seen {
			u.ParamOrder = append(u.ParamOrder, k)
		}
		u.Params[k] = v
	}
}

// String writes the URI back in its parsed form: parameters in ParamOrder (not KVCM's sorted
// order), every parameter as k=v, port 0 left out. ParseDataURI(u.String()) gives u again.
// It is for logs and tests; callers that act on a URI keep the stored bytes.
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
	for i, k := range u.ParamOrder {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(u.Params[k])
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
	s, ok := u.Params[name]
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
	_, ok := u.Params["blkid"]
	return ok
}
