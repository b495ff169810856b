package main

import (
	"flag"
	"strings"

	"github.com/tally-dev/tally/stages/node"
)

// natsFlags are how tallyd secures its embedded NATS server (--nats-*) and how it
// authenticates to servers it joins with --nats (--creds, --nkey, --tls-*, --context).
func natsFlags(fs *flag.FlagSet, cfg *node.Config) {
	cfg.NATSAuth.Flags(fs)
	srv := &cfg.NATSServer
	fs.StringVar(&srv.ConfigFile, "nats-config", srv.ConfigFile, "nats-server configuration file for the embedded server (users, accounts, permissions, TLS, cluster); its address and store win over --listen and --data")
	fs.StringVar(&srv.Account, "nats-account", srv.Account, "the account of --nats-config that holds Tally's streams, when it defines accounts")
	fs.Func("nats-user", "admit this user to the embedded server, name:password (comma-separated or repeated); a bcrypt hash (nats server passwd) as the password keeps it out of the flag", func(v string) error {
		srv.Users = append(srv.Users, splitList(v)...)
		return nil
	})
	fs.Func("nats-nkey", "admit this public user nkey (U…) to the embedded server (comma-separated or repeated)", func(v string) error {
		srv.NKeys = append(srv.NKeys, splitList(v)...)
		return nil
	})
	fs.StringVar(&srv.TLSCert, "nats-tls-cert", srv.TLSCert, "certificate of the embedded server: clients must then use TLS (with --nats-tls-key)")
	fs.StringVar(&srv.TLSKey, "nats-tls-key", srv.TLSKey, "key of --nats-tls-cert")
	fs.StringVar(&srv.TLSCA, "nats-tls-ca", srv.TLSCA, "CA certificates: the embedded server then requires client certificates they signed")
}

func splitList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
