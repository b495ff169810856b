package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestProbe(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "lagging", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	f := func(t *testing.T, url string, want int) {
		t.Helper()
		if got := run([]string{url}, io.Discard); got != want {
			t.Errorf("probe %s = %d, want %d", url, got, want)
		}
	}
	f(t, srv.URL, 0)
	ready.Store(false)
	f(t, srv.URL, 1)
	srv.Close()
	f(t, srv.URL, 1) // nothing listening
}
