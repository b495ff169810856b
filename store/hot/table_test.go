package hot_test

import (
	"testing"

	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
	"github.com/tally-dev/tally/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(fields int) store.Table { return hot.New(fields) })
}
