package redisstore

import (
	"regexp"
	"strings"
)

// A script is common.lua's helpers followed by the script's own source.
// Redis runs a script's body from the top on every call, so each helper
// of common.lua is a closure made anew per call: all of them cost about
// 3 µs of redis-server CPU per call on the 2-vCPU VM, as much as the
// call's own dispatch. prelude keeps only the top-level definitions a
// script uses, directly or through another helper, in common.lua's order
// (a Lua local must be defined before the code that names it).
//
// A definition is a top-level "local" statement of common.lua (a "local
// function" up to its "end" at column 0, or a one-line "local name = ...");
// a script uses it when the name appears in its source as a word (a name
// inside a comment or a string only costs a closure). The definitions
// are read once (commonDefs); prelude runs once per script, at init.
type preludeDef struct {
	name string
	src  string
}

var (
	localDef = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)
	luaWord  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// preludeDefs splits common.lua into its top-level definitions: a
// "local function" runs to the first "end" at column 0, any other "local"
// statement is one line. Anything else outside a definition but blank
// lines and comments panics (at init: every test that opens a store
// fails): it would be dropped from every script without a word.
func preludeDefs(common string) []preludeDef {
	var defs []preludeDef
	inFunc := false
	for line := range strings.Lines(common) {
		if inFunc {
			defs[len(defs)-1].src += line
			inFunc = strings.TrimRight(line, "\n") != "end"
			continue
		}
		m := localDef.FindStringSubmatch(line)
		switch {
		case m != nil:
			defs = append(defs, preludeDef{name: m[1], src: line})
			inFunc = strings.HasPrefix(line, "local function ")
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "--"):
		default:
			panic("redisstore: common.lua: a top-level statement that is not a local definition: " + line)
		}
	}
	if inFunc {
		panic("redisstore: common.lua: the last function has no end at column 0")
	}
	return defs
}

// prelude is the part of common.lua that src needs.
func prelude(defs []preludeDef, src string) string {
	index := make(map[string]int, len(defs))
	for i, d := range defs {
		index[d.name] = i
	}
	need := make([]bool, len(defs))
	var visit func(text string)
	visit = func(text string) {
		for _, w := range luaWord.FindAllString(text, -1) {
			if i, ok := index[w]; ok && !need[i] {
				need[i] = true
				visit(defs[i].src)
			}
		}
	}
	visit(src)
	var b strings.Builder
	for i, d := range defs {
		if need[i] {
			b.WriteString(d.src)
		}
	}
	return b.String()
}

var commonDefs = preludeDefs(commonLua)
