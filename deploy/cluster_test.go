package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/tools/kube"
)

// controlPlane is the one Kubernetes control plane of the package's cluster tests, started by
// the first of them; namespaces keep them apart.
var controlPlane kube.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	controlPlane.Stop()
	os.Exit(code)
}

// helmTimeout bounds every helm operation that waits. An install takes seconds here: a
// regression (a hook pod refused, a Deployment that never becomes available) fails within it
// rather than at the hook's own 300 s deadline.
const helmTimeout = "150s"

// clusterNS is one namespace of the control plane, labelled for the restricted Pod Security
// Standard, where the chart is installed with one values file.
type clusterNS struct {
	t      *testing.T
	c      *kube.Cluster
	name   string
	helm   string
	env    []string
	values string // the values file, "" for the defaults
	r      rendered
}

func newClusterNS(t *testing.T, name, values string) *clusterNS {
	t.Helper()
	c := controlPlane.Get(t)
	home := t.TempDir()
	n := &clusterNS{
		t: t, c: c, name: name, helm: tool(t, "helm"), values: values,
		// Helm's own files stay in the test's directory, away from the user's.
		env: append(c.Env(),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_DATA_HOME="+filepath.Join(home, "data")),
	}
	n.r = render(t, values)
	n.kubectlIn(namespaceManifest(name), "apply", "-f", "-")
	t.Cleanup(func() {
		// Not waited for: the namespace controller empties it in the background.
		_, _ = c.Kubectl(context.Background(), nil, "delete", "namespace", name, "--wait=false")
	})
	return n
}

// namespaceManifest is a namespace where PodSecurity admits only pods of the restricted
// profile: a pod of the chart that is not refused here runs in any namespace. The warning
// level makes the API server say so already when a Deployment is applied (enforcement
// refuses only its pods), and helm prints the warning.
func namespaceManifest(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: latest
`, name)
}

func (n *clusterNS) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Minute)
}

// kubectl runs kubectl in the namespace and returns its output, failing the test on an error.
func (n *clusterNS) kubectl(args ...string) []byte {
	n.t.Helper()
	return n.kubectlIn("", args...)
}

func (n *clusterNS) kubectlIn(stdin string, args ...string) []byte {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	out, err := n.c.Kubectl(ctx, in, append([]string{"-n", n.name}, args...)...)
	require.NoError(n.t, err)
	return out
}

// getJSON runs kubectl get … -o json and decodes its output.
func (n *clusterNS) getJSON(args ...string) map[string]any {
	n.t.Helper()
	var v map[string]any
	require.NoError(n.t, json.Unmarshal(n.kubectl(append(append([]string{"get"}, args...), "-o", "json")...), &v))
	return v
}

// helmRun runs helm on the release in the namespace; it returns standard output and error.
func (n *clusterNS) helmRun(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.helm, append(args, "--namespace", n.name)...)
	cmd.Env = n.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// helmOK runs helm and fails the test, with the namespace's events, when helm fails or
// prints a warning of the PodSecurity admission.
func (n *clusterNS) helmOK(args ...string) string {
	n.t.Helper()
	start := time.Now()
	out, errOut, err := n.helmRun(args...)
	if err != nil {
		n.t.Fatalf("helm %s: %v\n%s%s\nevents:\n%s", strings.Join(args, " "), err, out, errOut, n.events())
	}
	require.NotContains(n.t, errOut, "PodSecurity", "helm %s", strings.Join(args, " "))
	n.t.Logf("helm %s: %v", args[0], time.Since(start).Round(time.Millisecond))
	return out
}

func (n *clusterNS) valuesArgs() []string {
	if n.values == "" {
		return nil
	}
	return []string{"-f", n.values}
}

func (n *clusterNS) events() string {
	ctx, cancel := n.ctx()
	defer cancel()
	out, err := n.c.Kubectl(ctx, nil, "-n", n.name, "get", "events", "--sort-by=.lastTimestamp")
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// TestClusterInstall installs the chart on a real control plane with the default values and
// with the full ones, each in a namespace of the restricted Pod Security Standard, with the
// Secrets and volumes created as docs/operating.md tells an operator to: helm install
// --wait (the ensure hook's Job completes, every Deployment becomes available, the
// ServiceMonitor and the PrometheusRule are accepted), helm upgrade with a changed value,
// helm rollback, helm test, helm uninstall, and what stays after it, which operating.md
// lists.
//
// The default install is the one that failed on a real cluster: the hook's pod named the
// release's ServiceAccount, which Helm creates only after the pre-install hooks, so the
// ServiceAccount admission refused the pod until the Job's deadline failed the install.
func TestClusterInstall(t *testing.T) {
	for _, c := range []struct{ name, ns, values string }{
		{"default values", "gc-default", ""},
		{"full values", "gc-full", filepath.Join(chartDir, "ci", "full-values.yaml")},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newClusterNS(t, c.ns, c.values)
			n.createSecrets()
			n.createVolumes()

			n.helmOK(append([]string{"install", release, chartDir, "--wait", "--timeout", helmTimeout}, n.valuesArgs()...)...)
			n.checkInstalled(1)

			// An upgrade that changes a Deployment (one deleter more) and, where the hook
			// updates what it made (admin.ensure.update), JetStream's objects: the deleters'
			// window and the streams' size. The ensure hook runs again, with the new values.
			deleters := num(n.r.v, "stages", "deleter", "replicas")
			upgrade := append(append([]string{"upgrade", release, chartDir, "--wait", "--timeout", helmTimeout}, n.valuesArgs()...),
				"--set", fmt.Sprintf("stages.deleter.replicas=%d", deleters+1))
			update, _ := get(n.r.v, "admin", "ensure", "update").(bool)
			if update {
				upgrade = append(upgrade, "--set", "config.max_inflight_delete_requests=5", "--set", "config.jetstream.max_bytes=3221225472")
			}
			n.helmOK(upgrade...)
			n.checkInstalled(2)
			require.Equal(t, deleters+1, n.replicas("deleter"))
			if update {
				hooks := n.helmOK("get", "hooks", release)
				require.Contains(t, hooks, "- --update", "the upgrade's ensure hook updates")
				require.Contains(t, hooks, "max_inflight_delete_requests: 5")
				require.Contains(t, hooks, "max_bytes: 3221225472")
			}

			n.helmOK("rollback", release, "1", "--wait", "--timeout", helmTimeout)
			n.checkInstalled(3)
			require.Equal(t, deleters, n.replicas("deleter"))

			out := n.helmOK("test", release, "--timeout", helmTimeout)
			require.Contains(t, out, "Phase:          Succeeded", "helm test:\n%s", out)

			n.helmOK("uninstall", release, "--wait", "--timeout", helmTimeout)
			n.checkLeftAfterUninstall()
		})
	}
}

// createSecrets creates every identity's Secret as operating.md's "The Secrets" says, with
// the keys its table gives for these values, and the Secrets the values name for TLS and
// image pulls. checkInstalled then shows that every file a pod's configuration reads is a
// key of the Secret it mounts.
func (n *clusterNS) createSecrets() {
	n.t.Helper()
	v := n.r.v
	dir := n.t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(n.t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	natsKey := map[string]string{
		"userPassword": "nats-password", "creds": "nats.creds", "nkey": "nats.nk", "token": "nats-token",
	}[str(v, "nats", "auth")]
	for _, id := range append(n.r.stagesOf(), privileges.StageAdmin) {
		name := release + "-" + id
		existing := str(v, "stages", id, "existingSecret")
		if id == privileges.StageAdmin {
			existing = str(v, "admin", "existingSecret")
		}
		if existing != "" {
			name = existing
		}
		args := []string{"create", "secret", "generic", name}
		add := func(key string) {
			args = append(args, "--from-file="+key+"="+file(id+"."+key, id+"-"+key))
		}
		if slices.Contains([]string{"scanner", "prober", "walker", "sweeper", "admin"}, id) {
			add("registry-password")
		}
		if slices.Contains([]string{"scanner", "deleter", "sweeper", "admin"}, id) {
			add("meta-password")
		}
		if id == "prober" && str(v, "guard", "uri") != "" {
			add("guard-password")
		}
		if natsKey != "" {
			add(natsKey)
		}
		if b, _ := get(v, "nats", "tls", "clientCert").(bool); b {
			add("tls.crt")
			add("tls.key")
		}
		n.kubectl(args...)
	}
	for _, ca := range []string{str(v, "kvcm", "redisTLS", "caSecret"), str(v, "nats", "tls", "caSecret")} {
		if ca != "" {
			n.kubectl("create", "secret", "generic", ca, "--from-file=ca.crt="+file(ca+".crt", "ca"))
		}
	}
	for _, s := range list(v, "imagePullSecrets") {
		n.kubectl("create", "secret", "docker-registry", str(s, "name"),
			"--docker-server=registry.example.com", "--docker-username=kvcm-gc", "--docker-password=pull")
	}
}

// createVolumes creates the claims the storages' volumes name, each bound to a volume of its
// own, as a cluster's storage admin would: a pod whose claim is unbound is never scheduled.
// Nothing mounts them: the containers do not run.
func (n *clusterNS) createVolumes() {
	n.t.Helper()
	storages, _ := get(n.r.v, "storages").(map[string]any)
	names := make([]string, 0, len(storages))
	for name := range storages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		claim := str(storages[name], "volume", "persistentVolumeClaim", "claimName")
		if claim == "" {
			continue
		}
		pv := n.name + "-" + claim
		n.kubectlIn(fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[1]s
spec:
  capacity: {storage: 1Ti}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: /mnt/%[2]s}
  claimRef: {namespace: %[3]s, name: %[2]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %[2]s
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: %[1]s
  resources:
    requests: {storage: 1Ti}
`, pv, claim, n.name), "apply", "-f", "-")
		n.t.Cleanup(func() {
			_, _ = n.c.Kubectl(context.Background(), nil, "delete", "persistentvolume", pv, "--wait=false")
		})
	}
}

