package store_test

import (
	"testing"

	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/storetest"
)

func TestMapConformance(t *testing.T) {
	storetest.Run(t, func(fields int) store.Table { return store.NewMap(fields) })
}
