package cold

import "github.com/tally-dev/tally/store/internal/keys"

// key builds keys from a namespace byte and big-endian fields (see store/internal/keys).
type key = keys.Key

func newKey(ns byte, capacity int) key { return keys.New(ns, capacity) }