// replicas is the number of available replicas of a stage's Deployment.
func (n *clusterNS) replicas(stage string) int {
	n.t.Helper()
	return num(n.getJSON("deployment", release+"-"+stage), "status", "availableReplicas")
}

// checkInstalled checks the release at a revision once helm returned from --wait: the hook
// ran to completion once per install, upgrade and rollback hooks run, and its objects are
// gone; every Deployment the values render exists and is available; the monitoring
// objects exist as the values ask; every file a pod's configuration reads is in a Secret
// it mounts.
func (n *clusterNS) checkInstalled(revision int) {
	t := n.t
	t.Helper()
	status := n.helmOK("status", release, "-o", "json")
	var st struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(status), &st), status)
	require.Equal(t, revision, st.Version)
	require.Equal(t, "deployed", st.Info.Status)

	// The ensure hook: a Job that completed, then deleted with the objects of its hook.
	hookRuns := revision
	hooks := annotation(n.r.find(t, "Job", release+"-ensure"), "helm.sh/hook")
	if revision == 3 && !strings.Contains(hooks, "pre-rollback") {
		hookRuns = 2
	}
	require.Equal(t, hookRuns, n.completedJobs(release+"-ensure"), "completed ensure Jobs at revision %d:\n%s", revision, n.events())
	for _, o := range n.r.objects {
		if annotation(o, "helm.sh/hook") == "" || !strings.Contains(annotation(o, "helm.sh/hook-delete-policy"), "hook-succeeded") {
			continue
		}
		out, err := n.c.Kubectl(context.Background(), nil, "-n", n.name, "get", strings.ToLower(o.kind()), o.name(), "--ignore-not-found", "-o", "name")
		require.NoError(t, err)
		require.Empty(t, strings.TrimSpace(string(out)), "hook %s %s outlived its success", o.kind(), o.name())
	}

	// Every Deployment the values render, available with all its replicas.
	var want []string
	for _, d := range n.r.all("Deployment") {
		want = append(want, d.name())
	}
	var got []string
	for _, d := range list(n.getJSON("deployments"), "items") {
		name := str(d, "metadata", "name")
		got = append(got, name)
		require.Equal(t, num(d, "spec", "replicas"), num(d, "status", "availableReplicas"), "deployment %s", name)
		available := false
		for _, c := range list(d, "status", "conditions") {
			available = available || (str(c, "type") == "Available" && str(c, "status") == "True")
		}
		require.True(t, available, "deployment %s not Available", name)
	}
	sort.Strings(want)
	sort.Strings(got)
	require.Equal(t, want, got)

	// The monitoring objects, accepted by the API server under prometheus-operator's CRDs.
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		var names []string
		for _, o := range list(n.getJSON(strings.ToLower(kind)+"s.monitoring.coreos.com"), "items") {
			names = append(names, str(o, "metadata", "name"))
		}
		var rendered []string
		for _, o := range n.r.all(kind) {
			rendered = append(rendered, o.name())
		}
		require.Equal(t, rendered, names, kind)
	}
	if n.values != "" {
		require.NotEmpty(t, n.r.all("ServiceMonitor"), "the full values enable the ServiceMonitor")
		require.NotEmpty(t, n.r.all("PrometheusRule"), "the full values enable the PrometheusRule")
	}

	n.checkSecretFiles()
}

