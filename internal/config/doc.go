// Package config binds each binary's settings to command-line flags and
// DQ_* environment variables (flag, then environment, then default), and
// holds the settings every binary shares.
package config
