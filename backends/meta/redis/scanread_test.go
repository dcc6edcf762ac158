package redismeta

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestRawReadEqualsGeneral: a whole walk of a keyspace with every form of block (both
// layouts, tricky and corrupt ones, binary values, a key of another type) gives the same pages
// through the raw reader with the SCAN sent a page early as through go-redis's decoder with a
// SCAN per page (over RESP2, the protocol kvcm-gc's client speaks and the only one readEntry
// reads), the raw reader over RESP2 and RESP3.
func TestRawReadEqualsGeneral(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithRedisArgs("--enable-debug-command", "local"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin := srv.Client()
	for i, layout := range []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy} {
		inst := "loc"
		if layout == kvcm.LayoutLegacy {
			inst = "leg"
		}
		_, err := seed.Generate(ctx, admin, seed.Spec{Cluster: "c" + strconv.Itoa(i), Layout: layout, Instances: []string{inst},
			Blocks: 600, GarbageFraction: 0.1, TrickyFraction: 0.5, NoFiles: true, Root: t.TempDir(),
			MetaURI: srv.URI(), Grace: time.Hour, Seed: uint64(i + 1)})
		require.NoError(t, err)
	}
	odd := kvcm.BlockKey("loc", 1<<40)
	require.NoError(t, admin.HSet(ctx, odd, "L#a\r\nb", "$3\r\nxyz\r\n", "L#", "", "__loc__x", "\x00\xff", "L#z", "*2\r\n").Err())
	require.NoError(t, admin.Set(ctx, kvcm.BlockKey("loc", 1<<41), "a string", 0).Err())
	require.NoError(t, admin.HSet(ctx, kvcm.BlockKey("leg", 1<<42), "__uri__", "", "__lru_time__", "").Err())

	waitRehashed(ctx, t, admin)

	owns := func(id string) bool { return id == "loc" || id == "leg" }
	client := func(proto int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: proto, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, proto := range []int{2, 3} {
		fast := newStore(client(proto), StoreOptions{})
		general := newStore(client(2), StoreOptions{})
		general.generalOnly, general.noScanAhead = true, true
		for _, count := range []int{1, 7, 256} {
			var cursor uint64
			pages, entries, bad := 0, 0, 0
			for {
				want, err := general.ScanStore(ctx, cursor, count, owns)
				require.NoError(t, err)
				got, err := fast.ScanStore(ctx, cursor, count, owns)
				require.NoError(t, err)
				require.Equal(t, want, got, "resp%d count %d cursor %d", proto, count, cursor)
				pages, entries, bad = pages+1, entries+len(got.Entries), bad+len(got.BadKeys)
				if cursor = got.Next; cursor == 0 {
					break
				}
			}
			require.Greater(t, entries, 1200, "resp%d count %d", proto, count)
			require.Zero(t, fast.rawFallbacks.Load(), "every page through the raw reader")
			require.Positive(t, bad)
			t.Logf("resp%d count %d: %d pages, %d entries, %d bad keys", proto, count, pages, entries, bad)
		}
	}
}

// waitRehashed waits until the keyspace's table has finished growing. While Redis rehashes
// it, the same SCAN cursor answers differently from one call to the next (every key lookup
// moves a bucket), so the raw reader's SCAN, sent a page early, and the general reader's SCAN,
// sent later, would walk different tables. Redis finishes the rehash itself within a few
// server ticks once writes stop.
func waitRehashed(ctx context.Context, t *testing.T, c *redis.Client) {
	t.Helper()
	require.Eventually(t, func() bool {
		stats, err := c.Do(ctx, "DEBUG", "HTSTATS", "0").Text()
		require.NoError(t, err)
		return !strings.Contains(strings.ToLower(stats), "rehashing")
	}, 10*time.Second, 10*time.Millisecond, "the keyspace's table is still rehashing")
}

// TestRawReadValuesDoNotOverlap: an entry's values have their length as their capacity, so
// appending to one never writes into the next value of the shared page buffer.
func TestRawReadValuesDoNotOverlap(t *testing.T) {
	var e meta.Entry
	reply := encodeRESP(2, [][2]string{{"L#a", "{}"}, {"L#b", "[]"}, {"__uri__", "x"}})
	exists, rerr, ok := parseHGetAll(reply, &e)
	require.True(t, ok)
	require.NoError(t, rerr)
	require.True(t, exists)
	for _, l := range e.Locations {
		require.Equal(t, len(l.Value), cap(l.Value))
	}
	require.Equal(t, len(e.URI), cap(e.URI))
	_ = append(e.Locations[0].Value, "zzzz"...)
	require.Equal(t, "[]", string(e.Locations[1].Value))
}

// encodeRESP writes pairs as Redis answers HGETALL: an array of 2n bulk strings (RESP2) or a
// map of n pairs (RESP3).
func encodeRESP(proto int, pairs [][2]string) []byte {
	var b bytes.Buffer
	if proto == 3 {
		b.WriteString("%" + strconv.Itoa(len(pairs)) + "\r\n")
	} else {
		b.WriteString("*" + strconv.Itoa(2*len(pairs)) + "\r\n")
	}
	for _, p := range pairs {
		for _, s := range p {
			b.WriteString("$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n")
		}
	}
	return b.Bytes()
}

// generalEntry is what readEntry, the general decoder, makes of pairs.
func generalEntry(t testing.TB, pairs [][2]string) (meta.Entry, bool, error) {
	vals := make([]any, 0, 2*len(pairs))
	for _, p := range pairs {
		vals = append(vals, p[0], p[1])
	}
	cmd := redis.NewCmd(context.Background())
	cmd.SetVal(vals)
	var e meta.Entry
	exists, err := readEntry(cmd, &e)
	return e, exists, err
}

// splitPairs reads fuzz input as hash fields: names and values separated by 0x00.
func splitPairs(data []byte) [][2]string {
	parts := bytes.Split(data, []byte{0})
	var out [][2]string
	seen := map[string]bool{}
	for i := 0; i+1 < len(parts); i += 2 {
		if seen[string(parts[i])] {
			continue // a hash holds a field once
		}
		seen[string(parts[i])] = true
		out = append(out, [2]string{string(parts[i]), string(parts[i+1])})
	}
	return out
}

// refParse is a plain reading of a canonical HGETALL reply, the oracle of FuzzParseHGetAll.
func refParse(reply []byte) (pairs [][2]string, errLine string, ok bool) {
	if len(reply) > 0 && reply[0] == '-' {
		i := bytes.Index(reply, []byte("\r\n"))
		if i < 0 || i+2 != len(reply) || bytes.IndexByte(reply[:i], '\r') >= 0 {
			return nil, "", false
		}
		return nil, string(reply[1:i]), true
	}
	for _, proto := range []int{2, 3} {
		// Try every split the reply could be of; a canonical reply re-encodes to itself.
		var p [][2]string
		rest := reply
		head := bytes.Index(rest, []byte("\r\n"))
		if head < 0 {
			return nil, "", false
		}
		n, err := strconv.Atoi(string(rest[1:head]))
		if err != nil || n < 0 {
			continue
		}
		if proto == 2 {
			n /= 2
		}
		rest = rest[head+2:]
		good := true
		for range n {
			var kv [2]string
			for j := range 2 {
				h := bytes.Index(rest, []byte("\r\n"))
				if h < 1 || rest[0] != '$' {
					good = false
					break
				}
				l, err := strconv.Atoi(string(rest[1:h]))
				if err != nil || l < 0 || h+2+l+2 > len(rest) {
					good = false
					break
				}
				kv[j] = string(rest[h+2 : h+2+l])
				rest = rest[h+2+l+2:]
			}
			if !good {
				break
			}
			p = append(p, kv)
		}
		if good && bytes.Equal(encodeRESP(proto, p), reply) {
			return p, "", true
		}
	}
	return nil, "", false
}

// FuzzParseHGetAll compares the narrow reader with the general decoder. Hash contents from
// the input, encoded as Redis answers in RESP2 and RESP3, read alike by both; and the input
// itself as a reply: what the narrow reader accepts is a canonical reply, read as the general
// decoder reads those pairs, and anything else is handed to the general decoder (never a
// panic, never a guess).
func FuzzParseHGetAll(f *testing.F) {
	f.Add([]byte("L#a\x00{\"id\":\"a\"}\x00BP#prev_key\x00\x00L#b\x00"))
	f.Add([]byte("__uri__\x00{}\x00__lru_time__\x001\x00"))
	f.Add([]byte("__loc__x\x00\r\n\x00L#\x00\x00__uri__\x00"))
	f.Add([]byte("*2\r\n$3\r\nL#a\r\n$2\r\n{}\r\n"))
	f.Add([]byte("%1\r\n$7\r\n__uri__\r\n$0\r\n\r\n"))
	f.Add([]byte("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"))
	f.Add([]byte("*0\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pairs := splitPairs(data)
		want, wantExists, wantErr := generalEntry(t, pairs)
		for _, proto := range []int{2, 3} {
			var got meta.Entry
			exists, rerr, ok := parseHGetAll(encodeRESP(proto, pairs), &got)
			require.True(t, ok, "resp%d %q", proto, pairs)
			require.NoError(t, rerr)
			require.Equal(t, wantErr == nil && wantExists, exists)
			if exists {
				require.Equal(t, want, got)
			}
		}

		var got meta.Entry
		exists, rerr, ok := parseHGetAll(data, &got)
		if !ok {
			return
		}
		ref, errLine, refOK := refParse(data)
		require.True(t, refOK, "accepted a reply that is not canonical: %q", data)
		if errLine != "" || rerr != nil {
			require.Error(t, rerr)
			require.Equal(t, errLine, rerr.Error())
			return
		}
		want, wantExists, wantErr = generalEntry(t, ref)
		require.NoError(t, wantErr)
		require.Equal(t, wantExists, exists)
		if exists {
			require.Equal(t, want, got)
		}
	})
}

// BenchmarkScanStorePaths walks a seeded location-layout store of 20,000 blocks page by page
// (256 keys) through the general decoder with a SCAN per page, the raw reader, and the raw
// reader with the SCAN sent a page early (the scanner's path).
func BenchmarkScanStorePaths(b *testing.B) {
	srv := testenv.StartRedis(b)
	ctx := context.Background()
	_, err := seed.Generate(ctx, srv.Client(), seed.Spec{Cluster: "c", Layout: kvcm.LayoutLocation, Instances: []string{"inst0"},
		Blocks: 20000, GarbageFraction: 0.1, NoFiles: true, Root: b.TempDir(), MetaURI: srv.URI(), Grace: time.Hour, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	owns := func(id string) bool { return id == "inst0" }
	for _, mode := range []struct {
		name             string
		general, noAhead bool
	}{{"general", true, true}, {"raw", false, true}, {"raw-ahead", false, false}} {
		b.Run(mode.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
			defer c.Close()
			st := newStore(c, StoreOptions{})
			st.generalOnly, st.noScanAhead = mode.general, mode.noAhead
			var cursor uint64
			keys := 0
			b.ReportAllocs()
			for b.Loop() {
				p, err := st.ScanStore(ctx, cursor, 256, owns)
				if err != nil {
					b.Fatal(err)
				}
				keys += len(p.Entries)
				cursor = p.Next
			}
			b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// TestScanBurstsTook: a paced read reports, after every round trip that its gate let go,
// the keys it read and how long it held the server: on the server's clock (TIME first and
// last in the pipeline), within the round trip; a user without +time is read the same, timed
// by the round trip, and is not sent TIME again.
func TestScanBurstsTook(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	for i := range 300 {
		require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", int64(i)), "__uri__", fmt.Sprintf(`{"n":%d}`, i), "__lru_time__", "1").Err())
	}
	srv.AddUser(t, "notime", "pw", "~*", "+scan", "+hgetall", "+ping")
	owns := func(id string) bool { return id == "i" }
	for _, tc := range []struct {
		name string
		conn ConnOptions
	}{
		{"with TIME", ConnOptions{Addr: srv.Addr()}},
		{"without TIME", ConnOptions{Addr: srv.Addr(), Username: "notime", Password: "pw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := OpenStore(ctx, tc.conn, StoreOptions{DryRun: true})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			before := srv.CommandStats(t)
			type trip struct {
				keys int
				held time.Duration
			}
			var gated []int
			var trips []trip
			var rts []time.Duration
			var sent time.Time
			b := meta.Bursts{Size: 50,
				Gate: func(_ context.Context, n int) error { gated, sent = append(gated, n), time.Now(); return nil },
				Took: func(n int, held time.Duration) {
					trips, rts = append(trips, trip{n, held}), append(rts, time.Since(sent))
				}}
			keys := 0
			for cursor := uint64(0); ; {
				p, err := st.ScanStoreBursts(ctx, cursor, 128, owns, b)
				require.NoError(t, err)
				keys += len(p.Entries)
				if cursor = p.Next; cursor == 0 {
					break
				}
			}
			require.Equal(t, 300, keys)
			require.Len(t, trips, len(gated), "a Took after every round trip its gate let go")
			for i, tr := range trips {
				require.Equal(t, gated[i], tr.keys)
				require.Positive(t, tr.held)
				require.LessOrEqual(t, tr.held, rts[i], "within the round trip")
			}
			after := srv.CommandStats(t)
			times := after["time"] - before["time"]
			if tc.conn.Username == "" {
				require.Equal(t, 2*int64(len(trips)-1), times, "TIME before and after every burst but the lone SCAN")
				require.Zero(t, st.rawFallbacks.Load())
			} else {
				require.LessOrEqual(t, times, int64(2), "TIME tried on one page only")
				require.Equal(t, int64(1), st.rawFallbacks.Load(), "the refused page read again by the general decoder, once")
			}
		})
	}
}

func TestParseMainThreadCPU(t *testing.T) {
	cpu, err := parseMainThreadCPU("# CPU\r\nused_cpu_sys:9\r\nused_cpu_user:9\r\nused_cpu_sys_main_thread:1.5\r\nused_cpu_user_main_thread:0.25\r\n")
	require.NoError(t, err)
	require.Equal(t, 1750*time.Millisecond, cpu, "the main thread's, not the process's")
	_, err = parseMainThreadCPU("# CPU\r\nused_cpu_sys:9\r\nused_cpu_user:9\r\n")
	require.ErrorIs(t, err, meta.ErrInfoRefused, "a server that does not count its main thread")
	_, err = parseMainThreadCPU("used_cpu_sys_main_thread:x\r\nused_cpu_user_main_thread:1\r\n")
	require.Error(t, err)
	require.NotErrorIs(t, err, meta.ErrInfoRefused)
}