// checkSecretFiles shows that the Secrets created as the docs say hold every file each
// Deployment's configuration reads: kwok does not mount volumes, so nothing else would
// notice a key the docs forgot.
func (n *clusterNS) checkSecretFiles() {
	t := n.t
	t.Helper()
	secrets := map[string]map[string]any{}
	for _, s := range list(n.getJSON("secrets"), "items") {
		data, _ := get(s, "data").(map[string]any)
		secrets[str(s, "metadata", "name")] = data
	}
	for _, d := range list(n.getJSON("deployments"), "items") {
		pod := get(d, "spec", "template")
		stage := configOfPod(t, pod)
		files := n.r.loadConfig(t, stage).files
		// Which Secret each mount directory shows.
		volumes := map[string]string{}
		for _, v := range list(pod, "spec", "volumes") {
			if s := str(v, "secret", "secretName"); s != "" {
				volumes[str(v, "name")] = s
			}
		}
		mounts := map[string]string{}
		for _, m := range list(list(pod, "spec", "containers")[0], "volumeMounts") {
			if s, ok := volumes[str(m, "name")]; ok {
				mounts[str(m, "mountPath")] = s
			}
		}
		for _, f := range files {
			secret, ok := mounts[filepath.Dir(f)]
			require.True(t, ok, "%s reads %s, which no Secret mount holds", str(d, "metadata", "name"), f)
			require.Contains(t, secrets, secret, "%s mounts Secret %s, which the docs did not create", str(d, "metadata", "name"), secret)
			require.Contains(t, secrets[secret], filepath.Base(f), "%s reads %s: Secret %s lacks the key", str(d, "metadata", "name"), f, secret)
		}
	}
}

