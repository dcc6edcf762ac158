package metatest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// FixtureKey is one key of a fixture keyspace: a hash (Fields, field/value pairs in write
// order) or, when IsString, a plain string key holding String.
type FixtureKey struct {
	Key      string
	Fields   []string
	IsString bool
	String   string
}

// Expected is what a complete scan of one instance must return: every entry by key, and the
// keys that match the instance's pattern but are not its canonical block keys or not hashes.
type Expected struct {
	Entries map[string]meta.Entry
	BadKeys map[string]bool
}

// Fixture is a keyspace in KVCM's exact format together with the expected scan of each of
// its instances.
type Fixture struct {
	Keys []FixtureKey
	// Instances maps every instance id of the fixture (and a few ids with no keys, whose
	// scans must come back empty) to its expected scan.
	Instances map[string]Expected
}

// FixtureLRUTime is the __lru_time__ of every fixture block: µs since the epoch, decimal.
const FixtureLRUTime = "1767225600123456"

// Location returns one location as KVCM's rapidjson writer encodes it: compact, members in
// the order id,status,type,spec_size,location_specs, and name,uri inside a spec, with '&'
// written raw.
func Location(id string, status kvcm.Status, typ kvcm.StorageType, uris ...string) string {
	specs := ""
	for i, u := range uris {
		if i > 0 {
			specs += ","
		}
		specs += fmt.Sprintf(`{"name":"tp%d","uri":%s}`, i, strconv.Quote(u))
	}
	return fmt.Sprintf(`{"id":%q,"status":%d,"type":%d,"spec_size":%d,"location_specs":[%s]}`,
		id, int64(status), uint64(typ), len(uris), specs)
}

// URI returns a __uri__ value: a JSON object of the given locations keyed by their ids, in
// the given order (KVCM's own order is an unordered_map's, so any order is realistic).
func URI(locs ...string) string {
	out := "{"
	for i, l := range locs {
		if i > 0 {
			out += ","
		}
		// The id is the first member KVCM writes: {"id":"<id>",…
		var id string
		if _, err := fmt.Sscanf(l, `{"id":%q`, &id); err != nil {
			panic(fmt.Sprintf("metatest: location without leading id: %s", l))
		}
		out += strconv.Quote(id) + ":" + l
	}
	return out + "}"
}

// Block returns the fields KVCM's BatchAddLocation + ReadModifyWrite leave on a block hash of
// the legacy layout.
func Block(uri, prevKey string) []string {
	return []string{"__uri__", uri, "__lru_time__", FixtureLRUTime, "_prev_key_", prevKey}
}

// FixtureCreateTime is the create_time of every location-layout fixture location: µs.
const FixtureCreateTime = 1767225600000001

// LocationField returns one location as today's KVCM writes it into its field L#<id>:
// compact, members id,status,type,spec_size,create_time,location_specs.
func LocationField(id string, status kvcm.Status, typ kvcm.StorageType, uris ...string) string {
	l := Location(id, status, typ, uris...)
	i := strings.Index(l, `,"location_specs":`)
	return l[:i] + fmt.Sprintf(`,"create_time":%d`, FixtureCreateTime) + l[i:]
}

// LocationBlock returns the fields today's KVCM leaves on a block hash: BP#prev_key (written
// when KVCM creates the key) and one L#<id> field per location, in the given order.
func LocationBlock(prevKey string, locs ...string) []string {
	out := []string{kvcm.FieldPrevKey, prevKey}
	for _, l := range locs {
		var id string
		if _, err := fmt.Sscanf(l, `{"id":%q`, &id); err != nil {
			panic(fmt.Sprintf("metatest: location without leading id: %s", l))
		}
		out = append(out, kvcm.LocationField(id), l)
	}
	return out
}

// ExpectedEntry is what a scan or a read returns for a block hash holding fields (pairs of
// field and value, in write order; a later pair of the same field wins, as HSET does).
func ExpectedEntry(inst string, key int64, fields ...string) meta.Entry {
	e := meta.Entry{Key: kvcm.BlockKey(inst, key), Instance: inst, BlockKey: key}
	m := map[string]string{}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fields[i]] = fields[i+1]
	}
	hasURI, interim := false, false
	for name, v := range m {
		switch {
		case name == kvcm.FieldURI:
			hasURI = true
			if v != "" {
				e.URI = []byte(v)
			}
		case name == kvcm.FieldLRUTime:
			e.LRUTime = v
		case strings.HasPrefix(name, kvcm.LocationFieldPrefix):
			e.Locations = append(e.Locations, meta.Field{ID: strings.TrimPrefix(name, kvcm.LocationFieldPrefix), Value: []byte(v)})
		default:
			interim = interim || strings.HasPrefix(name, kvcm.InterimLocationPrefix)
			e.Others = append(e.Others, name)
		}
	}
	slices.SortFunc(e.Locations, func(a, b meta.Field) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(e.Others)
	e.Layout = kvcm.LayoutOf(hasURI, len(e.Locations), interim)
	return e
}

