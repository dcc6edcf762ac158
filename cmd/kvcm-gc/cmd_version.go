package main

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:    "version",
		Summary: "print the version",
		Run: func(_ context.Context, e *cli.Env) error {
			cli.WriteVersion(e.Stdout, "kvcm-gc")
			return nil
		},
	}
}
