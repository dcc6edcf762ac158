// Package deploy holds kvcm-gc's deployment files, checked against the code by its tests:
//
//   - helm/kvcm-gc: the Helm chart, the one way to install it (docs/operating.md): a
//     Deployment per stage, each with its own Redis user, NATS identity and Secret (the
//     scanner replicas divide the metadata stores, a lease per store; probers, deleters and
//     sweepers share their consumers; walkers divide the swept storages), the configuration
//     of each stage, the ensure hook that creates the streams, consumers and buckets as the
//     admin, disruption budgets, a network policy, and the ServiceMonitor and PrometheusRule
//     when asked. templates/_alerts.tpl renders the alerting rules from the values (their
//     windows follow round_pause and sweep_round_pause; each alert can be turned off or
//     re-thresholded), and files/alerts.yaml is what the defaults render; files/privileges.json
//     holds every identity's Redis ACL and NATS permissions (generated from
//     deploy/privileges); ci/full-values.yaml turns every part on;
//   - privileges: the least privilege of every stage on Redis and NATS, the one source of the
//     ACL file and the NATS account the chart renders;
//   - prometheus/alerts_test.yaml: promtool's unit tests of every alert, generated from the
//     cases in alerts_test.go;
//   - grafana/kvcm-gc.json: a dashboard, with a row per metadata store and per swept storage;
//   - Dockerfile: the image the chart runs.
//
// The tests render the chart and check what it makes, and install, upgrade, roll back, test
// and uninstall it with both values files on a real Kubernetes control plane (tools/kube),
// in namespaces of the restricted Pod Security Standard.
//
// Regenerate the generated files with `go generate ./deploy` (a test fails while they
// differ). The example configuration kvcm-gc.example.yaml documents every key.
package deploy

//go:generate go test -run TestGenerated|TestAlertsFile|TestAlertUnitTests -update .
