package kube

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindTools(t *testing.T) {
	bin, crds := t.TempDir(), t.TempDir()
	_, err := FindTools([]string{bin, crds})
	require.ErrorContains(t, err, "find etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, kwok-stages.yaml in ")

	for _, f := range []string{etcdName, apiServerName, controllerManagerName, schedulerName, kubectlName, kwokName, kwokStagesName} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, f), nil, 0o755))
	}
	for _, f := range []string{"b.crd.yaml", "a.crd.yaml", "notes.yaml"} {
		require.NoError(t, os.WriteFile(filepath.Join(crds, f), nil, 0o644))
	}
	got, err := FindTools([]string{bin, crds})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(bin, apiServerName), got.APIServer)
	require.Equal(t, filepath.Join(bin, kwokStagesName), got.KwokStages)
	require.Equal(t, []string{filepath.Join(crds, "a.crd.yaml"), filepath.Join(crds, "b.crd.yaml")}, got.CRDs)

	_, err = FindTools(nil)
	require.ErrorIs(t, err, ErrNoTools)
	t.Setenv(ToolsEnv, "")
	_, err = ToolsFromEnv()
	require.ErrorIs(t, err, ErrNoTools)
}

// TestPKI checks the certificates as the API server and its clients check them: the serving
// certificate for every name a client uses, each client's user and groups.
func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir)
	require.NoError(t, err)
	require.NoError(t, p.serving("apiserver", net.ParseIP(serviceIP)))
	require.NoError(t, p.client(adminIdentity))
	require.NoError(t, p.client(controllerManagerIdentity))

	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	load := func(name string) *x509.Certificate {
		data, err := os.ReadFile(filepath.Join(dir, name+".crt"))
		require.NoError(t, err)
		block, _ := pem.Decode(data)
		require.NotNil(t, block, name)
		c, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		return c
	}
	server := load("apiserver")
	for _, name := range []string{"127.0.0.1", serviceIP, "localhost", "kubernetes.default.svc"} {
		_, err := server.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		require.NoError(t, err, name)
	}
	_, err = server.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err, "the serving certificate is no client's")

	for _, id := range []identity{adminIdentity, controllerManagerIdentity} {
		c := load(id.name)
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, id.name)
		require.Equal(t, id.user, c.Subject.CommonName)
		require.Equal(t, id.groups, c.Subject.Organization)
	}
	require.NotEqual(t, load("admin").SerialNumber, load("controller-manager").SerialNumber)

	for _, f := range []string{"sa.key", "sa.pub", "admin.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
}
