// lua-health runs an Argo CD resource health script (health.lua) the way Argo CD
// does: the object is a Lua table named obj, the script returns a table with
// status and message. It uses gopher-lua, Argo CD's interpreter, with the same
// libraries opened (base, table, string, math; no os or io) and gopher-json's
// "safe" helpers left out, as health scripts do not need them.
//
// Usage: lua-health health.lua OBJECT.(yaml|json) ...   prints one JSON line per object:
//        {"file": ..., "status": ..., "message": ...}
// Called by tests/gitops (the health_test.yaml cases and the test bed captures).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// toLua mirrors Argo CD's luajson-style decoding of the object (layeh.com/gopher-json DecodeValue).
func toLua(L *lua.LState, v interface{}) lua.LValue {
	switch x := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(x)
	case float64:
		return lua.LNumber(x)
	case string:
		return lua.LString(x)
	case []interface{}:
		t := L.CreateTable(len(x), 0)
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case map[string]interface{}:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	}
	return lua.LNil
}

func run(script string, path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var obj interface{}
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Argo CD: lua.NewState(lua.Options{SkipOpenLibs: true}) then opens base, table, string, math, coroutine
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}, {lua.CoroutineLibName, lua.OpenCoroutine}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return nil, fmt.Errorf("%s: health.lua failed: %w", path, err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("%s: health.lua returned %s, not a table", path, L.Get(-1).Type())
	}
	return map[string]string{
		"file":    path,
		"status":  lua.LVAsString(ret.RawGetString("status")),
		"message": lua.LVAsString(ret.RawGetString("message")),
	}, nil
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: lua-health health.lua OBJECT.yaml ...")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lua-health:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, p := range os.Args[2:] {
		res, err := run(string(script), p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lua-health:", err)
			os.Exit(1)
		}
		_ = enc.Encode(res)
	}
}
