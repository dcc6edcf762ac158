// Package privileges is what each kvcm-gc stage may do on Redis and on NATS: the rules of its
// own Redis ACL user and the subjects its own NATS user may publish and subscribe to
// (docs/security.md). It is their one source. The Helm chart renders them for its values from
// files/privileges.json, which `go generate ./deploy` writes from Template; the deploy tests
// check that the chart renders what ACLFile and AccountConfig render for the same values, and
// the tests in test/ load what they render into a real redis-server and nats-server, run a
// round with every stage as its own user and show what each is refused.
//
// The NATS subjects come from subjects.Names, so they cannot drift from what the stages use.
package privileges

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// StageAdmin is the identity that creates the streams, consumers and buckets (kvcm-gc ensure)
// and runs the operator's commands. It has a NATS user that may do everything, and a Redis user
// that reads the metadata only, for replay.
const StageAdmin = subjects.IdentityAdmin

// Stages are the stages with their own identities, in pipeline order.
var Stages = []string{
	pipeline.StageScanner,
	pipeline.StageProber,
	pipeline.StageDeleter,
	pipeline.StageWalker,
	pipeline.StageSweeper,
}

// DefaultUser is the user name of a stage's Redis and NATS users: kvcm-gc-<stage>.
func DefaultUser(stage string) string { return "kvcm-gc-" + stage }

// DefaultGuardPrefix is the default key prefix of the migration copy-target guard's hashes
// (guard.prefix), which the prober reads.
const DefaultGuardPrefix = "kvcm_gc:copy:"

// Key patterns of KVCM's Redis: block keys (the metadata stores) and the registry.
const (
	blockKeys    = kvcm.StoreScanPattern + ":cache_*" // kvcache:instance_*:cache_*
	registryKeys = "kvcache_registry:*"
	// metadataKeys are KVCM's per-instance counters, which the scanner's audit reads.
	metadataKeys = kvcm.StoreScanPattern + ":metadata" // kvcache:instance_*:metadata
)

// RedisUser is the ACL of one stage's Redis user.
type RedisUser struct {
	Stage string
	Role  string
	// Commands are allowed on top of -@all, lower case ("hget", "script|load").
	Commands []string
	// ReadKeys may be read only (%R~), WriteKeys read and written (%RW~); glob patterns.
	ReadKeys, WriteKeys []string
}

// Rules is the user's ACL rules after the user name: permissions only; ACLFile puts the
// resets of a re-apply before them.
func (u RedisUser) Rules() string {
	parts := []string{"-@all"}
	for _, c := range u.Commands {
		parts = append(parts, "+"+c)
	}
	for _, k := range u.ReadKeys {
		parts = append(parts, "%R~"+k)
	}
	for _, k := range u.WriteKeys {
		parts = append(parts, "%RW~"+k)
	}
	return strings.Join(parts, " ")
}

