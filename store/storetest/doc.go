// Package storetest is the conformance suite every store.Table implementation passes:
// table tests of the contract and a randomised model test against store.Map.
package storetest
