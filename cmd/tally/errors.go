package main

import "errors"

// errUsage marks a mistake in the command line (matched with errors.Is): exit code 2.
var errUsage = errors.New("usage")
