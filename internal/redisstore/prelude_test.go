package redisstore

import (
	"strings"
	"testing"
)

func TestPreludeKeepsWhatAScriptUses(t *testing.T) {
	common := `-- helpers
local a_val = 1

local function f1()
  return a_val
end
-- f2 calls f1
local function f2()
  if true then
    return f1()
  end
end
local function f3() return 3
end
local b_val = 'f3 is named in this string only'
`
	defs := preludeDefs(common)
	var names []string
	for _, d := range defs {
		names = append(names, d.name)
	}
	if got := strings.Join(names, ","); got != "a_val,f1,f2,f3,b_val" {
		t.Fatalf("definitions %s", got)
	}
	got := prelude(defs, "return f2() -- not f3_x")
	want := "local a_val = 1\nlocal function f1()\n  return a_val\nend\nlocal function f2()\n  if true then\n    return f1()\n  end\nend\n"
	if got != want {
		t.Fatalf("prelude of f2:\n%s\nwant:\n%s", got, want)
	}
	// a name in a string still counts (a closure too many, never one too few)
	if got := prelude(defs, "return b_val"); !strings.Contains(got, "local function f3()") {
		t.Fatalf("prelude of b_val lacks f3:\n%s", got)
	}
	if got := prelude(defs, "return 1"); got != "" {
		t.Fatalf("prelude of a script that names no helper: %q", got)
	}
}

func TestPreludeRefusesAStrayStatement(t *testing.T) {
	for _, common := range []string{
		"local function f()\n  return 1\nend\nredis.setresp(3)\n",
		"local function f()\n  return 1\n",
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for %q", common)
				}
			}()
			preludeDefs(common)
		}()
	}
}

// Every helper of common.lua is a definition of its own, and the scripts
// of this package leave most of them out.
func TestPreludeOfThePackagesScripts(t *testing.T) {
	if len(commonDefs) < 20 {
		t.Fatalf("common.lua read as %d definitions", len(commonDefs))
	}
	full := len(commonLua)
	for name, src := range map[string]string{"schedule.lua": scheduleLua, "take.lua": takeLua, "finish.lua": finishLua} {
		p := prelude(commonDefs, src)
		if len(p) == 0 || len(p) >= full {
			t.Errorf("%s: prelude of %d bytes (common.lua %d)", name, len(p), full)
		}
	}
}

// TestScriptNames: every script made by script() is named by its .lua
// file's first word, under the SHA1 EVALSHA sends.
func TestScriptNames(t *testing.T) {
	names := ScriptNames()
	for want, sc := range map[string]interface{ Hash() string }{
		"claim": claimScript, "finish": finishScript, "take": takeScript, "settle": settleScript, "schedule": scheduleScript,
	} {
		if got := names[sc.Hash()]; got != want {
			t.Errorf("ScriptNames()[%s] = %q, want %q", sc.Hash(), got, want)
		}
	}
	for sha, name := range names {
		if name == "?" || strings.ContainsAny(name, " :-") {
			t.Errorf("script %s is named %q: its .lua file's first line is not \"-- <name>: ...\"", sha, name)
		}
	}
}
