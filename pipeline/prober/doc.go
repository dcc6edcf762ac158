// Package prober is the prober stage (DESIGN §5): it judges each batch the scanner published
// by the rules (rules.go: orphan WRITING locations, SERVING locations whose data is gone, and
// with collect_deleting stuck DELETING ones, deleting.go), probing storage in chunks of at
// most 512 URIs, and gathers the targets of an instance into delete requests for the deleter
// (gather.go).
//
// Every rule fails closed: anything uncertain means keep, and is counted by its reason.
package prober
