package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// connectRetry is the pause between two connection attempts at startup.
const connectRetry = 250 * time.Millisecond

// ConnectNATS connects to the configured NATS server(s), signing in with the credentials
// file, the nkey seed, user and password, or a token, over TLS when configured. Startup waits up to
// nats.connect_timeout for a server that is not up yet (processes of a deployment start in
// any order); once connected, the client reconnects for ever.
//
// An operator's command (Command.Tool) with nats.url empty connects where the all-in-one
// process's embedded server listens (nats.embedded.listen), so `kvcm-gc status --config
// same.yaml` works with the file `kvcm-gc run` reads.
func (e *Env) ConnectNATS(ctx context.Context) (*nats.Conn, error) {
	url := e.Config.NATS.URL
	if url == "" && e.tool {
		var err error
		if url, err = EmbeddedURL(e.Config.NATS.Embedded); err != nil {
			return nil, UsageError(err)
		}
	}
	c := e.Config.NATS
	if e.tool {
		// The operator's commands run as the admin, which replies arrive to under its inbox.
		if names, err := e.Names(); err == nil {
			c = WithInbox(c, names, subjects.IdentityAdmin)
		}
	}
	nc, err := ConnectNATS(ctx, c, url, "kvcm-gc-"+e.Name, e.Logger)
	if err == nil && e.perm != nil {
		e.perm.Attach(nc)
	}
	return nc, err
}

// WithInbox returns c with its reply inbox set to identity's (subjects.InboxPrefix: a stage,
// or "admin"), unless nats.inbox_prefix sets one: the identity's NATS user may subscribe to its
// own inbox only (docs/security.md).
func WithInbox(c config.NATSConfig, names subjects.Names, identity string) config.NATSConfig {
	if c.InboxPrefix == "" {
		c.InboxPrefix = names.InboxPrefix(identity)
	}
	return c
}

// Identity names who a connection with c signs in as, for errors: its user, the user of its
// credentials file, its nkey seed file, or its token.
func Identity(c config.NATSConfig) string {
	switch {
	case c.CredentialsFile != "":
		if name := credsUser(c.CredentialsFile); name != "" {
			return fmt.Sprintf("user %q (credentials file %s)", name, c.CredentialsFile)
		}
		return "the user of credentials file " + c.CredentialsFile
	case c.NkeySeedFile != "":
		return "the nkey user of seed file " + c.NkeySeedFile
	case c.User != "":
		return fmt.Sprintf("user %q", c.User)
	case c.Token != "":
		return "the token's user"
	}
	return "the connection's user (no credentials)"
}

// credsUser reads the name of a credentials file's user from its JWT ("" if it cannot).
func credsUser(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	token, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return ""
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return ""
	}
	return uc.Name
}

// EmbeddedURL is the client URL of the embedded server the run command starts on c.Listen: a
// wildcard host is reached on loopback.
func EmbeddedURL(c config.EmbeddedJS) (string, error) {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "", fmt.Errorf("nats.url: required, and nats.embedded.listen %q is not host:port: %w", c.Listen, err)
	}
	if port == "0" {
		return "", fmt.Errorf("nats.url: required (nats.embedded.listen %q lets the embedded "+
			"server choose its port)", c.Listen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, port), nil
}

// ConnectNATS connects to url with the settings of c (see Env.ConnectNATS).
func ConnectNATS(
	ctx context.Context,
	c config.NATSConfig,
	url, defaultName string,
	log *slog.Logger,
) (*nats.Conn, error) {
	if url == "" {
		return nil, errors.New("nats.url: required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := c.Name
	if name == "" {
		name = defaultName
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("nats error", "err", err) }),
	}
	switch {
	case c.CredentialsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredentialsFile))
	case c.NkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CAFile))
	}
	if c.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(c.TLS.CertFile, c.TLS.KeyFile))
	}

	deadline := time.Now().Add(c.ConnectTimeout)
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			log.Info("nats connected", "url", nc.ConnectedUrlRedacted(), "name", name)
			return nc, nil
		}
		// Authentication and TLS failures do not heal by waiting.
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to nats: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to nats: %w", ctx.Err())
		case <-time.After(connectRetry):
		}
	}
}