// NewFixture builds the standard fixture. Instance ids cover a shared prefix ("inst1" and
// "inst10"), glob characters ("a[1]*", "b?c", a backslash) next to ids their unescaped
// patterns would match ("a1", "a1zz", "bxc"), an id with ':cache_' inside, and dots, spaces
// and non-ASCII letters. "inst1" holds the awkward blocks: negative and extreme keys, several
// locations per block, unknown members, '&' in URIs, a corrupt __uri__, empty and absent
// __uri__, a string key and non-canonical keys matching its pattern, its metadata key, and
// enough plain blocks to need many SCAN pages.
func NewFixture() Fixture {
	f := Fixture{Instances: make(map[string]Expected)}
	expect := func(inst string) Expected {
		e, ok := f.Instances[inst]
		if !ok {
			e = Expected{Entries: make(map[string]meta.Entry), BadKeys: make(map[string]bool)}
			f.Instances[inst] = e
		}
		return e
	}
	block := func(inst string, key int64, fields ...string) {
		k := kvcm.BlockKey(inst, key)
		f.Keys = append(f.Keys, FixtureKey{Key: k, Fields: fields})
		expect(inst).Entries[k] = ExpectedEntry(inst, key, fields...)
	}
	bad := func(inst, key string, fields ...string) {
		f.Keys = append(f.Keys, FixtureKey{Key: key, Fields: fields})
		expect(inst).BadKeys[key] = true
	}

	nfsShared := "file://nfs_01/tmp/nfs/inst1/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024"
	hf3fs := "hf3fs://hf3fs_01/3fs/stage/kvcm/inst1/tp0/499602d2?size=1024"

	// inst1: the awkward blocks.
	const inst1 = "inst1"
	block(inst1, -7262535415567954716, Block(URI(
		Location("q0x7m2ab", kvcm.StatusServing, kvcm.TypeFile, nfsShared),
		Location("k3j9x0cd", kvcm.StatusDeleting, kvcm.TypeHF3FS, hf3fs),
	), "")...)
	block(inst1, -9223372036854775808, Block(URI(
		Location("w1w1w1w1", kvcm.StatusWriting, kvcm.TypeMooncake,
			"mooncake://mc_01/?key=inst1/tp0/8000000000000000&size=4096",
			"mooncake://mc_01/?key=inst1/tp1/8000000000000000&size=4096"),
	), "-7262535415567954716")...)
	block(inst1, 9223372036854775807, Block(URI(
		Location("p4p4p4p4", kvcm.StatusServing, kvcm.TypePace, "pace://pace_01/0?media_type=1&node_id=2&range_id=3&size=8"),
	), "")...)
	block(inst1, 0, Block(URI(
		Location("zzzzzzzz", kvcm.StatusWriting, kvcm.TypeFile, "file://nfs_01/tmp/nfs/inst1/tp0/0?size=1"),
	), "")...)
	// Unknown members (a newer KVCM's create_time, a nested object) and escapes KVCM writes.
	block(inst1, -1, Block(`{"u1u1u1u1":{"id":"u1u1u1u1","status":2,"type":4,"spec_size":1,`+
		`"location_specs":[{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst1/tp0/ffffffffffffffff?size=1"}],`+
		`"create_time":1767225600000001,"x_future":{"a":[1,2,{"b":null}],"c":"\u001F\t<>&é漢"}}}`, "0")...)
	// A corrupt __uri__ is still an entry: judging it is the caller's business.
	block(inst1, 42, Block(`{"broken":{"id":"broken","status":`, "")...)
	block(inst1, 43, "__uri__", "", "__lru_time__", FixtureLRUTime)    // empty: block absent
	block(inst1, 44, "__lru_time__", FixtureLRUTime, "_prev_key_", "") // no __uri__ at all
	block(inst1, 45, "__uri__", URI(Location("nolrut00", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/x?size=1")))
	for i := range 150 {
		k := int64(i)*7919 - 500000
		if k == 0 || k == -1 || (k >= 42 && k <= 45) || (k >= 1000 && k <= 1005) {
			continue
		}
		block(inst1, k, Block(URI(Location(fmt.Sprintf("v%07d", i), kvcm.StatusServing, kvcm.TypeFile,
			fmt.Sprintf("file://nfs_01/tmp/nfs/inst1/tp0/%x?size=1024", uint64(k)))), "")...)
	}
	f.Keys = append(f.Keys, FixtureKey{Key: kvcm.BlockKey(inst1, 77), IsString: true, String: "not a hash"})
	expect(inst1).BadKeys[kvcm.BlockKey(inst1, 77)] = true
	for _, rest := range []string{"abc", "05", "-0", "+5", "", " 5", "5 ", "9223372036854775808", "1e3", "0x1f"} {
		bad(inst1, kvcm.KeyPrefix(inst1)+rest, Block(URI(Location("badkey00", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/b?size=1")), "")...)
	}
	// KVCM's metadata hash does not match the block pattern and is never returned.
	f.Keys = append(f.Keys, FixtureKey{Key: "kvcache:instance_" + inst1 + ":metadata", Fields: []string{"__key_count__", "160"}})

	// The location layout (today's KVCM): one field per location, BP#prev_key, tier marks,
	// a tombstone, a corrupt field; a block holding both layouts (ambiguous); a key of KVCM's
	// interim layout; a key left with no location at all.
	nfs := func(k int64) string { return fmt.Sprintf("file://nfs_01/tmp/nfs/inst1/tp0/%x?size=1024", uint64(k)) }
	block(inst1, 1000, LocationBlock("",
		LocationField("l0c0l0c0", kvcm.StatusWriting, kvcm.TypeFile, nfs(1000)),
		LocationField("l1c1l1c1", kvcm.StatusServing, kvcm.TypeHF3FS, hf3fs))...)
	block(inst1, 1001, append(LocationBlock("1000", LocationField("t1e1t1e1", kvcm.StatusServing, kvcm.TypeFile, nfs(1001))),
		"__mig_tier_target__", "cold_01", "__mig_tier_deadline_ms__", "1767225600000", "L#tomb0000", "")...)
	block(inst1, 1002, append(LocationBlock("", LocationField("c0c0c0c0", kvcm.StatusServing, kvcm.TypeFile, nfs(1002))),
		"L#broken00", `{"id":"broken00","status":`)...)
	block(inst1, 1003, append(Block(URI(Location("o1d1o1d1", kvcm.StatusWriting, kvcm.TypeFile, nfs(1003))), ""),
		"L#n3w0n3w0", LocationField("n3w0n3w0", kvcm.StatusServing, kvcm.TypeFile, nfs(1003)))...)
	block(inst1, 1004, "__loc__i0i0i0i0", Location("i0i0i0i0", kvcm.StatusServing, kvcm.TypeFile, nfs(1004)))
	block(inst1, 1005, kvcm.FieldPrevKey, "")

	// inst10 shares the prefix "inst1"; its keys must never show up in inst1's scan.
	for _, k := range []int64{1, -1, 7, 10} {
		block("inst10", k, Block(URI(Location("i10i10i1", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/i10?size=1")), "")...)
	}
	f.Keys = append(f.Keys, FixtureKey{Key: "kvcache:instance_inst10:metadata", Fields: []string{"__key_count__", "4"}})

	// An id containing ":cache_": its keys match inst1's pattern but are not inst1's blocks.
	const colon = "inst1:cache_9"
	block(colon, 5, Block(URI(Location("colon000", kvcm.StatusWriting, kvcm.TypeFile, "file://nfs_01/c?size=1")), "")...)
	expect(inst1).BadKeys[kvcm.BlockKey(colon, 5)] = true

	// Glob characters: unescaped, "a[1]*" would match "a1" and "a1zz", "b?c" would match "bxc",
	// and "*" or "?" as an id would match every other one-character id.
	for _, inst := range []string{"a[1]*", "a1", "a1zz", "b?c", "bxc", `back\slash`, "m.v 1 ü漢", "*", "?"} {
		for _, k := range []int64{3, -3} {
			block(inst, k, Block(URI(Location("g0g0g0g0", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/"+strconv.Quote(inst)+"?size=1")), "")...)
		}
	}
	// Ids with no keys at all: prefixes and near misses of the ones above.
	for _, inst := range []string{"inst", "inst100", "a", "a[1]", "b", `back\`, "m.v 1"} {
		expect(inst)
	}
	return f
}
