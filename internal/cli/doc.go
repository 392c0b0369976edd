// Package cli is the machinery every forkline subcommand shares: flags
// parsed into an options struct (with the required flags first and the rest
// in named groups in the help), positional arguments anywhere among the
// flags, an unknown flag or subcommand answered with the known ones, -json
// and -quiet on every subcommand, the root context cancelled by the first
// SIGINT or SIGTERM with a hard exit on the second, and the exit codes, in
// one place.
//
// It must not know forkline's packages (it imports the standard library
// only): cmd/forkline maps each library error to one of the codes below and
// wires each subcommand to one library call.
package cli
