package diloco

import (
	"testing"

	"github.com/intellect-node/intellect-node/internal/leaktest"
)

// TestMain fails the package's tests if a goroutine is left running after
// them: every loop joins its reduce worker.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