// Redis returns the Redis users of the admin and of every stage for the guard's key prefix
// (guard.prefix; ACL glob characters in it are not escaped, so it must have none).
func Redis(guardPrefix string) []RedisUser {
	return []RedisUser{
		{Stage: StageAdmin,
			Role: "runs the operator's commands that read the metadata: replay reads the " +
				"registry (HGETALL, HGET), the blocks it replays (pipelined HGETALL) and the " +
				"copy-target guard's hashes (HMGET); it writes nothing and walks nothing (no SCAN)",
			// Read-only: an operator's command never writes in Redis; the deletes are the
			// deleter's alone, under its own user.
			Commands: []string{"ping", "hget", "hgetall", "hmget"},
			ReadKeys: []string{blockKeys, registryKeys, guardPrefix + "*"}},
		{Stage: pipeline.StageScanner,
			Role: "walks the block keys (SCAN, pipelined HGETALL), reads the registry snapshot " +
				"(HGETALL, HGET), a store's size when its round starts (DBSIZE), each instance's " +
				"KVCM counters for the audit (HGETALL of its metadata hash) and, pacing a " +
				"walk by scanner.duty, the server's clock (TIME first and last in each pipelined read: how long it held Redis)",
			// No write command at all: the scanner is read-only. Without +time a duty-paced
			// walk is timed by its round trip. No +info: scanner.redis_cpu_ceiling, opt-in,
			// needs it added, and without it the walk is paced by the duty alone.
			Commands: []string{"ping", "scan", "hget", "hgetall", "dbsize", "time"},
			ReadKeys: []string{blockKeys, registryKeys, metadataKeys}},
		{Stage: pipeline.StageProber,
			Role: "reads the registry's storage table, and the copy-target guard's hashes " +
				"(HMGET) when guard.kind is redis; it never reads a block: the batch carries the bytes",
			Commands: []string{"ping", "hget", "hgetall", "hmget"},
			ReadKeys: []string{registryKeys, guardPrefix + "*"}},
		{Stage: pipeline.StageDeleter,
			Role: "reads a target block whole (HGETALL) and runs the compare-and-swap and " +
				"compare-and-delete scripts, which call HGET, HKEYS, HLEN, HGETALL, HSET, HDEL " +
				"and DEL on that one key (Redis 7 checks a script's commands against the caller's ACL); no registry access",
			Commands: []string{"ping", "hgetall", "hget", "hkeys", "hlen", "evalsha", "eval",
				"script|load", "hset", "hdel", "del"},
			WriteKeys: []string{blockKeys}},
		{Stage: pipeline.StageWalker,
			Role: "reads the registry (HGETALL, HGET) to name the instances and specs of the " +
				"files it walks; it reads no block",
			Commands: []string{"ping", "hget", "hgetall"},
			ReadKeys: []string{registryKeys}},
		{Stage: pipeline.StageSweeper,
			Role: "reads the registry and, before and after quarantining a file, the file's " +
				"block (pipelined HGETALL) to see whether a location names it; it writes nothing in Redis",
			Commands: []string{"ping", "hget", "hgetall"},
			ReadKeys: []string{blockKeys, registryKeys}},
	}
}

// NATSUser is the permissions of one identity's NATS user.
type NATSUser struct {
	Stage              string
	Role               string
	Publish, Subscribe []string
	// OptIns are rights the user holds only while a configuration key is on (Granted).
	OptIns []OptIn
}

// OptIn is a right to publish that a user needs only while the configuration key Key is true.
type OptIn struct {
	Key     string
	Publish []string
}

// OptInCollectUnregistered is the configuration key that lets the scanner publish delete
// requests (of the keys of instances the registry no longer lists), and the walker and the
// sweeper read the scanners' checkpoints (to reclaim those instances' files).
const OptInCollectUnregistered = "collect_unregistered_instances"

// Granted returns the users with the rights of every opt-in whose key on reports true added
// to their publish rights, after them.
func Granted(ns []NATSUser, on func(key string) bool) []NATSUser {
	out := make([]NATSUser, len(ns))
	for i, u := range ns {
		u.Publish = slices.Clone(u.Publish)
		for _, o := range u.OptIns {
			if on(o.Key) {
				u.Publish = append(u.Publish, o.Publish...)
			}
		}
		out[i] = u
	}
	return out
}

// api subjects of the JetStream API and of KV buckets.
const api = "$JS.API."

// kvRead lets a user open bucket (STREAM.INFO) and read the keys matching the filters, each
// with a direct get by subject, whose API subject names the key. The buckets allow direct gets
// (ensure sees to it), so no user needs STREAM.MSG.GET of a bucket's stream, which would read
// any key: its subject travels in the request's payload, out of the permissions' reach.
func kvRead(bucket string, filters ...string) []string {
	out := []string{api + "STREAM.INFO." + subjects.KVStream(bucket)}
	for _, f := range filters {
		out = append(out, kvGet(bucket, f))
	}
	return out
}

// kvGet lets a user read the keys matching filter of a bucket it opens otherwise (kvRead):
// their direct get.
func kvGet(bucket, filter string) string {
	return api + "DIRECT.GET." + subjects.KVStream(bucket) + "." + subjects.KVSubjectPrefix(bucket) + filter
}

// kvWrite lets a user create, update and delete the keys matching the filters.
func kvWrite(bucket string, filters ...string) []string {
	out := make([]string, len(filters))
	for i, f := range filters {
		out[i] = subjects.KVSubjectPrefix(bucket) + f
	}
	return out
}

