package embedded

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Auth secures the embedded server: who may connect (users, nkeys) and TLS, from flags,
// or anything a nats-server configuration file can say (accounts, per-user permissions,
// TLS, a cluster) from ConfigFile. Users and nkeys given here are allowed everything in
// the default account; per-user permissions need ConfigFile.
type Auth struct {
	// ConfigFile is a nats-server configuration file. Its settings win over Config's
	// address and store directory; JetStream is always on.
	ConfigFile string
	// Account is the account of the embedding process's own connection when ConfigFile
	// defines accounts (the one holding Tally's streams).
	Account string
	// Users are name:password pairs; a password may be a bcrypt hash ($2a$…, see
	// nats server passwd), so that the flag or file holds no clear password.
	Users []string
	// NKeys are public user nkeys (U…); such a user proves itself with its seed.
	NKeys []string
	// TLSCert and TLSKey make the server require TLS. TLSCA, when set, also makes it
	// require a client certificate signed by one of its CAs.
	TLSCert, TLSKey, TLSCA string
}

// Enabled reports whether a is more than an open server.
func (a Auth) Enabled() bool {
	return a.ConfigFile != "" || len(a.Users) > 0 || len(a.NKeys) > 0 || a.TLSCert != "" || a.TLSKey != "" || a.TLSCA != ""
}

func (a Auth) apply(opts *server.Options) error {
	for _, u := range a.Users {
		name, pw, ok := strings.Cut(u, ":")
		if !ok || name == "" || pw == "" {
			return fmt.Errorf("%w: user %q: want name:password", ErrAuth, name)
		}
		opts.Users = append(opts.Users, &server.User{Username: name, Password: pw})
	}
	for _, k := range a.NKeys {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("%w: %q is not a public user nkey (U…)", ErrAuth, k)
		}
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: k})
	}
	if (a.TLSCert == "") != (a.TLSKey == "") || (a.TLSCA != "" && a.TLSCert == "") {
		return fmt.Errorf("%w: TLS needs a certificate and its key (and a CA only to verify clients)", ErrAuth)
	}
	if a.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: a.TLSCert, KeyFile: a.TLSKey, CaFile: a.TLSCA, Verify: a.TLSCA != ""})
		if err != nil {
			return fmt.Errorf("%w: TLS: %w", ErrAuth, err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, a.TLSCA != ""
		opts.TLSCert, opts.TLSKey, opts.TLSCaCert = a.TLSCert, a.TLSKey, a.TLSCA
		if opts.TLSTimeout == 0 {
			opts.TLSTimeout = 2
		}
	}
	return nil
}

// requiresAuth reports whether the server admits only known users.
func requiresAuth(opts *server.Options) bool {
	return len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" ||
		len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0 || opts.AuthCallout != nil
}

// Internal is the embedding process's own connection to its server: in-process, so no
// TLS is needed, and, when the server requires authentication, a user of its own with
// a fresh nkey (its seed never leaves the process) allowed everything.
type Internal struct {
	kp     nkeys.KeyPair
	pub    string
	signed bool // the server requires it to sign
}

// NewInternal returns a fresh identity for the process's own connection.
func NewInternal() (*Internal, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("cannot create an nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return &Internal{kp: kp, pub: pub}, nil
}

// admit adds the internal user to opts when the server requires authentication; with
// accounts, to the named one.
func (in *Internal) admit(opts *server.Options, account string) error {
	if !requiresAuth(opts) {
		return nil
	}
	switch {
	case len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0 || opts.AuthCallout != nil:
		return fmt.Errorf("%w: a server in operator mode or with auth callout cannot admit tallyd's own user; run nats-server apart and join it with --nats and --creds", ErrAuth)
	case opts.Authorization != "":
		return fmt.Errorf("%w: a server token cannot be combined with tallyd's own user; give users or nkeys instead", ErrAuth)
	case opts.Username != "": // a single user becomes one of several, as the server requires
		opts.Users = append(opts.Users, &server.User{Username: opts.Username, Password: opts.Password})
		opts.Username, opts.Password = "", ""
	}
	u := &server.NkeyUser{Nkey: in.pub, Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{">"}}, Subscribe: &server.SubjectPermission{Allow: []string{">"}}}}
	if len(opts.Accounts) > 0 || account != "" {
		var names []string
		for _, a := range opts.Accounts {
			names = append(names, a.GetName())
			if a.GetName() == account {
				u.Account = a
			}
		}
		if u.Account == nil {
			return fmt.Errorf("%w: say which account of %v holds Tally's streams (--nats-account), not %q", ErrAuth, slices.Sorted(slices.Values(names)), account)
		}
	}
	opts.Nkeys = append(opts.Nkeys, u)
	in.signed = true
	return nil
}

// URL is the URL to give nats.Connect with Options: s's, without TLS, which an
// in-process connection does not need.
func (in *Internal) URL(s *server.Server) string {
	return strings.Replace(s.ClientURL(), "tls://", "nats://", 1)
}

// Options connect to s in-process as the internal user.
func (in *Internal) Options(s *server.Server) []nats.Option {
	o := []nats.Option{nats.InProcessServer(s)}
	if in.signed {
		o = append(o, nats.Nkey(in.pub, in.kp.Sign))
	}
	return o
}
