package ops

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// EnsureResult is what `ensure` did: every stream, consumer and bucket of the topology,
// created, found identical, or found differing and left as it is.
type EnsureResult struct {
	Objects []subjects.ObjectState `json:"objects"`
	// Differs counts the objects that differ from the configuration; ensure then fails.
	Differs int `json:"differs"`
}

// Ensure creates what is missing of the topology the names and settings make, with the
// caller's (an administrator's) credentials, and compares what exists, changing none of it
// (subjects.EnsureReport): an existing object is changed by an operator, never by surprise.
func Ensure(ctx context.Context, js jetstream.JetStream, names subjects.Names, s subjects.Settings, opts ...subjects.EnsureOption) (EnsureResult, error) {
	objs, err := subjects.EnsureReport(ctx, js, names, s, opts...)
	if err != nil {
		return EnsureResult{}, err
	}
	r := EnsureResult{Objects: objs}
	for _, o := range objs {
		if o.State == subjects.StateDiffers {
			r.Differs++
		}
	}
	return r, nil
}

// WriteTable prints one line per object, then every differing field: object, field, have,
// want, and whether the server can update it.
func (r EnsureResult) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tSTATE")
	created := 0
	for _, o := range r.Objects {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Kind, o.Name, o.State)
		if o.State == subjects.StateCreated {
			created++
		}
	}
	_ = tw.Flush()
	if r.Differs == 0 {
		fmt.Fprintf(ew, "\n%d %s, %d identical: the topology is as configured\n", created,
			plural(created, "object created", "objects created"), len(r.Objects)-created)
		return ew.err
	}
	fmt.Fprintln(ew, "\nDIFFERING FIELDS (left as they are)")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OBJECT\tFIELD\tHAVE\tWANT\tUPDATABLE")
	for _, o := range r.Objects {
		for _, f := range o.Fields {
			up := "yes"
			if !f.Updatable {
				up = "no: delete and create it again"
			}
			fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\n", o.Kind, o.Name, f.Field, f.Have, f.Want, up)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(ew, "\n%d %s from the configuration; nothing of %s was changed. Change the configuration to\n"+
		"match, or change the %s with the nats CLI (a field that is not updatable: drain, delete and\n"+
		"run ensure again), then run ensure again.\n", r.Differs, plural(r.Differs, "object differs", "objects differ"),
		plural(r.Differs, "it", "them"), plural(r.Differs, "object", "objects"))
	return ew.err
}
