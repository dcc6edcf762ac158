package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// pki is the control plane's certificates: one self-signed CA that signs the API server's
// serving certificate and every client certificate, and the key pair that signs and checks
// service-account tokens. Each is written to dir as PEM files.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// identity is one client of the API server: its user name (the certificate's CN) and groups
// (the O fields), as the API server's x509 authenticator reads them.
type identity struct {
	name   string
	user   string
	groups []string
}

// The clients of the API server. The controller-manager and the scheduler get the users the
// default RBAC bindings name (system:kube-controller-manager, system:kube-scheduler), so
// their rights are what a real cluster gives them; the admin (kubectl, helm) and kwok, which
// plays every node's kubelet, are cluster admins.
var (
	adminIdentity             = identity{name: "admin", user: "kubernetes-admin", groups: []string{"system:masters"}}
	controllerManagerIdentity = identity{name: "controller-manager", user: "system:kube-controller-manager"}
	schedulerIdentity         = identity{name: "scheduler", user: "system:kube-scheduler"}
	kwokIdentity              = identity{name: "kwok", user: "kwok-controller", groups: []string{"system:masters"}}
)

// newPKI creates the CA and the service-account key pair under dir.
func newPKI(dir string) (*pki, error) {
	ca, err := servers.NewCA("kvcm-gc-test-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: ca.Cert, caKey: ca.Key}
	if err := p.write("ca.crt", "CERTIFICATE", ca.DER); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	if err := p.write("sa.key", "EC PRIVATE KEY", saDER); err != nil {
		return nil, err
	}
	if err := p.write("sa.pub", "PUBLIC KEY", saPub); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) write(name, blockType string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// serving issues the API server's certificate, for every name a client inside or outside
// the cluster uses, as <name>.crt and <name>.key.
func (p *pki) serving(name string, serviceIP net.IP) error {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), serviceIP},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// client issues the client certificate of id as <id.name>.crt and <id.name>.key.
func (p *pki) client(id identity) error {
	return p.issue(id.name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.user, Organization: id.groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p *pki) issue(name string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate %s key: %w", name, err)
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return fmt.Errorf("draw %s serial: %w", name, err)
	}
	tmpl.SerialNumber = sn
	tmpl.NotBefore = p.caCert.NotBefore
	tmpl.NotAfter = p.caCert.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("create %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode %s key: %w", name, err)
	}
	if err := p.write(name+".crt", "CERTIFICATE", der); err != nil {
		return err
	}
	return p.write(name+".key", "EC PRIVATE KEY", keyDER)
}
