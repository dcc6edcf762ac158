package app

import (
	"maps"

	"github.com/kvcm-gc/kvcm-gc/config"
)

// OptionsOf translates the configuration into what Run takes. Logger, Metrics, Reg and
// Health are the caller's to fill.
func OptionsOf(c config.Config) (Options, error) {
	reg, guardConn, err := c.Conns()
	if err != nil {
		return Options{}, err
	}
	sc, pc, dc := c.StageConfigs()
	return Options{
		Cluster:        c.Cluster,
		Prefix:         c.Prefix,
		Registry:       reg,
		Meta:           c.MetaConn(),
		MetaURIs:       maps.Clone(c.Meta.StoreURIs),
		GroupStoreURIs: maps.Clone(c.Meta.GroupStoreURIs),
		Storage:        c.StorageOptions(),
		DryRun:         c.DryRun,
		EmptyBlock:     c.EmptyBlockPolicy(),
		Guard:          c.Guard.Kind,
		GuardConn:      guardConn,
		GuardKeyPrefix: c.Guard.Prefix,
		Scanner:        sc,
		Prober:         pc,
		Deleter:        dc,
		JetStream:      c.Settings(),
		ProberWorkers:  c.Workers.Prober,
		DeleterWorkers: c.DeleterWorkers(),
		Sweep:          c.SweepConfig(),
		SweeperWorkers: c.SweeperWorkers(),
		SkipEnsure:     c.JS.SkipEnsure,
		APITimeout:     c.JS.APITimeout,
	}, nil
}
