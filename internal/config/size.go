package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize accepts (case-insensitive): IEC
// binary units and SI decimal ones.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000}, {"tb", 1000 * 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

// ParseSize reads a byte size: a whole number of bytes ("1000", "1000B")
// or a number with a unit, binary (KiB, MiB, GiB, TiB; K, M, G mean the
// same) or decimal (KB, MB, GB, TB), in any case, with an optional space:
// "1MiB", "512KiB", "2MB", "1.5 MiB". A fraction must come to whole bytes.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	if t == "" || strings.ContainsAny(t, "+-eEx_") {
		return 0, fmt.Errorf("size %q: want bytes or a number with KiB, MiB, GiB, KB, MB or GB", s)
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want bytes or a number with KiB, MiB, GiB, KB, MB or GB", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return int64(v), nil
}

// FormatSize writes n the shortest exact way ParseSize reads back:
// "1MiB", "512KiB", "1000".
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// SizeValue is a flag.Value of a byte size (see ParseSize); it points at
// an int64 or an int.
type SizeValue struct {
	p64 *int64
	p   *int
}

// NewSizeValue sets *p to def and returns a flag.Value that parses sizes into it.
func NewSizeValue(p *int64, def int64) *SizeValue {
	*p = def
	return &SizeValue{p64: p}
}

// NewIntSizeValue is NewSizeValue for an int.
func NewIntSizeValue(p *int, def int) *SizeValue {
	*p = def
	return &SizeValue{p: p}
}

func (v *SizeValue) String() string {
	switch {
	case v == nil:
		return ""
	case v.p64 != nil:
		return FormatSize(*v.p64)
	case v.p != nil:
		return FormatSize(int64(*v.p))
	}
	return ""
}

// Set parses a size.
func (v *SizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if v.p64 != nil {
		*v.p64 = n
		return nil
	}
	if n > math.MaxInt32 {
		return errors.New("size " + s + ": too large")
	}
	*v.p = int(n)
	return nil
}

// Size binds a byte-size setting (see ParseSize: 1000, 512KiB, 1MiB, 2MB).
func (b *Binder) Size(p *int64, name, env string, def int64, usage string) {
	b.fs.Var(NewSizeValue(p, def), name, b.note(name, env, usage+" (bytes, or with a unit: 512KiB, 1MiB, 2MB)"))
}

// SizeInt is Size for an int setting.
func (b *Binder) SizeInt(p *int, name, env string, def int, usage string) {
	b.fs.Var(NewIntSizeValue(p, def), name, b.note(name, env, usage+" (bytes, or with a unit: 512KiB, 1MiB, 2MB)"))
}
