// Package deploy holds the files that run Tally on a NATS cluster: nats-server configs
// and accounts, compose and systemd files, a Grafana dashboard. It has no code; its test
// loads nats/accounts.conf into a real nats-server and proves each user's permissions
// with a running Tally node, and checks the dashboard names only metrics that exist.
package deploy
