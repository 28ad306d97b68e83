//go:build !dqplant

package fault

// Plant reports whether the planted bug name is active: never, in a
// normal build (the constant answer compiles the planted branch away).
func Plant(string) bool { return false }