// pull lets a user read a durable consumer's info, pull its messages and acknowledge them,
// and read a message of the stream by sequence: the one the server gave up on, which a
// max-deliveries advisory names (deadLetters), becomes a deadletter event.
func pull(stream, consumer string) []string {
	return []string{
		consumerInfo(stream, consumer),
		api + "CONSUMER.MSG.NEXT." + stream + "." + consumer,
		"$JS.ACK." + stream + "." + consumer + ".>",
		api + "STREAM.MSG.GET." + stream,
	}
}

// deadLetters is the subscription to a consumer's max-deliveries advisories: a message whose
// last delivery went unanswered.
func deadLetters(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

func consumerInfo(stream, consumer string) string {
	return api + "CONSUMER.INFO." + stream + "." + consumer
}

// inbox is where every reply to the identity arrives (JetStream API answers, publish
// acknowledgements, pulled messages): its own inbox (subjects.InboxPrefix, which the binaries
// use for the identity they run as), so that no identity reads the replies of another.
func inbox(n subjects.Names, identity string) string { return n.InboxPrefix(identity) + ".>" }

// NATS returns the NATS users of the admin and of every stage, for names.
func NATS(n subjects.Names) []NATSUser {
	ev := n.EventKindFilter
	state, lease, observed := n.StateBucket(), n.LeaseBucket(), n.ObservedBucket()
	batches, deletes, sweep := n.BatchesStream(), n.DeletesStream(), n.SweepStream()
	sweepKeys := subjects.SweepKeyFilter()
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	return []NATSUser{
		{Stage: StageAdmin,
			Role: "creates and checks the streams, consumers and buckets (kvcm-gc ensure), " +
				"and runs the operator's commands (status, replay, report, dlq, pause, resume, round start)",
			Publish: []string{">"}, Subscribe: []string{">"}},
		{Stage: pipeline.StageScanner,
			Role: "publishes scan batches and its events, holds the store leases and its " +
				"presence in the LEASE bucket (store.*, member.* keys; and watches it for " +
				"released leases), keeps the checkpoints and the stores index and reads its " +
				"pause and the operators' round start requests in the STATE bucket " +
				"(checkpoint.*, stores; scanner_pause and round_start, which it may " +
				"not write), reads the prober's and the deleter's backlog, and, " +
				"only with collect_unregistered_instances, publishes delete " +
				"requests of the keys of instances the registry no longer lists",
			OptIns: []OptIn{{Key: OptInCollectUnregistered, Publish: []string{n.DeleteFilter()}}},
			Publish: cat(
				[]string{n.BatchFilter(), ev(subjects.EventRound), ev(subjects.EventSkip)},
				kvWrite(state, subjects.CheckpointFilter(), subjects.StoresKey),
				kvWrite(lease, subjects.StoreLeaseFilter(), subjects.MemberFilter()),
				kvRead(state, subjects.CheckpointFilter(), subjects.StoresKey, subjects.ScannerPauseKey, subjects.RoundStartKey),
				kvRead(lease, subjects.StoreLeaseFilter(), subjects.MemberFilter()),
				[]string{consumerInfo(batches, n.ProberConsumer()), consumerInfo(deletes, n.DeleterConsumer())},
			),
			Subscribe: []string{inbox(n, pipeline.StageScanner), subjects.KVSubjectPrefix(lease) + ">"}},
		{Stage: pipeline.StageProber,
			Role: "pulls scan batches from its durable consumer and acknowledges them, records " +
				"the batches the server gave up on (its max-deliveries advisories, and the " +
				"message read by sequence), publishes delete requests and its events, and " +
				"(collect_deleting) records first sights of DELETING locations in the OBSERVED bucket",
			Publish: cat(
				[]string{n.DeleteFilter()},
				kvWrite(observed, ">"),
				kvRead(observed, ">"),
				[]string{
					ev(subjects.EventCandidate),
					ev(subjects.EventSkip),
					ev(subjects.EventPoison),
					ev(subjects.EventDeadLetter),
				},
				pull(batches, n.ProberConsumer()),
			),
			Subscribe: []string{inbox(n, pipeline.StageProber), deadLetters(batches, n.ProberConsumer())}},
		{Stage: pipeline.StageDeleter,
			Role: "pulls delete requests from its durable consumer and acknowledges them, " +
				"records the requests the server gave up on (its max-deliveries advisories, and " +
				"the message read by sequence), publishes its events, and counts the keys it " +
				"deletes and the bytes of the locations it removes in the STATE bucket " +
				"(kvcm-gc's share of the drift of KVCM's counters)",
			Publish: cat(
				[]string{ev(subjects.EventDelete)},
				kvWrite(state, subjects.DeletedKeysFilter()),
				kvRead(state, subjects.DeletedKeysFilter()),
				[]string{ev(subjects.EventPoison), ev(subjects.EventDeadLetter)},
				pull(deletes, n.DeleterConsumer()),
			),
			Subscribe: []string{inbox(n, pipeline.StageDeleter), deadLetters(deletes, n.DeleterConsumer())}},
		{Stage: pipeline.StageWalker,
			Role: "publishes sweep batches and its walk events, holds the swept storages' " +
				"leases (LEASE bucket) and walk checkpoints (STATE bucket) under sweep.* keys, " +
				"reads its pause (walker_pause in STATE) and the sweepers' backlog, and, " +
				"only with collect_unregistered_instances, reads the scanners' checkpoints",
			OptIns: []OptIn{{Key: OptInCollectUnregistered, Publish: kvRead(state, subjects.CheckpointFilter())}},
			Publish: cat([]string{n.SweepFilter(), ev(subjects.EventSweep)},
				kvWrite(lease, sweepKeys), kvWrite(state, sweepKeys), kvRead(lease, sweepKeys), kvRead(state, sweepKeys),
				[]string{kvGet(state, subjects.WalkerPauseKey), consumerInfo(sweep, n.SweeperConsumer())}),
			Subscribe: []string{inbox(n, pipeline.StageWalker)}},
		{Stage: pipeline.StageSweeper,
			Role: "pulls sweep batches from its durable consumer and acknowledges them, " +
				"records the batches the server gave up on (its max-deliveries advisories, and " +
				"the message read by sequence), publishes its events, and, only with " +
				"collect_unregistered_instances, reads the scanners' checkpoints (STATE bucket)",
			OptIns: []OptIn{{Key: OptInCollectUnregistered, Publish: kvRead(state, subjects.CheckpointFilter())}},
			Publish: cat([]string{ev(subjects.EventSweep), ev(subjects.EventPoison), ev(subjects.EventDeadLetter)},
				pull(sweep, n.SweeperConsumer())),
			Subscribe: []string{inbox(n, pipeline.StageSweeper), deadLetters(sweep, n.SweeperConsumer())}},
	}
}

// ACLResets start every user's line of the ACL file: they clear the permissions the user had
// (keys, pub/sub channels, selectors; -@all in Rules its commands), so a line gives the user
// exactly the permissions after them, whether it creates the user or changes it. They leave
// alone whether the user is on and its passwords: a new user is off and has none, and an
// existing one keeps both, so the file can be applied again (ACL SETUSER per line) after an
// upgrade without turning off the users it changes. Never "off", "resetpass" or "reset".
const ACLResets = "resetkeys resetchannels clearselectors"

// ACLFile renders the Redis users as an ACL file (each line an aclfile's user, or, after
// "ACL SETUSER" in place of "user", a command), permissions only: a user it creates is off and
// has no password until an operator gives it one; users maps a stage to its user name
// (DefaultUser when absent).
func ACLFile(rs []RedisUser, users map[string]string) string {
	var b strings.Builder
	for _, u := range rs {
		fmt.Fprintf(&b, "user %s %s %s\n", userOf(users, u.Stage), ACLResets, u.Rules())
	}
	return b.String()
}

// PasswordEnv is the environment variable of nats-server holding a stage's NATS password in
// AccountConfig: KVCMGC_<STAGE>_NATS_PASSWORD.
func PasswordEnv(stage string) string { return "KVCMGC_" + strings.ToUpper(stage) + "_NATS_PASSWORD" }

// Account is the NATS account of kvcm-gc's users in AccountConfig.
const Account = "KVCMGC"

// AccountConfig renders the NATS users as a nats-server account (user and password, each
// password from the server's environment, PasswordEnv); users maps a stage to its user name
// (DefaultUser when absent).
func AccountConfig(ns []NATSUser, users map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n    users: [\n", Account)
	list := func(subs []string) string {
		q := make([]string, len(subs))
		for i, s := range subs {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, ", ")
	}
	for _, u := range ns {
		fmt.Fprintf(&b, "      {\n        # %s\n        user: %q\n        password: $%s\n", u.Role,
			userOf(users, u.Stage), PasswordEnv(u.Stage))
		fmt.Fprintf(&b, "        permissions: {\n          publish: {allow: [%s]}\n          "+
			"subscribe: {allow: [%s]}\n        }\n      }\n",
			list(u.Publish), list(u.Subscribe))
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

func userOf(users map[string]string, stage string) string {
	if u, ok := users[stage]; ok && u != "" {
		return u
	}
	return DefaultUser(stage)
}

// Placeholders of Template, filled in by the chart.
const (
	PlaceholderPrefix      = "{{prefix}}"       // subject_prefix
	PlaceholderCluster     = "{{cluster}}"      // the cluster as a subject token (kvcm.EncodeToken)
	PlaceholderObjects     = "{{objects}}"      // KVCMGC_<prefix>_<cluster>, the start of every stream and bucket name
	PlaceholderGuardPrefix = "{{guard_prefix}}" // guard.prefix
)

// Stand-ins that Names keeps verbatim in subjects and object names, replaced by the
// placeholders in Template.
const (
	standInPrefix  = "zzprefixzz"
	standInCluster = "zzclusterzz"
	standInGuard   = "zzguardzz:"
)

// Template is the chart's files/privileges.json: the users with placeholders for the
// deployment's names.
func Template() ([]byte, error) {
	n, err := subjects.NewNames(standInPrefix, standInCluster)
	if err != nil {
		return nil, err
	}
	objects := strings.TrimSuffix(n.BatchesStream(), "_BATCHES")
	r := strings.NewReplacer(objects, PlaceholderObjects, standInPrefix, PlaceholderPrefix,
		standInCluster, PlaceholderCluster, standInGuard, PlaceholderGuardPrefix)
	type redisUser struct {
		Stage string `json:"stage"`
		User  string `json:"user"`
		Role  string `json:"role"`
		Rules string `json:"rules"`
	}
	type optIn struct {
		Key     string   `json:"key"`
		Publish []string `json:"publish"`
	}
	type natsUser struct {
		Stage     string   `json:"stage"`
		User      string   `json:"user"`
		Role      string   `json:"role"`
		Publish   []string `json:"publish"`
		Subscribe []string `json:"subscribe"`
		OptIns    []optIn  `json:"opt_ins,omitempty"`
	}
	var out struct {
		Comment      string            `json:"comment"`
		Placeholders map[string]string `json:"placeholders"`
		Redis        []redisUser       `json:"redis"`
		NATS         []natsUser        `json:"nats"`
	}
	out.Comment = "Generated from deploy/privileges by `go generate ./deploy`; do not edit."
	out.Placeholders = map[string]string{
		PlaceholderPrefix:  "subject_prefix",
		PlaceholderCluster: "the cluster as one subject token (unchanged when made of [A-Za-z0-9_-])",
		PlaceholderObjects: "KVCMGC_<prefix>_<cluster>, the start of every stream and bucket name, " +
			"as `kvcm-gc status` prints it",
		PlaceholderGuardPrefix: "guard.prefix",
	}
	for _, u := range Redis(standInGuard) {
		out.Redis = append(
			out.Redis,
			redisUser{Stage: u.Stage, User: DefaultUser(u.Stage), Role: u.Role, Rules: r.Replace(u.Rules())},
		)
	}
	fill := func(in []string) []string {
		o := make([]string, len(in))
		for i, s := range in {
			o[i] = r.Replace(s)
		}
		return o
	}
	for _, u := range NATS(n) {
		nu := natsUser{Stage: u.Stage, User: DefaultUser(u.Stage), Role: u.Role,
			Publish: fill(u.Publish), Subscribe: fill(u.Subscribe)}
		for _, o := range u.OptIns {
			nu.OptIns = append(nu.OptIns, optIn{Key: o.Key, Publish: fill(o.Publish)})
		}
		out.NATS = append(out.NATS, nu)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // ">" stays readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
