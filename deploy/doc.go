// Package deploy holds kvcm-gc's deployment files, checked against the code by its tests:
//
//   - kubernetes/: a Deployment per stage (two scanner replicas sharing the leader lease,
//     scalable probers and deleters), the configuration as a ConfigMap, the metrics Service,
//     and examples of the credentials Secret and a storage volume;
//   - nats/: the streams and consumers as files for `nats stream add --config` and
//     `nats consumer add --config`, and create.sh, which also creates the KV buckets. They are
//     generated from the ConfigMap's configuration through subjects.Topology; regenerate them
//     with `go generate ./deploy` after changing it (a test fails while they differ);
//   - prometheus/alerts.yaml: alerting rules; grafana/kvcm-gc.json: a dashboard;
//   - Dockerfile: the image the Deployments run.
//
// The example configuration kvcm-gc.example.yaml documents every key.
package deploy

//go:generate go test -run TestNATSDefinitions|TestGenerated -update .
