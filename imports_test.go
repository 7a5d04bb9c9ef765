package intellectnode_test

import (
	"os/exec"
	"strings"
	"testing"
)

// modulePath is this repository's module path.
const modulePath = "github.com/intellect-node/intellect-node"

// TestImportDirections enforces the package boundaries of docs/design.md:
// kernels ← train ← node; mesh ← p2p ← node; cmd → node. kernels and mesh
// import only the standard library, nothing imports node or cmd except cmd,
// and the lab libraries under internal/ (link emulator, WAN and NAT
// harnesses) import only each other; cmd's harness commands use them.
func TestImportDirections(t *testing.T) {
	allowed := map[string][]string{ // package dir → module-internal prefixes it may import
		"kernels":  {"kernels"},
		"mesh":     {"mesh"},
		"train":    {"train", "kernels"},
		"p2p":      {"p2p", "mesh"},
		"node":     {"node", "p2p", "mesh", "train", "kernels"},
		"internal": {"internal"},
		"cmd":      {"cmd", "internal", "node", "p2p", "mesh", "train", "kernels"},
	}
	for dir, ok := range allowed {
		pkgs := goList(t, "./"+dir+"/...", "{{.ImportPath}}")
		for _, pkg := range pkgs {
			for _, dep := range goList(t, pkg, "{{range .Deps}}{{.}}\n{{end}}") {
				checkDep(t, dir, pkg, dep, ok)
			}
		}
	}
}

func checkDep(t *testing.T, dir, pkg, dep string, ok []string) {
	t.Helper()
	if strings.HasPrefix(dep, modulePath+"/") {
		rel := strings.TrimPrefix(dep, modulePath+"/")
		for _, p := range ok {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return
			}
		}
		t.Errorf("%s imports %s: %s may not depend on it", pkg, dep, dir)
		return
	}
	if dir != "kernels" && dir != "mesh" {
		return
	}
	// kernels and mesh: standard library only (no dot in the first path element).
	if first, _, _ := strings.Cut(dep, "/"); strings.Contains(first, ".") {
		t.Errorf("%s imports %s: %s may import only the standard library", pkg, dep, dir)
	}
}

func goList(t *testing.T, pattern, format string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	var res []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			res = append(res, l)
		}
	}
	return res
}
