package listen

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestFallsBackOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	if _, _, err := TCP("the explorer", addr, false); !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), "the explorer") {
		t.Fatalf("taken port without fallback: %v, want ErrAddrInUse naming the explorer", err)
	}
	ln, fell, err := TCP("the explorer", addr, true)
	if err != nil || !fell {
		t.Fatalf("taken port with fallback: %v, fell back %v", err, fell)
	}
	defer ln.Close()
	if ln.Addr().String() == addr {
		t.Fatal("fell back to the taken port")
	}
	free, fell, err := TCP("the explorer", "127.0.0.1:0", true)
	if err != nil || fell {
		t.Fatalf("free port: %v, fell back %v", err, fell)
	}
	free.Close()
}
