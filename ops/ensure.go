package ops

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// EnsureResult is what `ensure` did: every stream, consumer and bucket of the topology,
// created, found identical, updated in place (with --update), or found differing and left as
// it is.
type EnsureResult struct {
	Objects []subjects.ObjectState `json:"objects"`
	// Update: the run updated what the server can update in place (subjects.WithUpdate).
	Update bool `json:"update"`
	// Updated counts the objects updated in place.
	Updated int `json:"updated"`
	// Differs counts the objects that differ from the configuration and were left as they
	// are; ensure then fails.
	Differs int `json:"differs"`
}

// Ensure creates what is missing of the topology the names and settings make, with the
// caller's (an administrator's) credentials, and compares what exists (subjects.EnsureReport).
// It changes nothing that exists unless update is true: then the objects whose differing
// fields the server updates in place are updated, all of them or, when one differs in a field
// the server cannot update, none.
func Ensure(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	s subjects.Settings,
	update bool,
	opts ...subjects.EnsureOption,
) (EnsureResult, error) {
	if update {
		opts = append(opts, subjects.WithUpdate())
	}
	objs, err := subjects.EnsureReport(ctx, js, names, s, opts...)
	if err != nil {
		return EnsureResult{}, err
	}
	r := EnsureResult{Objects: objs, Update: update}
	for _, o := range objs {
		switch o.State {
		case subjects.StateDiffers:
			r.Differs++
		case subjects.StateUpdated:
			r.Updated++
		}
	}
	return r, nil
}

// WriteTable prints one line per object, then the fields updated (object, field, was, now),
// then every differing field left as it is: object, field, have, want, and whether the server
// can update it.
func (r EnsureResult) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	tw := newTable(ew)
	fmt.Fprintln(tw, "KIND\tNAME\tSTATE")
	created := 0
	for _, o := range r.Objects {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Kind, o.Name, o.State)
		if o.State == subjects.StateCreated {
			created++
		}
	}
	_ = tw.Flush()
	if r.Updated > 0 {
		fmt.Fprintln(ew, "\nUPDATED FIELDS")
		tw = newTable(ew)
		fmt.Fprintln(tw, "OBJECT\tFIELD\tWAS\tNOW")
		for _, o := range r.Objects {
			if o.State != subjects.StateUpdated {
				continue
			}
			for _, f := range o.Fields {
				fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\n", o.Kind, o.Name, f.Field, f.Have, f.Want)
			}
		}
		_ = tw.Flush()
	}
	if r.Differs == 0 {
		fmt.Fprintf(ew, "\n%d created, %d updated, %d identical: the topology is as configured\n", created, r.Updated,
			len(r.Objects)-created-r.Updated)
		return ew.err
	}
	fmt.Fprintln(ew, "\nDIFFERING FIELDS (left as they are)")
	tw = newTable(ew)
	fmt.Fprintln(tw, "OBJECT\tFIELD\tHAVE\tWANT\tUPDATABLE")
	fixed := 0
	for _, o := range r.Objects {
		if o.State != subjects.StateDiffers {
			continue
		}
		for _, f := range o.Fields {
			up := "yes"
			if !f.Updatable {
				up = "no: delete and create it again"
				fixed++
			}
			fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\n", o.Kind, o.Name, f.Field, f.Have, f.Want, up)
		}
	}
	_ = tw.Flush()
	n := r.Differs
	switch {
	case fixed > 0:
		fmt.Fprintf(ew, "\n%d %s from the configuration, in %d %s the server cannot update in place; nothing\n"+
			"that exists was changed. Set the configuration back to the existing value, or drain the object,\n"+
			"delete it as the admin and run ensure again (docs/operating.md, Upgrading).\n",
			n, plural(n, "object differs", "objects differ"), fixed, plural(fixed, "field", "fields"))
	default:
		fmt.Fprintf(ew, "\n%d %s from the configuration; nothing of %s was changed. Every field can be updated\n"+
			"in place: run ensure --update (the chart's hook does, with admin.ensure.update), or change the\n"+
			"configuration to match.\n", n, plural(n, "object differs", "objects differ"), plural(n, "it", "them"))
	}
	return ew.err
}