// completedJobs counts the runs of a Job that completed: the Job controller's Completed
// events, one per Job object (a hook's Job is a new object at every run).
func (n *clusterNS) completedJobs(name string) int {
	uids := map[string]bool{}
	for _, e := range list(n.getJSON("events", "--field-selector", "involvedObject.kind=Job,involvedObject.name="+name+",reason=Completed"), "items") {
		uids[str(e, "involvedObject", "uid")] = true
	}
	return len(uids)
}

// checkLeftAfterUninstall compares what stays in the namespace after helm uninstall with
// what operating.md's "Uninstalling, and what stays" lists: the kinds it names in code
// (`Secret`, …) are exactly the kinds left, and everything left is what the test created
// itself or what Kubernetes puts in every namespace.
func (n *clusterNS) checkLeftAfterUninstall() {
	t := n.t
	t.Helper()
	documented := documentedLeftovers(t)
	// Kubernetes' own objects of every namespace.
	own := map[string]bool{"ServiceAccount/default": true, "ConfigMap/kube-root-ca.crt": true}
	var left map[string]bool
	// The full values use every kind the docs name; the defaults have no volume to claim.
	want := func(kinds map[string]bool) bool {
		if n.values != "" {
			return equalSets(kinds, documented)
		}
		for k := range kinds {
			if !documented[k] {
				return false
			}
		}
		return true
	}
	var kinds map[string]bool
	if !assert.Eventually(t, func() bool {
		left = n.objects(own)
		kinds = map[string]bool{}
		for o := range left {
			kinds[strings.SplitN(o, "/", 2)[0]] = true
		}
		return want(kinds)
	}, time.Minute, 500*time.Millisecond) {
		t.Fatalf("left after helm uninstall: %v; operating.md lists the kinds %v", slices.Sorted(maps.Keys(left)), slices.Sorted(maps.Keys(documented)))
	}
	for o := range left {
		kind, name, _ := strings.Cut(o, "/")
		labels, _ := get(n.getJSON(kind, name), "metadata", "labels").(map[string]any)
		require.NotEqual(t, "Helm", labels["app.kubernetes.io/managed-by"], "%s outlived the release", o)
	}
}

