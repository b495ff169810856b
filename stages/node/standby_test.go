package node

import "testing"

// A standby must see each backup of a piece reached while that backup is current: the
// owner purges up to the backup before the current one, so a backup replaced before it
// was reached, or never seen at all, may have been purged past.
func TestBackupWatch(t *testing.T) {
	type step struct {
		gen     uint64
		reached bool
		ok      bool
	}
	for name, steps := range map[string][]step{
		"each backup reached":            {{1, false, true}, {1, true, true}, {2, false, true}, {2, true, true}, {3, true, true}, {4, false, true}},
		"reached late, on the next one":  {{1, false, true}, {2, true, false}},
		"a backup passed between looks":  {{1, true, true}, {3, true, false}},
		"reached once is enough":         {{1, true, true}, {1, false, true}, {2, false, true}},
		"the backup primed from, passed": {{2, true, false}},
	} {
		w := backupWatch{gen: 0, reached: true} // primed from generation 0
		for i, s := range steps {
			if got := w.observe(s.gen, s.reached); got != s.ok {
				t.Fatalf("%s: step %d (generation %d, reached %v): ok %v, want %v", name, i, s.gen, s.reached, got, s.ok)
			}
		}
	}
}
