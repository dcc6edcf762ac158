// Package deleter is the deleter stage (DESIGN §6): for every target of a delete request it
// runs the delete protocol (protocol.go): an exact-value compare-and-swap to DELETING, the
// physical delete of the data where it may go (stuckdata.go for stuck DELETING locations),
// then an exact-value compare-and-delete, so that a location KVCM changed meanwhile is never
// touched. It counts what the deletes free (reclaim.go).
package deleter
