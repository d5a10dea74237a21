package spawnd_test

// The params this client sends, checked against docs/protocol.schema.json
// (generated from the daemon's param types): every method, with every
// optional field set, validates, and a misspelled field does not. The
// check is a small JSON Schema validator for the keywords that file uses;
// a keyword it does not know fails the test rather than pass unchecked.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"spawnd.dev/go/spawnd"
)

// protocolSchema is docs/protocol.schema.json of the checkout this module
// sits in; a copy of the module elsewhere (vendored) has none, and the
// test is skipped there.
func protocolSchema(t *testing.T) map[string]interface{} {
	t.Helper()
	text, err := os.ReadFile("../../docs/protocol.schema.json")
	if os.IsNotExist(err) {
		t.Skip("not in a spawnd checkout: no ../../docs/protocol.schema.json")
	}
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]interface{}
	if err := json.Unmarshal(text, &schema); err != nil {
		t.Fatal(err)
	}
	return schema
}

// validator checks instances against one schema document.
type validator struct{ root map[string]interface{} }

// annotations are keywords that constrain nothing.
var annotations = map[string]bool{"description": true, "title": true, "format": true, "default": true,
	"examples": true, "$schema": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true}

func (v validator) resolve(ref string) (interface{}, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %s is not local", ref)
	}
	var node interface{} = v.root
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := node.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("$ref %s: %s is not an object", ref, part)
		}
		if node, ok = m[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]; !ok {
			return nil, fmt.Errorf("$ref %s: no %s", ref, part)
		}
	}
	return node, nil
}

func typeIs(name string, x interface{}) bool {
	switch name {
	case "null":
		return x == nil
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "string":
		_, ok := x.(string)
		return ok
	case "object":
		_, ok := x.(map[string]interface{})
		return ok
	case "array":
		_, ok := x.([]interface{})
		return ok
	case "number":
		_, ok := x.(float64)
		return ok
	case "integer":
		f, ok := x.(float64)
		return ok && f == math.Trunc(f)
	}
	return false
}

// check says why x does not match schema s, at path; nil when it does.
func (v validator) check(s interface{}, x interface{}, path string) error {
	if b, ok := s.(bool); ok {
		if !b {
			return fmt.Errorf("%s: not allowed", path)
		}
		return nil
	}
	schema, ok := s.(map[string]interface{})
	if !ok {
		return fmt.Errorf("%s: the schema is not an object", path)
	}
	keys := make([]string, 0, len(schema))
	for k := range schema {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kw := schema[k]
		switch {
		case annotations[k] || k == "$defs" || k == "definitions":
		case k == "$ref":
			target, err := v.resolve(kw.(string))
			if err != nil {
				return err
			}
			if err := v.check(target, x, path); err != nil {
				return err
			}
		case k == "type":
			names, isList := kw.([]interface{})
			if !isList {
				names = []interface{}{kw}
			}
			matched := false
			for _, n := range names {
				matched = matched || typeIs(n.(string), x)
			}
			if !matched {
				return fmt.Errorf("%s: %v is not of type %v", path, x, kw)
			}
		case k == "enum":
			found := false
			for _, e := range kw.([]interface{}) {
				found = found || reflect.DeepEqual(e, x)
			}
			if !found {
				return fmt.Errorf("%s: %v is not one of %v", path, x, kw)
			}
		case k == "const":
			if !reflect.DeepEqual(kw, x) {
				return fmt.Errorf("%s: %v is not %v", path, x, kw)
			}
		case k == "minimum" || k == "maximum":
			f, isNumber := x.(float64)
			if isNumber && ((k == "minimum" && f < kw.(float64)) || (k == "maximum" && f > kw.(float64))) {
				return fmt.Errorf("%s: %v is past the %s %v", path, f, k, kw)
			}
		case k == "properties" || k == "required" || k == "additionalProperties":
			if err := v.checkObject(schema, x, path); err != nil {
				return err
			}
		case k == "items":
			if list, isList := x.([]interface{}); isList {
				for i, item := range list {
					if err := v.check(kw, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
						return err
					}
				}
			}
		case k == "anyOf" || k == "oneOf" || k == "allOf":
			matches := 0
			var first error
			for _, sub := range kw.([]interface{}) {
				if err := v.check(sub, x, path); err == nil {
					matches++
				} else if first == nil {
					first = err
				}
			}
			n := len(kw.([]interface{}))
			if (k == "anyOf" && matches == 0) || (k == "oneOf" && matches != 1) || (k == "allOf" && matches != n) {
				return fmt.Errorf("%s: %d of %s's %d schemas match (%v)", path, matches, k, n, first)
			}
		default:
			return fmt.Errorf("%s: the keyword %q is not one this test knows", path, k)
		}
	}
	return nil
}

func (v validator) checkObject(schema map[string]interface{}, x interface{}, path string) error {
	obj, isObject := x.(map[string]interface{})
	if !isObject {
		return nil
	}
	props, _ := schema["properties"].(map[string]interface{})
	if req, ok := schema["required"].([]interface{}); ok {
		for _, r := range req {
			if _, has := obj[r.(string)]; !has {
				return fmt.Errorf("%s: %s is required", path, r)
			}
		}
	}
	for key, value := range obj {
		if sub, ok := props[key]; ok {
			if err := v.check(sub, value, path+"."+key); err != nil {
				return err
			}
			continue
		}
		if extra, ok := schema["additionalProperties"]; ok {
			if err := v.check(extra, value, path+"."+key); err != nil {
				return fmt.Errorf("%s: %s is not a field here (%v)", path, key, err)
			}
		}
	}
	return nil
}

// recorded is what the client sent for one call.
type recorded struct {
	name   string
	method string
	params map[string]interface{}
}

