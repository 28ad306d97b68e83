package config_test

import (
	"testing"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/work"
)

// TestEverySizeSettingTakesUnits: docs/configuration.md writes DQ_MAX_BODY=1MiB; every
// size setting of every binary reads units.
func TestEverySizeSettingTakesUnits(t *testing.T) {
	env := map[string]string{"DQ_MAX_BODY": "2MiB", "DQ_MAX_RECORD_BYTES": "1MB", "DQ_MAX_PAYLOAD": "512KiB"}
	getenv := func(k string) string { return env[k] }

	var d daemon.Config
	b := config.NewBinder("daemon")
	d.Bind(b)
	if err := b.Parse(nil, getenv, nil); err != nil {
		t.Fatal(err)
	}
	if d.MaxBody != 2<<20 || d.MaxRecordBytes != 1000000 {
		t.Errorf("daemon: max body %d, max record bytes %d", d.MaxBody, d.MaxRecordBytes)
	}

	var w work.Config
	b = config.NewBinder("work")
	w.Bind(b)
	if err := b.Parse(nil, getenv, nil); err != nil {
		t.Fatal(err)
	}
	if w.MaxPayload != 512<<10 {
		t.Errorf("work: max payload %d", w.MaxPayload)
	}
}
