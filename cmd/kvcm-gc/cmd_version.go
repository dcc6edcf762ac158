package main

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:    "version",
		Summary: "print the version, VCS revision, build time and Go version (also --version)",
		Run: func(_ context.Context, e *cli.Env) error {
			version.Get().Write(e.Stdout, "kvcm-gc")
			return nil
		},
	}
}