// anyResult decodes as every method's result.
var anyResult = map[string]interface{}{"handle": "h-1", "state": "running", "bytes": 0, "spawns": []interface{}{},
	"version": "1", "ended": []interface{}{}, "text": ""}

// recordRequests runs each call of the client with every optional field
// set, and returns the params each sent.
func recordRequests(t *testing.T) []recorded {
	c, p := connected(t)
	ctx := testContext(t)
	op := spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run", Args: map[string]string{"a": "1"},
		Env: map[string]string{"E": "1"}, Cwd: "/work", Stdin: []byte("in"), StdinStream: true,
		Action: []string{"spawn"}, Mode: "write", Timeout: time.Second, Label: "l", Notify: true, Lease: time.Minute}
	raw := spawnd.SpawnParams{Connector: "local://x/y", Envelope: spawnd.Envelope{Program: "/bin/sh",
		Argv: []string{"sh", "-c", "true"}, Env: map[string]string{"E": "1"}, Cwd: "/work", Stdin: []byte("in")},
		StdinStream: true, Action: []string{"spawn"}, Mode: "write", Timeout: time.Second, Label: "l", Notify: true,
		Lease: time.Minute}
	calls := []struct {
		name string
		call func() error
	}{
		{"health", func() error { _, err := c.Health(ctx); return err }},
		{"connectors_status", func() error { _, err := c.ConnectorsStatus(ctx); return err }},
		{"ping", func() error { _, err := c.Ping(ctx); return err }},
		{"spawn_list", func() error { _, err := c.SpawnList(ctx); return err }},
		{"metrics", func() error { _, err := c.Metrics(ctx); return err }},
		{"spawn_op", func() error { _, err := c.SpawnOp(ctx, op); return err }},
		{"spawn", func() error { _, err := c.Spawn(ctx, raw); return err }},
		{"spawn_check with an op", func() error { _, err := c.SpawnCheck(ctx, op); return err }},
		{"spawn_check with an envelope", func() error { _, err := c.SpawnCheck(ctx, raw); return err }},
		{"spawn_status", func() error { _, err := c.SpawnStatus(ctx, "h-1", time.Second); return err }},
		{"spawn_wait", func() error { _, err := c.SpawnWait(ctx, []string{"h-1", "h-2"}, time.Second); return err }},
		{"spawn_output_size", func() error { _, err := c.SpawnOutputSize(ctx, "h-1", spawnd.Stderr); return err }},
		{"spawn_output_read", func() error {
			_, err := c.SpawnOutputRead(ctx, "h-1", spawnd.Stderr, 10, 100, time.Second)
			return err
		}},
		{"spawn_kill", func() error { return c.SpawnKill(ctx, "h-1", spawnd.SIGTERM) }},
		{"spawn_release", func() error { return c.SpawnRelease(ctx, "h-1") }},
		{"spawn_stdin_write", func() error { _, err := c.SpawnStdinWrite(ctx, "h-1", []byte("x")); return err }},
		{"spawn_stdin_close", func() error { return c.SpawnStdinClose(ctx, "h-1") }},
		{"spawn_attach", func() error { _, err := c.SpawnAttach(ctx, "h-1", "tok"); return err }},
	}
	var out []recorded
	for _, call := range calls {
		done := async(call.call)
		r := p.read()
		p.answer(r.ID, anyResult)
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		out = append(out, recorded{call.name, r.Method, r.Params})
	}
	// $/cancelRequest, as a call whose context ends sends it.
	cctx, cancel := context.WithCancel(ctx)
	done := async(func() error { _, err := c.SpawnStatus(cctx, "h-1", time.Minute); return err })
	p.read()
	cancel()
	<-done
	r := p.read()
	out = append(out, recorded{"$/cancelRequest", r.Method, r.Params})
	return out
}

func TestWireEveryRequestMatchesTheProtocolSchema(t *testing.T) {
	schema := protocolSchema(t)
	v := validator{root: schema}
	methods := schema["methods"].(map[string]interface{})
	checked := map[string]bool{}
	for _, r := range recordRequests(t) {
		s, known := methods[r.method]
		if !known {
			t.Errorf("%s sent %s, a method the schema does not name", r.name, r.method)
			continue
		}
		params := r.params
		if params == nil {
			params = map[string]interface{}{}
		}
		if err := v.check(s, params, r.method); err != nil {
			t.Errorf("%s sent params the schema refuses: %v\n%v", r.name, err, params)
		}
		checked[r.method] = true
	}
	for m := range methods {
		if !checked[m] {
			t.Errorf("the schema has %s, which no recorded request sent", m)
		}
	}
}

func TestWireTheSchemaCheckRefusesAMisspelledField(t *testing.T) {
	schema := protocolSchema(t)
	v := validator{root: schema}
	methods := schema["methods"].(map[string]interface{})
	for method, params := range map[string]map[string]interface{}{
		"spawn_status":      {"handle": "h", "wiat_ms": 1.0},
		"spawn_op":          {"connector": "c", "op": "o", "args": map[string]interface{}{}, "timeuot_ms": 1.0},
		"spawn_output_read": {"handle": "h", "offest": 0.0},
		"spawn_check":       {"connector": "c", "op": "o", "args": map[string]interface{}{}, "lables": "x"},
		"health":            {"verbose": true},
	} {
		if err := v.check(methods[method], params, method); err == nil {
			t.Errorf("%s with a misspelled field validates: %v", method, params)
		}
	}
	if err := v.check(methods["spawn_status"], map[string]interface{}{"handle": 3.0}, "spawn_status"); err == nil {
		t.Error("a handle that is a number validates")
	}
}
