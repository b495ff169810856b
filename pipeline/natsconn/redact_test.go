package natsconn

import "testing"

func TestRedacted(t *testing.T) {
	f := func(t *testing.T, in, want string) {
		t.Helper()
		if got := Redacted(in); got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
	}
	f(t, "nats://127.0.0.1:4222", "nats://127.0.0.1:4222")
	f(t, "nats://tallyd:s3cret@nats-1:4222", "nats://tallyd:xxxxx@nats-1:4222")
	f(t, "tls://tallyd:s3cret@a:4222,tls://tallyd:0ther@b:4222", "tls://tallyd:xxxxx@a:4222,tls://tallyd:xxxxx@b:4222")
	f(t, "nats://s3cr3t-token@a:4222", "nats://xxxxx@a:4222")
	f(t, "nats://:s3cret@a:4222", "nats://:xxxxx@a:4222")
	f(t, `cannot connect to NATS at nats://u:p%40ss@h:1: nats: no servers available for connection`,
		`cannot connect to NATS at nats://u:xxxxx@h:1: nats: no servers available for connection`)
	f(t, "ws://u:pw@h:8080/path", "ws://u:xxxxx@h:8080/path")
}
