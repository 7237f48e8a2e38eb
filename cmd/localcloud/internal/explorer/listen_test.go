package explorer

import (
	"errors"
	"net"
	"testing"
)

func TestListenFallsBackOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	if _, _, err := Listen(addr, false); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("taken port without fallback: %v, want ErrAddrInUse", err)
	}
	ln, fell, err := Listen(addr, true)
	if err != nil || !fell {
		t.Fatalf("taken port with fallback: %v, fell back %v", err, fell)
	}
	defer ln.Close()
	if ln.Addr().String() == addr {
		t.Fatal("fell back to the taken port")
	}
	free, fell, err := Listen("127.0.0.1:0", true)
	if err != nil || fell {
		t.Fatalf("free port: %v, fell back %v", err, fell)
	}
	free.Close()
	if got := URL(ln.Addr()); got != "http://"+ln.Addr().String()+"/" {
		t.Errorf("URL = %q", got)
	}
}
