//go:build ignore

// gen wrote events.3.tlyb: a backup of event partition 3 as Tally wrote it at commit
// eae36bc, the last before like records (layout 1: a like is a relation key and two list
// keys), in backup format TLYB2. It builds against that commit only:
//
//	mkdir -p /tmp/old/cmd/gen && git archive eae36bc | tar -x -C /tmp/old
//	sed 1,2d testdata/layout1/gen.go >/tmp/old/cmd/gen/main.go
//	go -C /tmp/old run ./cmd/gen "$PWD/testdata/layout1/events.3.tlyb"
package main

import (
	"log"
	"os"

	"github.com/dgraph-io/badger/v4"

	"github.com/tally-dev/tally/store/cold"
)

func main() {
	dir, err := os.MkdirTemp("", "gen")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := cold.Open(cold.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	const p = 3
	err = db.Badger().Update(func(txn *badger.Txn) error {
		// User u (1 to 40) likes u posts: the i-th is post 1000+(7u+13i)%97, liked at
		// second i (plus u ms), placed at 100u+i+1. Users 33 to 40 are heavy.
		for u := uint64(1); u <= 40; u++ {
			for i := uint64(0); i < u; i++ {
				post := 1000 + (7*u+13*i)%97
				ts := int64(1_700_000_000_000 + i*1000 + u)
				if _, _, err := cold.RelateAt(txn, p, cold.Like, cold.Rel{A: u, B: post}, ts, 100*u+i+1); err != nil {
					return err
				}
			}
		}
		// User 1 follows user 2, both said to be in partition 3.
		if _, err := cold.Relate(txn, p, cold.Follow, cold.Rel{A: 1, B: 2}, 1_700_000_000_000); err != nil {
			return err
		}
		if err := cold.AddFollower(txn, p, cold.Rel{A: 1, B: 2}, 1_700_000_000_000); err != nil {
			return err
		}
		return cold.PutStage(txn, p, &cold.StageState{Pos: 5000, Log: 7})
	})
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Create(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Backup(f, cold.EventPart(p)); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}
