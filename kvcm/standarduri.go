package kvcm

import (
	"strconv"
	"strings"
)

// standardURI is what StandardUri::Parse keeps (the path is not needed).
type standardURI struct {
	scheme, userInfo, host string
	port                   int64
	params                 map[string]string
}

// parseStandardURIf6aa2b2 is f6aa2b2's StandardUri::Parse (common/standard_uri.cc). why is
// empty when Parse returns true, and otherwise says why it does not; StandardUri::FromUri
// then yields an empty URI, and KVCM fails to connect.
func parseStandardURIf6aa2b2(s string) (u standardURI, why string) {
	schemeEnd := strings.Index(s, "://")
	if schemeEnd < 0 {
		return u, `no "://"`
	}
	u.scheme = s[:schemeEnd]
	authStart := schemeEnd + 3
	hostStart := authStart
	at := indexFrom(s, authStart, '@')
	if at >= 0 {
		u.userInfo = s[authStart:at]
		hostStart = at + 1
	}
	pathStart, queryStart := indexFrom(s, authStart, '/'), indexFrom(s, authStart, '?')
	hostEnd := len(s)
	if pathStart >= 0 {
		hostEnd = pathStart
	}
	if queryStart >= 0 && queryStart < hostEnd {
		hostEnd = queryStart
	}
	hostPort := s[hostStart:]
	if hostEnd >= hostStart {
		hostPort = s[hostStart:hostEnd]
	} // else: host_end - host_start wraps around as a size_t, and substr runs to the end.
	if colon := strings.IndexByte(hostPort, ':'); colon < 0 {
		u.host = hostPort
	} else {
		u.host = hostPort[:colon]
		port, ok := strToInt64(hostPort[colon+1:])
		if !ok {
			if at >= 0 && hostEnd < hostStart {
				return u, "a '/' or '?' in the userinfo makes KVCM read everything after the '@' as host and port, " +
					"and the text after the port breaks its parse"
			}
			return u, "the port is not a decimal integer"
		}
		u.port = port
	}
	switch {
	case pathStart >= 0 && queryStart > pathStart:
		u.params = parseStandardParams(s[queryStart+1:])
	case pathStart < 0 && queryStart >= 0:
		u.params = parseStandardParams(s[queryStart+1:])
	}
	return u, ""
}

// parseStandardURINewer is the newer StandardUri::Parse: the authority ends at the first '/'
// or '?', the userinfo at an '@' before that, and the port is from_chars without a sign.
func parseStandardURINewer(s string) (u standardURI, ok bool) {
	schemeEnd := strings.Index(s, "://")
	if schemeEnd < 0 {
		return u, false
	}
	u.scheme = s[:schemeEnd]
	authStart := schemeEnd + 3
	pathStart, queryStart := indexFrom(s, authStart, '/'), indexFrom(s, authStart, '?')
	hostEnd := len(s)
	if pathStart >= 0 {
		hostEnd = pathStart
	}
	if queryStart >= 0 && queryStart < hostEnd {
		hostEnd = queryStart
	}
	hostStart := authStart
	if at := indexFrom(s, authStart, '@'); at >= 0 && at < hostEnd {
		u.userInfo = s[authStart:at]
		hostStart = at + 1
	}
	if colon := indexFrom(s, hostStart, ':'); colon < 0 || colon >= hostEnd {
		u.host = s[hostStart:hostEnd]
	} else {
		u.host = s[hostStart:colon]
		p := s[colon+1 : hostEnd]
		if p == "" || p[0] == '-' {
			return standardURI{}, false
		}
		port, ok := fromCharsInt64(p)
		if !ok {
			return standardURI{}, false
		}
		u.port = port
	}
	if pathStart >= 0 && (queryStart < 0 || pathStart < queryStart) {
		if queryStart >= 0 {
			u.params = parseStandardParams(s[queryStart+1:])
		}
	} else if queryStart >= 0 {
		u.params = parseStandardParams(s[queryStart+1:])
	}
	return u, true
}

// parseStandardParams is StandardUri::ParseParams.
func parseStandardParams(q string) map[string]string {
	params := make(map[string]string)
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		params[k] = v
	}
	return params
}

func indexFrom(s string, from int, c byte) int {
	if i := strings.IndexByte(s[from:], c); i >= 0 {
		return from + i
	}
	return -1
}

// strToInt64 is KVCM's StringUtil::StrToInt64 on a std::string's c_str(): strtoll base 10
// (leading C spaces, an optional sign), which must take the whole string up to its first NUL,
// must not overflow, and must have something to read.
func strToInt64(s string) (int64, bool) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	i := 0
	for i < len(s) && strings.IndexByte(" \t\n\v\f\r", s[i]) >= 0 {
		i++
	}
	s = s[i:]
	digits := s
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		digits = digits[1:]
	}
	if digits == "" || strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// fromCharsInt64 is std::from_chars into an int64 that must take the whole, non-empty string:
// an optional '-', then digits only.
func fromCharsInt64(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
