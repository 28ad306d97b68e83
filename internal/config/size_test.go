package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1000", 1000},
		{"0", 0},
		{"1000B", 1000},
		{"1KB", 1000},
		{"1kb", 1000},
		{"2MB", 2000000},
		{"1GB", 1000000000},
		{"512KiB", 512 << 10},
		{"1MiB", 1 << 20},
		{"2MiB", 2 << 20},
		{"1mib", 1 << 20},
		{"1 MiB", 1 << 20},
		{" 3GiB ", 3 << 30},
		{"1TiB", 1 << 40},
		{"1.5MiB", 3 << 19},
		{"64K", 64 << 10},
		{"1M", 1 << 20},
		{"0.5KiB", 512},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "-1MiB", "+5", "1e6", "0x10", "1_000", "1.5", "1.1KiB", "1 Mb/s", "lots", "9999999TiB", "99999999999999999999"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for _, n := range []int64{0, 1000, 1 << 20, 512 << 10, 3 << 30, 1000000} {
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q reads back as %d, %v", n, FormatSize(n), back, err)
		}
	}
}

// Every size setting takes units from the flag and from the environment;
// a bad one names its variable.
func TestSizeSettings(t *testing.T) {
	var body int64
	var payload int
	b := NewBinder("test")
	b.Size(&body, "max-body", "DQ_MAX_BODY", 1<<20, "")
	b.SizeInt(&payload, "max-payload", "DQ_MAX_PAYLOAD", 1<<20, "")
	env := map[string]string{"DQ_MAX_BODY": "2MiB"}
	if err := b.Parse([]string{"-max-payload", "512KiB"}, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	if body != 2<<20 || payload != 512<<10 {
		t.Fatalf("max-body %d, max-payload %d", body, payload)
	}
	if s := fmt.Sprint(b.LogAttrs()); !strings.Contains(s, "max-body=2MiB") || !strings.Contains(s, "max-payload=512KiB") {
		t.Errorf("logged as %s", s)
	}
	b2 := NewBinder("test")
	b2.Size(&body, "max-body", "DQ_MAX_BODY", 1<<20, "")
	err := b2.Parse(nil, func(k string) string {
		if k == "DQ_MAX_BODY" {
			return "2 megs"
		}
		return ""
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "DQ_MAX_BODY") {
		t.Fatalf("bad size: %v", err)
	}
}