// objects lists every object in the namespace as Kind/name, but events and those of skip.
func (n *clusterNS) objects(skip map[string]bool) map[string]bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	out, err := n.c.Kubectl(ctx, nil, "api-resources", "--verbs=list", "--namespaced", "-o", "name")
	require.NoError(n.t, err)
	var types []string
	for _, r := range strings.Fields(string(out)) {
		if r != "events" && r != "events.events.k8s.io" {
			types = append(types, r)
		}
	}
	got := map[string]bool{}
	for _, o := range list(n.getJSON(strings.Join(types, ",")), "items") {
		key := str(o, "kind") + "/" + str(o, "metadata", "name")
		if !skip[key] {
			got[key] = true
		}
	}
	return got
}

// documentedLeftovers are the Kubernetes kinds operating.md says stay in the namespace after
// helm uninstall: the kinds in code spans of its "in the namespace" line.
func documentedLeftovers(t *testing.T) map[string]bool {
	t.Helper()
	section := docSection(t, filepath.Join("..", "docs", "operating.md"), "## Uninstalling, and what stays")
	for _, line := range strings.Split(section, "\n- ") {
		if !strings.HasPrefix(line, "in the namespace") {
			continue
		}
		kinds := map[string]bool{}
		for i, part := range strings.Split(line, "`") {
			if i%2 == 1 && part != "" && part[0] >= 'A' && part[0] <= 'Z' && !strings.ContainsAny(part, " /.") {
				kinds[part] = true
			}
		}
		require.NotEmpty(t, kinds, "operating.md's line on the namespace names no kind in code:\n%s", line)
		return kinds
	}
	t.Fatalf("operating.md's %q has no line starting %q", "Uninstalling, and what stays", "- in the namespace")
	return nil
}

// docSection returns a markdown file's section under heading, up to the next heading of
// the same or a higher level outside a code block.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	level := strings.Index(heading, " ")
	var out []string
	in, fenced := false, false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			hashes := len(line) - len(strings.TrimLeft(line, "#"))
			if in && hashes <= level {
				break
			}
			if line == heading {
				in = true
				continue
			}
		}
		if in {
			out = append(out, line)
		}
	}
	require.True(t, in, "%s has no %q", path, heading)
	return strings.Join(out, "\n")
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
