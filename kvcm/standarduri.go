package kvcm

import (
	"strconv"
	"strings"
)

// KVCM's StandardUri (common/standard_uri.{h,cc}) reads every URI KVCM handles: the
// metadata store's (ParseStoreURI) and the data-storage URIs of location specs. There are two
// versions of its parser, and KVCMs built with either run today; the fixtures under
// testdata/kvcm/uris hold what both, compiled, make of 50 URIs, and every one is a test here.
//
// ParseDataURI (datauri.go) is a third, stricter reading, built for deleting: it refuses every
// data URI the two read differently, since kvcm-gc must know which file a URI names. KVCM's
// capacity accounting needs KVCM's own reading instead: its usage counts a spec's size when
// the URI is Valid() (the scheme is not empty) and GetParamAs<uint64_t>("size") reads it,
// whatever the host or port (manager/meta_searcher.cc BatchAddLocation).

// URIParser names one of KVCM's two StandardUri parsers.
type URIParser uint8

const (
	// ParserNewer ends the userinfo at an '@' inside the authority only, reads the port with
	// std::from_chars, and clears the whole object when the port does not parse.
	ParserNewer URIParser = iota
	// ParserF6aa2b2 is f6aa2b2's: the first '@' anywhere after "://" ends the userinfo, the
	// port goes through strtoll (StringUtil::StrToInt64), and a port that does not parse
	// makes Parse return false with the scheme and host already set: the string constructor,
	// which ignores the result, leaves a Valid() URI with no path and no parameter.
	ParserF6aa2b2
)

// StandardURI is what a StandardUri holds after its string constructor: no percent-decoding,
// no case folding.
type StandardURI struct {
	Scheme, UserInfo, Host string
	Port                   int64
	Path                   string
	// Params is the query split on '&' and each item on its first '='; a later duplicate
	// wins (a std::map), an item without '=' has the value "", an empty item the name "".
	Params map[string]string
}

// ParseStandardURI reads s as KVCM's StandardUri(const std::string&) constructor does with
// parser p. It never fails: a URI KVCM cannot read is one that is not Valid().
func ParseStandardURI(s string, p URIParser) StandardURI {
	if p == ParserF6aa2b2 {
		u, _ := parseStandardURIf6aa2b2(s)
		return u
	}
	u, _ := parseStandardURINewer(s)
	return u
}

// Valid is StandardUri::Valid(): the scheme is not empty.
func (u StandardURI) Valid() bool { return u.Scheme != "" }

// Uint64 is GetParamAs<uint64_t>(name, t) (standard_uri.h, the same in both versions): ok is
// false where KVCM leaves t unchanged, that is when the parameter is absent or empty, or when
// std::from_chars does not take the whole value (a sign, a space, "0x", a fraction, junk, a
// number above 2^64−1). Leading zeros are fine.
func (u StandardURI) Uint64(name string) (uint64, bool) {
	s := u.Params[name]
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false // errc::result_out_of_range
		}
		v = v*10 + d
	}
	return v, true
}

// parseStandardURIf6aa2b2 is f6aa2b2's StandardUri::Parse (common/standard_uri.cc). why is
// empty when Parse returns true, and otherwise says why it does not; StandardUri::FromUri
// then yields an empty URI, and KVCM fails to connect.
func parseStandardURIf6aa2b2(s string) (u StandardURI, why string) {
	schemeEnd := strings.Index(s, "://")
	if schemeEnd < 0 {
		return u, `no "://"`
	}
	u.Scheme = s[:schemeEnd]
	authStart := schemeEnd + 3
	hostStart := authStart
	at := indexFrom(s, authStart, '@')
	if at >= 0 {
		u.UserInfo = s[authStart:at]
		hostStart = at + 1
	}
	pathStart, queryStart, hostEnd := authorityEnd(s, authStart)
	hostPort := s[hostStart:]
	if hostEnd >= hostStart {
		hostPort = s[hostStart:hostEnd]
	} // else: host_end - host_start wraps around as a size_t, and substr runs to the end.
	if colon := strings.IndexByte(hostPort, ':'); colon < 0 {
		u.Host = hostPort
	} else {
		u.Host = hostPort[:colon]
		port, ok := strToInt64(hostPort[colon+1:])
		if !ok {
			if at >= 0 && hostEnd < hostStart {
				return u, "a '/' or '?' in the userinfo makes KVCM read everything after the '@' as host and port, " +
					"and the text after the port breaks its parse"
			}
			return u, "the port is not a decimal integer"
		}
		u.Port = port
	}
	switch {
	case pathStart >= 0 && queryStart > pathStart:
		u.Path = s[pathStart:queryStart]
		u.Params = parseStandardParams(s[queryStart+1:])
	case pathStart >= 0:
		u.Path = s[pathStart:]
	case queryStart >= 0:
		u.Params = parseStandardParams(s[queryStart+1:])
	}
	return u, ""
}

// parseStandardURINewer is the newer StandardUri::Parse: the authority ends at the first '/'
// or '?', the userinfo at an '@' before that, and the port is from_chars without a sign.
func parseStandardURINewer(s string) (u StandardURI, ok bool) {
	schemeEnd := strings.Index(s, "://")
	if schemeEnd < 0 {
		return u, false
	}
	u.Scheme = s[:schemeEnd]
	authStart := schemeEnd + 3
	pathStart, queryStart, hostEnd := authorityEnd(s, authStart)
	hostStart := authStart
	if at := indexFrom(s, authStart, '@'); at >= 0 && at < hostEnd {
		u.UserInfo = s[authStart:at]
		hostStart = at + 1
	}
	if colon := indexFrom(s, hostStart, ':'); colon < 0 || colon >= hostEnd {
		u.Host = s[hostStart:hostEnd]
	} else {
		u.Host = s[hostStart:colon]
		p := s[colon+1 : hostEnd]
		if p == "" || p[0] == '-' {
			return StandardURI{}, false
		}
		port, ok := fromCharsInt64(p)
		if !ok {
			return StandardURI{}, false
		}
		u.Port = port
	}
	if pathStart >= 0 && (queryStart < 0 || pathStart < queryStart) {
		if queryStart >= 0 {
			u.Path = s[pathStart:queryStart]
			u.Params = parseStandardParams(s[queryStart+1:])
		} else {
			u.Path = s[pathStart:]
		}
	} else if queryStart >= 0 {
		u.Params = parseStandardParams(s[queryStart+1:])
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

// authorityEnd finds, from authStart on, the first '/' and the first '?' (-1 for none), and
// where the host part ends: at the earlier of the two, or at the end of s.
func authorityEnd(s string, authStart int) (pathStart, queryStart, hostEnd int) {
	pathStart, queryStart = indexFrom(s, authStart, '/'), indexFrom(s, authStart, '?')
	hostEnd = len(s)
	if pathStart >= 0 {
		hostEnd = pathStart
	}
	if queryStart >= 0 && queryStart < hostEnd {
		hostEnd = queryStart
	}
	return pathStart, queryStart, hostEnd
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
	// strconv.ParseInt in base 10 takes exactly what is left: an optional sign, then one or
	// more digits, and nothing after them.
	v, err := strconv.ParseInt(s[i:], 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// fromCharsInt64 is std::from_chars into an int64 that must take the whole, non-empty string:
// an optional '-', then digits only (from_chars, unlike strtoll, takes no '+').
func fromCharsInt64(s string) (int64, bool) {
	if strings.HasPrefix(s, "+") {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
