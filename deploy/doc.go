// Package deploy holds the files that run Tally on a NATS cluster: nats-server configs
// and accounts, compose and systemd files, a Grafana dashboard, Prometheus scraping and
// alerting rules. Its only code is probe/, the container health check. Its tests load
// nats/accounts.conf into a real nats-server and prove each user's permissions, and
// each denial, with a running Tally node and real clients on their inbox prefixes;
// they check compose.yaml, the Dockerfile and .dockerignore, and that the dashboard and
// the alerts name only metrics that exist.
package deploy
