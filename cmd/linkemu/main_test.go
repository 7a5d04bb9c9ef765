package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const cfgJSON = `{"hosts":[
 {"name":"a","dev":"t0","addr":"10.77.0.1"},
 {"name":"b","dev":"t1","addr":"10.77.0.2"}],
 "default":{"delay_ms":5}}`

// TestLoad reads a configuration from a file and rejects a bad one.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(cfgJSON), 0o600)
	os.WriteFile(bad, []byte(strings.Replace(cfgJSON, `"delay_ms":5`, `"delay_ms":-5`, 1)), 0o600)
	c, err := load(good)
	if err != nil || len(c.Hosts) != 2 {
		t.Fatalf("load good: %+v, %v", c, err)
	}
	if _, err := load(bad); err == nil {
		t.Error("load accepted a negative delay")
	}
}

// TestReloadRejectsNewHosts: SIGHUP may change links, not hosts.
func TestReloadRejectsNewHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(cfgJSON), 0o600)
	old, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte(strings.Replace(cfgJSON, "10.77.0.2", "10.77.0.3", 1)), 0o600)
	if err := reload(path, old, nil); err == nil || !strings.Contains(err.Error(), "hosts") {
		t.Errorf("reload with a changed host: %v, want a hosts error", err)
	}
}
