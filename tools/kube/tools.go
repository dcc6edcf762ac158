package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ToolsEnv names the environment variable that lists the directories holding the control
// plane's tools, separated like PATH. `make tools` builds them into its tools cache and
// `make test` sets it; `make -s tools-env` prints it for a shell.
const ToolsEnv = "KUBE_TOOLS"

// Tools are the files a control plane is started from.
type Tools struct {
	Etcd              string
	APIServer         string
	ControllerManager string
	Scheduler         string
	Kubectl           string
	Kwok              string
	// KwokStages holds the Stage documents kwok plays nodes and pods by (kwok refuses to start
	// without stages).
	KwokStages string
	// CRDs are manifests of CustomResourceDefinitions applied once the API server is up.
	CRDs []string
}

// The file names FindTools looks for. Every file named *.crd.yaml is a CRD manifest.
const (
	etcdName              = "etcd"
	apiServerName         = "kube-apiserver"
	controllerManagerName = "kube-controller-manager"
	schedulerName         = "kube-scheduler"
	kubectlName           = "kubectl"
	kwokName              = "kwok"
	kwokStagesName        = "kwok-stages.yaml"
	crdSuffix             = ".crd.yaml"
)

// ErrNoTools is returned by FindTools when no directory was given.
var ErrNoTools = errors.New(ToolsEnv + " is not set")

// ToolsFromEnv finds the tools in the directories ToolsEnv lists.
func ToolsFromEnv() (Tools, error) {
	v := os.Getenv(ToolsEnv)
	if v == "" {
		return Tools{}, ErrNoTools
	}
	return FindTools(filepath.SplitList(v))
}

// FindTools finds each tool in the first of dirs that holds it, and every CRD manifest in
// all of them. It names every tool it did not find.
func FindTools(dirs []string) (Tools, error) {
	if len(dirs) == 0 {
		return Tools{}, ErrNoTools
	}
	var t Tools
	var missing []string
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{etcdName, &t.Etcd},
		{apiServerName, &t.APIServer},
		{controllerManagerName, &t.ControllerManager},
		{schedulerName, &t.Scheduler},
		{kubectlName, &t.Kubectl},
		{kwokName, &t.Kwok},
		{kwokStagesName, &t.KwokStages},
	} {
		for _, d := range dirs {
			p := filepath.Join(d, f.name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				*f.dst = p
				break
			}
		}
		if *f.dst == "" {
			missing = append(missing, f.name)
		}
	}
	for _, d := range dirs {
		crds, err := filepath.Glob(filepath.Join(d, "*"+crdSuffix))
		if err != nil {
			return Tools{}, fmt.Errorf("list crds in %s: %w", d, err)
		}
		t.CRDs = append(t.CRDs, crds...)
	}
	sort.Strings(t.CRDs)
	if len(missing) > 0 {
		return Tools{}, fmt.Errorf("find %s in %s: not found", strings.Join(missing, ", "), strings.Join(dirs, string(filepath.ListSeparator)))
	}
	return t, nil
}
