// Package testrules holds tests about forkline's tests: rules every test
// file of the module keeps, checked by reading the source (go/ast). It has
// no code of its own and nothing imports it.
//
// The rule so far: a test never calls t.FailNow off the test goroutine —
// not through require.*, t.Fatal*, t.Skip*, nor a helper that does. testing
// says FailNow "must be called from the goroutine running the test", and a
// call elsewhere (a pool worker, a goroutine, an HTTP handler) exits only
// that goroutine: the test goes on with a half-checked state or hangs.
package testrules
