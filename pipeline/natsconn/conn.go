package natsconn

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
)

// Auth says how to authenticate to NATS and secure the connection. The zero value is a
// plain connection, with whatever credentials the URL carries (nats://user:pw@host).
type Auth struct {
	// Creds is a credentials file: a user JWT and its nkey seed (NATS accounts run
	// by an operator, such as nsc creates).
	Creds string
	// NKey is a file holding a user nkey seed (SU…).
	NKey string
	// TLSCert and TLSKey are a client certificate, for servers that verify clients.
	TLSCert, TLSKey string
	// TLSCA holds the CA certificates the servers' certificates must chain to; without
	// it the system's roots are used.
	TLSCA string
	// Context is a nats CLI context: its name (as `nats context ls` shows,
	// ~/.config/nats/context/<name>.json) or the path of such a JSON file. It supplies
	// the URL when none is given, and credentials, TLS and inbox prefix that the
	// fields above do not set.
	Context string
	// InboxPrefix replaces _INBOX as the prefix of the subjects replies come back on, so
	// that a deployment can allow each user to subscribe to its own replies only.
	InboxPrefix string
}

// Flags registers --creds, --nkey, --tls-cert, --tls-key, --tls-ca, --context and
// --inbox-prefix on fs, each defaulting to a's value.
func (a *Auth) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.Creds, "creds", a.Creds, "NATS user credentials file (JWT and nkey seed)")
	fs.StringVar(&a.NKey, "nkey", a.NKey, "file holding a NATS user nkey seed")
	fs.StringVar(&a.TLSCert, "tls-cert", a.TLSCert, "client certificate for NATS over TLS (with --tls-key)")
	fs.StringVar(&a.TLSKey, "tls-key", a.TLSKey, "key of --tls-cert")
	fs.StringVar(&a.TLSCA, "tls-ca", a.TLSCA, "CA certificates NATS servers' certificates must chain to")
	fs.StringVar(&a.Context, "context", a.Context, "nats CLI context (a name or a JSON file): the URL, credentials and TLS the other flags do not set")
	fs.StringVar(&a.InboxPrefix, "inbox-prefix", a.InboxPrefix, "subject prefix of reply inboxes instead of _INBOX, e.g. _INBOX_alice where each user may read only its own")
}

// Options returns the URL to connect to and the options that authenticate as a says:
// urls when not empty, else the context's URL, else def.
func (a Auth) Options(urls, def string) (string, []nats.Option, error) {
	var opts []nats.Option
	if a.Context != "" {
		c, err := loadContext(a.Context)
		if err != nil {
			return "", nil, err
		}
		if opts, err = c.NATSOptions(); err != nil {
			return "", nil, fmt.Errorf("%w: context %s: %w", ErrConfig, a.Context, err)
		}
		if urls == "" {
			urls = c.ServerURL()
		}
	}
	if urls == "" {
		urls = def
	}
	// Later options win over the context's: the flags are the more specific.
	if a.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	if a.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return "", nil, fmt.Errorf("%w: nkey %s: %w", ErrConfig, a.NKey, err)
		}
		opts = append(opts, o)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return "", nil, fmt.Errorf("%w: a TLS client certificate needs its key (--tls-cert and --tls-key)", ErrConfig)
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(a.InboxPrefix))
	}
	return urls, opts, nil
}

// Connect connects to urls (else the context's, else def) as a says, with opts after
// a's. An error names the URL without its password.
func (a Auth) Connect(urls, def string, opts ...nats.Option) (*nats.Conn, error) {
	url, o, err := a.Options(urls, def)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", Redacted(url), err)
	}
	return nc, nil
}

// loadContext reads a nats CLI context by name, or from a file when ref is a path.
func loadContext(ref string) (*natscontext.Context, error) {
	var c *natscontext.Context
	var err error
	if strings.HasSuffix(ref, ".json") || strings.ContainsRune(ref, filepath.Separator) {
		c, err = natscontext.NewFromFile(ref)
	} else {
		c, err = natscontext.New(ref, true)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: context %s: %w", ErrConfig, ref, err)
	}
	return c, nil
}
