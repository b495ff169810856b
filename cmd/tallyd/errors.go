package main

import "errors"

// errVersion asks run to print the version and exit (0): --version was given.
var errVersion = errors.New("version asked")
